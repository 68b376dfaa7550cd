"""Who this client is in the cluster: its pod, its DynamoWorkerMetadata name and its instance id.

Each value comes from, in order: an explicit connect option, the Downward-API file
``{podinfo_dir}/{pod_name,pod_uid,pod_namespace}`` (default ``/etc/podinfo``), the environment
(``POD_NAME``, ``POD_UID``, ``POD_NAMESPACE``). ``DYN_KUBE_DISCOVERY_MODE`` is ``pod`` (default:
one CR per pod) or ``container`` (one CR per container; ``CONTAINER_NAME`` is then required).

The identity is optional: with neither a pod name nor a pod uid anywhere, a client has none and
can only read and watch (:func:`find_identity` returns None). A half-set identity (a name
without a uid, or the other way round) is a misconfiguration and a ValidationError.

The namespace, with or without an identity: the ``namespace`` option, else the Downward-API file
``pod_namespace``, else ``POD_NAMESPACE``, else the namespace of the kubeconfig's current context
(in a pod: the service account's), else ``default`` -- as kubectl does.

The CR name is the pod name, or in container mode ``{pod}-{container}`` unless the container is
``main``. The instance id is the reference's: Rust's ``DefaultHasher`` over the CR name, masked to
53 bits (so it survives JSON readers that use doubles).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from discovery_sync.errors import ValidationError
from discovery_sync.siphash import rust_str_hash
from discovery_sync.validation import JSON_SAFE_MAX, check_instance_id

DEFAULT_PODINFO_DIR = "/etc/podinfo"
DEFAULT_NAMESPACE = "default"
MODES = ("pod", "container")
MAIN_CONTAINER = "main"
INSTANCE_ID_MASK = 0x1F_FFFF_FFFF_FFFF  # 2**53 - 1

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def instance_id_for(cr_name: str) -> int:
    """The instance id of the worker whose DynamoWorkerMetadata is called ``cr_name``."""
    return rust_str_hash(cr_name) & INSTANCE_ID_MASK


def cr_name_for(pod_name: str, container_name: str | None = None) -> str:
    """The DynamoWorkerMetadata name: the pod's, or ``{pod}-{container}`` for a non-main container."""
    if container_name is None or container_name == MAIN_CONTAINER:
        return pod_name
    return f"{pod_name}-{container_name}"


def check_publisher_id(publisher_id: Any) -> None:
    """Event-source publisher ids on Kubernetes must fit in 53 bits, as instance ids do."""
    check_instance_id(publisher_id, "publisher_id", maximum=JSON_SAFE_MAX)


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """This worker's pod (name, uid, namespace) and discovery mode."""

    pod_name: str
    pod_uid: str
    namespace: str = DEFAULT_NAMESPACE
    mode: str = "pod"
    container_name: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValidationError(f"discovery mode {self.mode!r} is not valid: use one of {', '.join(MODES)}")
        if self.mode == "container" and not self.container_name:
            raise ValidationError("container discovery mode needs CONTAINER_NAME (the container this worker runs in)")
        check_namespace(self.namespace)
        name = self.cr_name
        if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise ValidationError(
                f"DynamoWorkerMetadata name {name!r} (from the pod and container names) is not a lowercase "
                "RFC 1123 subdomain: use lower-case letters, digits, '-' and '.'"
            )

    @property
    def cr_name(self) -> str:
        """The name of this worker's DynamoWorkerMetadata."""
        return cr_name_for(self.pod_name, self.container_name if self.mode == "container" else None)

    @property
    def instance_id(self) -> int:
        return instance_id_for(self.cr_name)

    @property
    def is_controller(self) -> bool:
        """Whether the Pod ownerReference marks the pod as the CR's controller (CR name == pod name)."""
        return self.cr_name == self.pod_name

    def owner_reference(self) -> dict[str, Any]:
        """The ownerReference to the Pod, so the CR is garbage-collected with it."""
        return {
            "apiVersion": "v1",
            "blockOwnerDeletion": False,
            "controller": self.is_controller,
            "kind": "Pod",
            "name": self.pod_name,
            "uid": self.pod_uid,
        }


def _read_podinfo(directory: str | os.PathLike[str], name: str) -> str | None:
    try:
        value = Path(directory, name).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as exc:
        raise ValidationError(f"cannot read the Downward-API file {Path(directory, name)}: {exc}") from None
    return value or None


