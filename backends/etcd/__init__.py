"""etcd backend: ``etcd://host:port[,host:port][/prefix]`` (see :class:`EtcdDiscovery`).

Without hosts in the URL the reference's variables apply: ``ETCD_ENDPOINTS`` (default
``http://localhost:2379``), ``ETCD_LEASE_TTL`` (default 10; 0 or unparsable → 10),
``ETCD_AUTH_USERNAME``/``ETCD_AUTH_PASSWORD``, ``ETCD_AUTH_CA``, ``ETCD_AUTH_CLIENT_CERT``,
``ETCD_AUTH_CLIENT_KEY`` (PEM text or a path) and ``ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from discovery_sync.errors import ValidationError

from .backend import EtcdDiscovery

__all__ = ["EtcdDiscovery", "from_url"]

DEFAULT_ENDPOINTS = "http://localhost:2379"


def _env_ttl() -> int:
    try:
        ttl = int(os.environ.get("ETCD_LEASE_TTL", "10"))
    except ValueError:
        return 10
    return ttl if ttl > 0 else 10


def _pem_path(value: str) -> str:
    """A path to the PEM material: ``value`` itself, or a private temp file holding PEM text."""
    if "-----BEGIN" not in value:
        return value
    handle = tempfile.NamedTemporaryFile("w", prefix="discovery-sync-etcd-", suffix=".pem", delete=False)  # noqa: SIM115
    with handle:
        handle.write(value)
    return handle.name


def _endpoints(hosts: str) -> list[str]:
    endpoints = []
    for host in hosts.split(","):
        host = host.strip()
        if host:
            endpoints.append(host if "://" in host else f"http://{host}")
    return endpoints


def from_url(netloc: str, path: str, options: dict[str, Any]) -> EtcdDiscovery:
    env = os.environ
    endpoints = _endpoints(netloc or env.get("ETCD_ENDPOINTS", "") or DEFAULT_ENDPOINTS)
    settings: dict[str, Any] = {"prefix": path.strip("/"), "ttl": _env_ttl()}
    if env.get("ETCD_AUTH_USERNAME"):
        settings["username"] = env["ETCD_AUTH_USERNAME"]
        settings["password"] = env.get("ETCD_AUTH_PASSWORD", "")
    if env.get("ETCD_AUTH_CA"):
        settings["verify"] = _pem_path(env["ETCD_AUTH_CA"])
    if env.get("ETCD_AUTH_CLIENT_CERT") and env.get("ETCD_AUTH_CLIENT_KEY"):
        settings["cert"] = (_pem_path(env["ETCD_AUTH_CLIENT_CERT"]), _pem_path(env["ETCD_AUTH_CLIENT_KEY"]))
    if env.get("ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS"):
        settings["startup_timeout"] = float(env["ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS"])
    for key, value in options.items():
        if key in ("ttl",):
            settings[key] = int(value)
        elif key in ("startup_timeout", "watch_read_timeout"):
            settings[key] = float(value)
        elif key in ("username", "password", "prefix"):
            settings[key] = value
        else:
            raise ValidationError(f"unknown etcd option {key!r}: use ttl, prefix, username, password, startup_timeout")
    if any(e.startswith("https://") for e in endpoints) is False and "cert" in settings:
        endpoints = [e.replace("http://", "https://", 1) for e in endpoints]
    return EtcdDiscovery(endpoints, **settings)
