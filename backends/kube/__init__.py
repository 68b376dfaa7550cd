"""Kubernetes backend: ``kube://`` (see :class:`KubeDiscovery` and docs/design.md §8).

Identity (needed only to register): the Downward-API files in ``/etc/podinfo``, else
``POD_NAME`` and ``POD_UID``; ``DYN_KUBE_DISCOVERY_MODE`` (``pod`` | ``container``) and
``CONTAINER_NAME`` choose the CR per pod or per container. Without any identity (a laptop with a
kubeconfig) a client lists, gets and watches; its writes raise ValidationError saying how to
give it one. A half-set identity (a name without a uid) is a ValidationError at connect.

Namespace: the ``namespace`` option, else the Downward-API file ``pod_namespace``, else
``POD_NAMESPACE``, else the kubeconfig's current-context namespace (in a pod: the service
account's), else ``default``.

Connect options override the files and the environment: ``pod_name``, ``pod_uid``,
``namespace``, ``container_name``, ``mode``, ``podinfo_dir``; and ``kubeconfig`` (else in-cluster
configuration, else ``KUBECONFIG`` / ``~/.kube/config``), ``read_only`` (never write: no CR;
the identity is ignored), ``request_timeout`` (seconds bounding each API request; for watches,
connecting only; default 10 s to connect and 30 s to answer), ``connect_timeout`` (seconds
``connect()`` keeps trying to reach the API server, default 10; ``none``/None: without limit),
``ready_timeout``, ``write_timeout``, ``sync_timeout``, ``consistent_reads`` (default true: see
:class:`KubeDiscovery`).
The CRD and RBAC to install are in ``manifests/`` (:data:`MANIFESTS`).

Kubernetes cannot host a failover cohort: a writing client given a logical instance id (the
``logical_instance_id``/``logical_instance_key`` options, or ``DYN_DISCOVERY_LOGICAL_INSTANCE_ID``
/``_KEY``) is refused at connect, before the cluster is contacted (:data:`NO_COHORT`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from discovery_sync.errors import ValidationError
from discovery_sync.logical_id import refuse_cohort

from .backend import KubeDiscovery
from .identity import (
    DEFAULT_PODINFO_DIR,
    PodIdentity,
    find_identity,
    instance_id_for,
    resolve_mode,
    resolve_namespace,
)
from .options import IDENTITY_OPTIONS, OPTIONS
from .wire import KubeApi, load_cluster

__all__ = [
    "MANIFESTS",
    "KubeDiscovery",
    "PodIdentity",
    "find_identity",
    "from_url",
    "instance_id_for",
    "resolve_namespace",
]

MANIFESTS = Path(__file__).parent / "manifests"

#: why a Kubernetes client cannot share its instance id with a failover cohort
NO_COHORT = (
    "a Kubernetes client's instance id is derived from its DynamoWorkerMetadata name, which is its pod's "
    "name (or pod and container), one CR per pod (or container), and readers key workers by CR: two pods "
    "cannot share one instance id, and a second CR claiming another's id would be two workers to readers"
)


def from_url(netloc: str, path: str, options: dict[str, Any]) -> KubeDiscovery:
    """``kube://[?options]``: a client of one namespace, as this pod when it has an identity."""
    if netloc or path.strip("/"):
        raise ValidationError(
            f"the kube URL takes no host or path (got {netloc + path!r}): use kube:// and options such as namespace="
        )
    refuse_cohort(options, OPTIONS, backend="Kubernetes", reason=NO_COHORT)
    settings = OPTIONS.parse(options)
    given = {key: settings.pop(key) for key in IDENTITY_OPTIONS if key in settings}
    podinfo_dir = settings.pop("podinfo_dir", DEFAULT_PODINFO_DIR)
    identity: PodIdentity | None = None
    if not settings.get("read_only", False):  # identity errors come before the cluster is contacted
        identity = find_identity(**given, podinfo_dir=podinfo_dir)
    if identity is not None:
        mode = identity.mode
    else:  # a reader needs no container name: the mode only says which readiness objects to watch
        mode, _ = resolve_mode(given.get("mode"), given.get("container_name"), need_container=False)
    cluster = load_cluster(settings.pop("kubeconfig", None))
    try:
        namespace = resolve_namespace(
            given.get("namespace"), podinfo_dir=podinfo_dir, context_namespace=cluster.namespace
        )
        if identity is not None:
            identity = dataclasses.replace(identity, namespace=namespace)
        api = KubeApi(cluster.api_client, namespace, request_timeout=settings.pop("request_timeout", None))
    except BaseException:
        cluster.api_client.close()
        raise
    try:
        return KubeDiscovery(identity, api, mode=mode, podinfo_dir=podinfo_dir, **settings)
    except BaseException:
        api.close()
        raise