def _option(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, got {type(value).__name__}")
    return value.strip() or None


def _lookup(
    option: Any,
    field: str,
    file_name: str | None,
    variable: str,
    podinfo_dir: str | os.PathLike[str],
    env: Mapping[str, str],
) -> str | None:
    """One identity value: the option, else the Downward-API file, else the environment variable."""
    found = _option(option, field)
    if found is None and file_name is not None:
        found = _read_podinfo(podinfo_dir, file_name)
    if found is None:
        found = (env.get(variable) or "").strip() or None
    return found


def resolve_namespace(
    namespace: str | None = None,
    *,
    podinfo_dir: str | os.PathLike[str] = DEFAULT_PODINFO_DIR,
    env: Mapping[str, str] | None = None,
    context_namespace: str | None = None,
) -> str:
    """The namespace: option, Downward-API file, ``POD_NAMESPACE``, ``context_namespace``, ``default``."""
    env = os.environ if env is None else env
    found = _lookup(namespace, "namespace", "pod_namespace", "POD_NAMESPACE", podinfo_dir, env)
    found = found or (context_namespace or "").strip() or DEFAULT_NAMESPACE
    check_namespace(found)
    return found


def check_namespace(namespace: str) -> None:
    if not _DNS_LABEL.match(namespace) or len(namespace) > 63:
        raise ValidationError(f"namespace {namespace!r} is not a valid Kubernetes namespace name")


def resolve_mode(
    mode: str | None = None,
    container_name: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    need_container: bool = True,
) -> tuple[str, str | None]:
    """The discovery mode and (container mode) this worker's container name.

    ``need_container=False`` (a client without an identity) accepts container mode without a
    container name: it only reads, and the mode says which readiness objects to watch.
    """
    env = os.environ if env is None else env
    chosen = _lookup(mode, "mode", None, "DYN_KUBE_DISCOVERY_MODE", DEFAULT_PODINFO_DIR, env) or "pod"
    if chosen not in MODES:
        raise ValidationError(
            f"DYN_KUBE_DISCOVERY_MODE={chosen!r} is not valid: use one of {', '.join(MODES)} (default pod)"
        )
    container = _lookup(container_name, "container_name", None, "CONTAINER_NAME", DEFAULT_PODINFO_DIR, env)
    if chosen == "container" and container is None and need_container:
        raise ValidationError("DYN_KUBE_DISCOVERY_MODE=container needs CONTAINER_NAME (this worker's container)")
    return chosen, container if chosen == "container" else None


def find_identity(
    *,
    pod_name: str | None = None,
    pod_uid: str | None = None,
    namespace: str | None = None,
    mode: str | None = None,
    container_name: str | None = None,
    podinfo_dir: str | os.PathLike[str] = DEFAULT_PODINFO_DIR,
    env: Mapping[str, str] | None = None,
    context_namespace: str | None = None,
) -> PodIdentity | None:
    """This worker's identity from options, Downward-API files and the environment; None when
    there is none at all (no pod name and no pod uid anywhere: the client can only read).

    Raises ValidationError for a half-set identity (naming what is missing and where it is read
    from) and for invalid values.
    """
    env = os.environ if env is None else env
    name = _lookup(pod_name, "pod_name", "pod_name", "POD_NAME", podinfo_dir, env)
    uid = _lookup(pod_uid, "pod_uid", "pod_uid", "POD_UID", podinfo_dir, env)
    if name is None and uid is None:
        return None
    for found, other, variable, file_name in ((name, uid, "POD_NAME", "pod_name"), (uid, name, "POD_UID", "pod_uid")):
        if found is None:
            raise ValidationError(
                f"{variable} is not set (but {'POD_UID' if variable == 'POD_NAME' else 'POD_NAME'}={other!r} is): "
                f"the Kubernetes backend needs this pod's whole identity to register; set {variable} from the "
                f"Downward API, mount {Path(podinfo_dir, file_name)} or pass {file_name}=; or set neither "
                "to connect without an identity (read and watch only)"
            )
    assert name is not None and uid is not None
    chosen_mode, container = resolve_mode(mode, container_name, env=env)
    return PodIdentity(
        pod_name=name,
        pod_uid=uid,
        namespace=resolve_namespace(namespace, podinfo_dir=podinfo_dir, env=env, context_namespace=context_namespace),
        mode=chosen_mode,
        container_name=container,
    )


def missing_identity_message(action: str, podinfo_dir: str | os.PathLike[str] = DEFAULT_PODINFO_DIR) -> str:
    """Why a client without a pod identity cannot ``action``, and how to give it one."""
    return (
        f"this Kubernetes discovery client has no pod identity, so it cannot {action}: set POD_NAME and POD_UID "
        f"(and POD_NAMESPACE) from the Downward API, mount the Downward-API files {Path(podinfo_dir, 'pod_name')} "
        f"and {Path(podinfo_dir, 'pod_uid')}, or pass the pod_name and pod_uid options; listing and watching "
        "work without an identity"
    )
