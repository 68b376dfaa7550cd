"""etcd backend: ``etcd://host:port[,host:port][/prefix][?options]`` (see :class:`EtcdDiscovery`).

Options (URL query parameters or keyword arguments of ``connect``; bad values are a
ValidationError naming the option): ``ttl`` (lease seconds, default 10), ``connect_timeout``
(seconds connecting keeps trying to reach etcd in all, every endpoint and retry included,
default 10 as etcd clients dial; ``none``/None: without limit; see
:func:`discovery_sync.options.connect_timeout`), ``request_timeout``
(seconds each request may take in all, every member tried, at least 0.1, default 10; one member
is given a patience derived from the TTL, see :mod:`.deadlines`), ``watch_read_timeout``
(seconds a watch stream may stay quiet, at least 1, default 60), ``read_only`` (true: never
write and never grant a lease; the instance id is then a random 63-bit number naming no
lease), ``prefix``, ``username``, ``password``.

Connecting checks that etcd answers and grants no lease: the lease is granted on first need
(the first ``register`` or read of ``instance_id``).

Without hosts in the URL the reference's variables apply: ``ETCD_ENDPOINTS`` (default
``http://localhost:2379``), ``ETCD_LEASE_TTL`` (default 10; 0 → 10; not a number: ValidationError),
``ETCD_AUTH_USERNAME``/``ETCD_AUTH_PASSWORD``, ``ETCD_AUTH_CA``, ``ETCD_AUTH_CLIENT_CERT``,
``ETCD_AUTH_CLIENT_KEY`` (PEM text or a path) and ``ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS`` (the
``connect_timeout`` when the URL and the keywords give none: seconds or ``none``; 0 → 10). The former
``startup_timeout`` option is refused with a message naming ``connect_timeout``.

etcd cannot host a failover cohort: a writing client given a logical instance id (the
``logical_instance_id``/``logical_instance_key`` options, or ``DYN_DISCOVERY_LOGICAL_INSTANCE_ID``
/``_KEY``) is refused at connect, before any request (:data:`NO_COHORT`).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from discovery_sync.logical_id import refuse_cohort

from .backend import EtcdDiscovery
from .options import DEFAULT_ENDPOINTS, OPTIONS, endpoints, env_connect_timeout, env_ttl

__all__ = ["EtcdDiscovery", "from_url"]

#: why an etcd client cannot share its instance id with a failover cohort
NO_COHORT = (
    "an etcd client's instance id is its lease id (the reference grants each client's lease with the "
    "instance id as the lease id, and its records live and die with that lease), and two live clients "
    "cannot share one lease: the standby's grant would fail, or one member's revoke or expiry would "
    "delete the other's records"
)


def _pem_path(value: str) -> str:
    """A path to the PEM material: ``value`` itself, or a private temp file holding PEM text."""
    if "-----BEGIN" not in value:
        return value
    handle = tempfile.NamedTemporaryFile("w", prefix="discovery-sync-etcd-", suffix=".pem", delete=False)  # noqa: SIM115
    with handle:
        handle.write(value)
    return handle.name


def from_url(netloc: str, path: str, options: dict[str, Any]) -> EtcdDiscovery:
    """``etcd://host:port[,host:port][/prefix][?options]`` (see :mod:`.options`); without hosts,
    ``ETCD_ENDPOINTS``; the environment's settings, then the URL's options, then keyword arguments."""
    env = os.environ
    refuse_cohort(options, OPTIONS, backend="etcd", reason=NO_COHORT, environ=env)
    if netloc:
        hosts = endpoints(netloc, "the etcd URL")
    else:
        hosts = endpoints(env.get("ETCD_ENDPOINTS", "").strip() or DEFAULT_ENDPOINTS, "ETCD_ENDPOINTS")
    settings: dict[str, Any] = {"ttl": env_ttl(), "connect_timeout": env_connect_timeout()}
    settings["prefix"] = OPTIONS.check("prefix", path.strip("/"))
    if env.get("ETCD_AUTH_USERNAME"):
        settings["username"] = env["ETCD_AUTH_USERNAME"]
        settings["password"] = env.get("ETCD_AUTH_PASSWORD", "")
    if env.get("ETCD_AUTH_CA"):
        settings["verify"] = _pem_path(env["ETCD_AUTH_CA"])
    if env.get("ETCD_AUTH_CLIENT_CERT") and env.get("ETCD_AUTH_CLIENT_KEY"):
        settings["cert"] = (_pem_path(env["ETCD_AUTH_CLIENT_CERT"]), _pem_path(env["ETCD_AUTH_CLIENT_KEY"]))
    settings.update(OPTIONS.parse(options))
    if not any(e.startswith("https://") for e in hosts) and "cert" in settings:
        hosts = [e.replace("http://", "https://", 1) for e in hosts]
    return EtcdDiscovery(hosts, **settings)
