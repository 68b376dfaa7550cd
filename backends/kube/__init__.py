"""Kubernetes backend: ``kube://`` (see :class:`KubeDiscovery` and docs/design.md §8).

Identity comes from the Downward-API files in ``/etc/podinfo``, else ``POD_NAME``, ``POD_UID``
and ``POD_NAMESPACE``; ``DYN_KUBE_DISCOVERY_MODE`` (``pod`` | ``container``) and
``CONTAINER_NAME`` choose the CR per pod or per container. Connect options override them:
``pod_name``, ``pod_uid``, ``namespace``, ``container_name``, ``mode``, ``podinfo_dir``; and
``kubeconfig`` (else in-cluster configuration, else the default kubeconfig), ``ready_timeout``,
``write_timeout``, ``sync_timeout``, ``consistent_reads`` (see :mod:`.options`). The CRD and RBAC to install are in
``manifests/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from discovery_sync.errors import ValidationError

from .backend import KubeDiscovery
from .identity import DEFAULT_PODINFO_DIR, PodIdentity, instance_id_for, resolve_identity
from .options import IDENTITY_OPTIONS, OPTIONS
from .wire import KubeApi, make_api_client

__all__ = ["MANIFESTS", "KubeDiscovery", "PodIdentity", "from_url", "instance_id_for", "resolve_identity"]

MANIFESTS = Path(__file__).parent / "manifests"


def from_url(netloc: str, path: str, options: dict[str, Any]) -> KubeDiscovery:
    """``kube://[?options]``: a client for this pod (identity from options, podinfo files, environment)."""
    if netloc or path.strip("/"):
        raise ValidationError(
            f"the kube URL takes no host or path (got {netloc + path!r}): use kube:// and options such as namespace="
        )
    settings = OPTIONS.parse(options)
    identity = resolve_identity(
        **{key: settings.pop(key) for key in IDENTITY_OPTIONS if key in settings},
        podinfo_dir=settings.pop("podinfo_dir", DEFAULT_PODINFO_DIR),
    )
    api = KubeApi(make_api_client(settings.pop("kubeconfig", None)), identity.namespace)
    try:
        return KubeDiscovery(identity, api, **settings)
    except BaseException:
        api.close()
        raise
