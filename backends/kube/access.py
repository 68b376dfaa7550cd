"""Which of the permissions this backend uses the client's credentials hold, asked of the API server
with SelfSubjectAccessReviews (what ``kubectl auth can-i`` does), for ``diagnose()`` and ``doctor``.

Each permission the backend's requests need in its namespace is reviewed once. A missing one the
client's discovery mode needs is a problem naming the permission, what fails without it and the
fix; a missing one only the other mode needs is reported, not a problem. When the server does not
answer the reviews (it refuses or lacks them, or cannot be reached), the report says the
permissions could not be checked: nothing is called missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from .identity import MODES
from .refusals import rbac_fix, status_message
from .wire import GROUP, PLURAL, TRANSPORT_ERRORS, KubeApi, explain


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, and what the backend needs it for."""

    verb: str
    group: str  # "" for the core group
    resource: str
    #: what fails without it
    needed_for: str
    #: the discovery modes that need it
    modes: tuple[str, ...] = MODES

    @property
    def name(self) -> str:
        """``create dynamoworkermetadatas.nvidia.com``, ``get pods``."""
        return f"{self.verb} {self.resource}.{self.group}" if self.group else f"{self.verb} {self.resource}"


#: every request the backend makes (wire.KubeApi), as the permission it needs
PERMISSIONS = (
    Permission("list", GROUP, PLURAL, "every read lists the workers' DynamoWorkerMetadata"),
    Permission("watch", GROUP, PLURAL, "every read follows the workers' DynamoWorkerMetadata"),
    Permission(
        "create", GROUP, PLURAL, "a worker's first registration creates its DynamoWorkerMetadata (by server-side apply)"
    ),
    Permission("patch", GROUP, PLURAL, "every registration, removal and taint update applies the worker's CR"),
    Permission(
        "delete",
        GROUP,
        PLURAL,
        "shutdown deletes the worker's CR (without it, its records stay until its pod is deleted)",
    ),
    Permission("get", "", "pods", "a worker checks that its pod lives before applying a CR someone deleted again"),
    Permission("list", "", "pods", "container mode lists pods to tell which workers are ready", ("container",)),
    Permission("watch", "", "pods", "container mode follows pods to tell which workers are ready", ("container",)),
    Permission(
        "list",
        "discovery.k8s.io",
        "endpointslices",
        "pod mode lists EndpointSlices to tell which workers are ready",
        ("pod",),
    ),
    Permission(
        "watch",
        "discovery.k8s.io",
        "endpointslices",
        "pod mode follows EndpointSlices to tell which workers are ready",
        ("pod",),
    ),
)

ALLOWED, MISSING = "allowed", "missing"


def _review(api: KubeApi, permission: Permission) -> str:
    """``allowed``, or ``missing`` with the server's reason when it gives one."""
    status = api.review_access(permission.verb, permission.group, permission.resource)
    if status.get("allowed") is True:
        return ALLOWED
    reason = status.get("reason") or status.get("evaluationError")
    return f"{MISSING} ({reason})" if reason else MISSING


def _unchecked(exc: BaseException, api: KubeApi) -> str:
    """Why the reviews could not be asked for (a refusal of the reviews is no missing permission)."""
    if isinstance(exc, ApiException) and exc.status == 404:
        return (
            f"the API server does not serve SelfSubjectAccessReviews (authorization.k8s.io/v1) ({status_message(exc)})"
        )
    if isinstance(exc, ApiException) and exc.status == 403:
        return f"the API server refuses this client SelfSubjectAccessReviews ({status_message(exc)})"
    return explain(exc, "asking for a SelfSubjectAccessReview", api.server, namespace=api.namespace)


def diagnose_access(api: KubeApi, mode: str) -> tuple[dict[str, Any], list[str]]:
    """The ``permissions`` section of a diagnose() report and the problems it finds (see the module)."""
    checked: dict[str, str] = {}
    try:
        for permission in PERMISSIONS:
            checked[permission.name] = _review(api, permission)
    except (ApiException, *TRANSPORT_ERRORS) as exc:
        meaning = (
            f'could not check this client\'s permissions in the namespace "{api.namespace}": {_unchecked(exc, api)}'
        )
        return {"namespace": api.namespace, "checked": False, "meaning": meaning}, []
    problems = []
    for permission in PERMISSIONS:
        result = checked[permission.name]
        if not result.startswith(MISSING):
            continue
        if mode not in permission.modes:
            checked[permission.name] = f"{result}: not needed in {mode} mode"
            continue
        whom = "the service account the workers run as, or to the user these credentials belong to"
        problems.append(
            f'this client may not {permission.name} in the namespace "{api.namespace}": {permission.needed_for}; '
            f"{rbac_fix(api.namespace, whom)}"
        )
    if problems:
        needed = sum(mode in p.modes for p in PERMISSIONS)
        missing = f"{len(problems)} of the {needed} permissions this backend uses in {mode} mode"
        meaning = f"{missing} {'is' if len(problems) == 1 else 'are'} missing (each is named below with its fix)"
    else:
        meaning = f'every permission this backend uses in {mode} mode is granted in the namespace "{api.namespace}"'
    return {"namespace": api.namespace, "checked": checked, "meaning": meaning}, problems
