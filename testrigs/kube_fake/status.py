"""Kubernetes ``Status`` failures: one exception type and constructors for the reasons the fake uses."""

from __future__ import annotations

from typing import Any

from .resources import ResourceType

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request failure the server reports as a ``Status`` object with HTTP code ``code``."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = REASONS.get(code, "Unknown") if reason is None else reason  # "": none (omitted)
        self.details = details

    def to_status(self) -> dict[str, Any]:
        """The ``Status`` body, as the API server sends it."""
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code  # the field order of Go's metav1.Status
        return status


def _details(rt: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural, **extra}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rt.qualified} "{name}" not found', details=_details(rt, name))


def path_not_found() -> ApiError:
    """A resource the server does not know inside an API group version it serves."""
    return ApiError(404, "the server could not find the requested resource", details={})


class PageNotFound(ApiError):
    """A path outside every served API group version (e.g. a custom resource before its CRD exists): the
    real server answers plain text ``404 page not found``, not a ``Status``."""

    TEXT = "404 page not found\n"

    def __init__(self) -> None:
        super().__init__(404, self.TEXT.strip())


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, f'{rt.qualified} "{name}" already exists', "AlreadyExists", _details(rt, name))


def stale(rt: ResourceType, name: str, why: str = "the object has been modified") -> ApiError:
    message = (
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}; '
        "please apply your changes to the latest version and try again"
    )
    return ApiError(409, message, "Conflict", _details(rt, name))


def precondition_failed(rt: ResourceType, name: str, message: str) -> ApiError:
    return ApiError(409, f'Operation cannot be fulfilled on {rt.qualified} "{name}": {message}', "Conflict")


def apply_conflict(conflicts: list[tuple[str, str]]) -> ApiError:
    """``conflicts``: (the manager as :meth:`.apply.ManagedEntry.printed` names it, field path such as
    ``.spec.data``); message and causes worded as structured-merge-diff does; details carry the causes only."""
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {manager}", "field": path}
        for manager, path in conflicts
    ]
    if len(conflicts) == 1:
        message = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
    else:
        lines = []
        for manager in sorted({m for m, _ in conflicts}):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {path}" for m, path in conflicts if m == manager)
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, message, "Conflict", {"causes": causes})


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """``causes``: (reason such as FieldValueRequired, field path, message)."""
    text = ", ".join(f"{field}: {msg}" for _, field, msg in causes)
    group = f".{rt.group}" if rt.group else ""
    details = {
        "name": name,
        "kind": rt.kind,
        **({"group": rt.group} if rt.group else {}),
        "causes": [{"reason": r, "field": f, "message": m} for r, f, m in causes],
    }
    return ApiError(422, f'{rt.kind}{group} "{name}" is invalid: {text}', "Invalid", details)


def invalid_options(kind: str, field: str, message: str, reason: str = "FieldValueRequired") -> ApiError:
    """An invalid query option, e.g. ``PatchOptions`` without ``fieldManager`` on apply."""
    causes = [{"reason": reason, "field": field, "message": message}]
    details = {"group": "meta.k8s.io", "kind": kind, "causes": causes}
    return ApiError(422, f'{kind}.meta.k8s.io "" is invalid: {field}: {message}', "Invalid", details)


def forbidden(rt: ResourceType, verb: str, namespace: str | None, name: str | None) -> ApiError:
    """The RBAC denial of the namespace's default service account (as the recorded server words it)."""
    subject = f'{rt.qualified} "{name}"' if name else rt.qualified
    user = f"system:serviceaccount:{namespace or 'default'}:default"
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{rt.plural}" in API group "{rt.group}"{where}'
    )
    return ApiError(403, message, "Forbidden", _details(rt, name) if name else _kind(rt))


def forbidden_create(rt: ResourceType, name: str) -> ApiError:
    """An apply that would create an object, without the ``create`` verb: the real message ends at the colon."""
    return ApiError(403, f'{rt.qualified} "{name}" is forbidden: ', "Forbidden", _details(rt, name))


def _kind(rt: ResourceType) -> dict[str, Any]:
    return {**({"group": rt.group} if rt.group else {}), "kind": rt.plural}


def uid_mismatch(rt: ResourceType, name: str, wanted: str, stored: str) -> ApiError:
    """A delete (or update) whose uid precondition names another incarnation of the object."""
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    message = (
        f'Operation cannot be fulfilled on {kind} "{name}": the UID in the precondition ({wanted}) does not '
        f"match the UID in record ({stored}). The object might have been deleted and then recreated"
    )
    details = {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.kind}
    return ApiError(409, message, "Conflict", details)


def expired(message: str) -> ApiError:
    return ApiError(410, message, "Expired")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    message = (
        f"the body of the request was in an unknown format ({content_type or 'none'}) - "
        f"accepted media types include: {', '.join(accepted)}"
    )
    return ApiError(415, message, "UnsupportedMediaType")
