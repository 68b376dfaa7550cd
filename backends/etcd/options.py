"""The options of ``etcd://`` URLs and keyword arguments, and the reference's environment variables.

Where the reference runtime gives 0 a meaning ("the default") we do too; anything it would
silently replace by a default (``ETCD_LEASE_TTL=abc``) is a ValidationError here, because a
typo in a timeout should not quietly become another timeout.
"""

from __future__ import annotations

import urllib.parse

from discovery_sync.errors import ValidationError
from discovery_sync.logical_id import PARSERS as LOGICAL_ID_PARSERS
from discovery_sync.options import (
    DEFAULT_CONNECT_TIMEOUT,
    MAX_SECONDS,
    OptionSet,
    boolean,
    connect_timeout,
    duration,
    from_environment,
    integer,
    text,
    zero_is_default,
)

DEFAULT_ENDPOINTS = "http://localhost:2379"
DEFAULT_TTL = 10
#: the reference's variable that sets connect_timeout when the URL and the keywords do not
CONNECT_TIMEOUT_VARIABLE = "ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS"
RENAMED = {
    "startup_timeout": (
        "this option is now called connect_timeout (seconds connect() keeps trying to reach etcd, default "
        f"{DEFAULT_CONNECT_TIMEOUT:g}; none waits without limit; 0 is no longer accepted: give a small number "
        "such as 0.1 to try about once)"
    )
}

ttl = integer(1, int(MAX_SECONDS), "seconds")
OPTIONS = OptionSet(
    "etcd",
    {
        "ttl": ttl,
        "prefix": text,
        "username": text,
        "password": text,
        "connect_timeout": connect_timeout,
        # below a second, a quiet stream would be re-opened in a tight loop
        "watch_read_timeout": duration(1.0),
        # below 0.1 s even a loopback etcd could not answer
        "request_timeout": duration(0.1),
        "read_only": boolean,
        # accepted so that a logical id is refused with the reason (see from_url), not as unknown
        **LOGICAL_ID_PARSERS,
    },
    refused=RENAMED,
)


def env_ttl() -> int:
    """``ETCD_LEASE_TTL``: seconds; unset, blank or 0 mean the default (10), as in the reference."""
    value = from_environment("ETCD_LEASE_TTL", integer(0, int(MAX_SECONDS), "seconds"), 0)
    return value or DEFAULT_TTL


def env_connect_timeout() -> float | None:
    """``ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS``: what the ``connect_timeout`` option accepts (seconds,
    or ``none`` to wait without limit); unset, blank or 0 mean the default (10 s)."""
    default: float | None = DEFAULT_CONNECT_TIMEOUT
    return from_environment(CONNECT_TIMEOUT_VARIABLE, zero_is_default(connect_timeout, default), default)


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
