"""The options of ``etcd://`` URLs and keyword arguments, and the reference's environment variables.

Where the reference runtime gives 0 a meaning ("the default") we do too; anything it would
silently replace by a default (``ETCD_LEASE_TTL=abc``) is a ValidationError here, because a
typo in a timeout should not quietly become another timeout.
"""

from __future__ import annotations

import urllib.parse

from discovery_sync.errors import ValidationError
from discovery_sync.logical_id import PARSERS as LOGICAL_ID_PARSERS
from discovery_sync.options import MAX_SECONDS, OptionSet, boolean, duration, from_environment, integer, text

DEFAULT_ENDPOINTS = "http://localhost:2379"
DEFAULT_TTL = 10
DEFAULT_STARTUP_TIMEOUT = 120.0

ttl = integer(1, int(MAX_SECONDS), "seconds")
startup_timeout = duration(0.0)
OPTIONS = OptionSet(
    "etcd",
    {
        "ttl": ttl,
        "prefix": text,
        "username": text,
        "password": text,
        "startup_timeout": startup_timeout,
        # below a second, a quiet stream would be re-opened in a tight loop
        "watch_read_timeout": duration(1.0),
        # below 0.1 s even a loopback etcd could not answer
        "request_timeout": duration(0.1),
        "read_only": boolean,
        # accepted so that a logical id is refused with the reason (see from_url), not as unknown
        **LOGICAL_ID_PARSERS,
    },
)


def env_ttl() -> int:
    """``ETCD_LEASE_TTL``: seconds; unset, blank or 0 mean the default (10), as in the reference."""
    value = from_environment("ETCD_LEASE_TTL", integer(0, int(MAX_SECONDS), "seconds"), 0)
    return value or DEFAULT_TTL


def env_startup_timeout() -> float:
    """``ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS``: unset, blank or 0 mean the default (120 s)."""
    value = from_environment("ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS", startup_timeout, 0.0)
    return value or DEFAULT_STARTUP_TIMEOUT


def endpoints(hosts: str, source: str) -> list[str]:
    """``host:port[,host:port]`` (or ``http[s]://host:port`` each) as gateway URLs; ``source``
    names where they came from for the error message."""
    found = []
    for host in hosts.split(","):
        host = host.strip()
        if host:
            found.append(_endpoint(host if "://" in host else f"http://{host}", source))
    if not found:
        raise ValidationError(f"{source} names no etcd endpoint: use host:port[,host:port]")
    return found


def _endpoint(url: str, source: str) -> str:
    accepted = "use host:port or http(s)://host:port, several separated by commas"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
    except ValueError as exc:
        raise ValidationError(f"{source}: etcd endpoint {url!r} is not valid ({exc}): {accepted}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or "\0" in url:
        raise ValidationError(f"{source}: etcd endpoint {url!r} is not valid: {accepted}")
    return url
