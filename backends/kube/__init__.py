"""Kubernetes backend: ``kube://`` (see :class:`KubeDiscovery` and DESIGN §8).

Identity comes from the Downward-API files in ``/etc/podinfo``, else ``POD_NAME``, ``POD_UID``
and ``POD_NAMESPACE``; ``DYN_KUBE_DISCOVERY_MODE`` (``pod`` | ``container``) and
``CONTAINER_NAME`` choose the CR per pod or per container. Connect options override them:
``pod_name``, ``pod_uid``, ``namespace``, ``container_name``, ``mode``, ``podinfo_dir``; and
``kubeconfig`` (else in-cluster configuration, else the default kubeconfig), ``ready_timeout``,
``write_timeout``, ``sync_timeout``, ``consistent_reads``. The CRD and RBAC to install are in
``manifests/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from discovery_sync.errors import ValidationError

from .api import KubeApi, make_api_client
from .backend import KubeDiscovery
from .identity import DEFAULT_PODINFO_DIR, PodIdentity, instance_id_for, resolve_identity

__all__ = ["MANIFESTS", "KubeDiscovery", "PodIdentity", "from_url", "instance_id_for", "resolve_identity"]

MANIFESTS = Path(__file__).parent / "manifests"

_IDENTITY_OPTIONS = ("pod_name", "pod_uid", "namespace", "container_name", "mode", "podinfo_dir")
_FLOAT_OPTIONS = ("ready_timeout", "write_timeout", "sync_timeout")
_OPTIONS = (*_IDENTITY_OPTIONS, "kubeconfig", *_FLOAT_OPTIONS, "consistent_reads")


def _float(key: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"kube option {key} must be a number of seconds, got {value!r}") from None
    if number < 0:
        raise ValidationError(f"kube option {key} must not be negative, got {value!r}")
    return number


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValidationError(f"kube option {key} must be true or false, got {value!r}")


def from_url(netloc: str, path: str, options: dict[str, Any]) -> KubeDiscovery:
    """``kube://[?options]``: a client for this pod (identity from options, podinfo files, environment)."""
    if netloc or path.strip("/"):
        raise ValidationError(
            f"the kube URL takes no host or path (got {netloc + path!r}): use kube:// and options such as namespace="
        )
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValidationError(f"unknown kube option(s) {', '.join(unknown)}: use {', '.join(_OPTIONS)}")
    identity = resolve_identity(
        **{key: options[key] for key in _IDENTITY_OPTIONS if key in options and key != "podinfo_dir"},
        podinfo_dir=options.get("podinfo_dir") or DEFAULT_PODINFO_DIR,
    )
    settings: dict[str, Any] = {key: _float(key, options[key]) for key in _FLOAT_OPTIONS if key in options}
    if "consistent_reads" in options:
        settings["consistent_reads"] = _bool("consistent_reads", options["consistent_reads"])
    api = KubeApi(make_api_client(options.get("kubeconfig")), identity.namespace)
    try:
        return KubeDiscovery(identity, api, **settings)
    except BaseException:
        api.close()
        raise
