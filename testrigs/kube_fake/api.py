"""The REST semantics: route a parsed HTTP request to discovery documents or a store operation."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import resources as res
from . import schema
from . import status as st
from .access import PATH as ACCESS_REVIEWS_PATH
from .access import AccessReviews
from .jsonwire import stored_value
from .resources import ResourceType
from .selectors import FieldSelector, LabelSelector, Selection
from .store import Store
from .subresources import patch_status
from .watch import Watcher

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
DEFAULT_WATCH_TIMEOUT = 1800.0
TOO_LARGE_VERSION_WAIT = 3.0  # a LIST NotOlderThan a future version waits this long, then 504


class Headers(Protocol):
    """A request's headers: the ``email.message.Message`` the HTTP server parsed (looked up without
    regard to case), or a plain mapping."""

    def get(self, name: str, /) -> str | None: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


@dataclass
class Request:
    """One HTTP request, already read off the wire."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Headers
    body: bytes = b""

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower-cased."""
        return (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def flag(self, name: str) -> bool:
        return (self.param(name) or "").lower() in ("true", "1")


@dataclass
class Reply:
    """A complete response: JSON ``body``, or plain ``text`` when that is set."""

    code: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    warnings: list[str] = field(default_factory=list)  # one ``Warning`` header each


@dataclass
class WatchReply:
    """A streaming watch response: either a watcher to drain or one ERROR event to send."""

    resource: ResourceType
    timeout: float
    bookmarks: bool
    watcher: Watcher | None = None
    error: dict[str, Any] | None = None


@dataclass
class _Failure:
    remaining: int
    code: int
    resource: ResourceType | None
    verb: str | None
    message: str | None
    retry_after: int | None


class Faults:
    """Denied (resource, verb) pairs (RBAC, as a Role without those verbs) and queued injected
    failures; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._denied: set[tuple[str, str]] = set()
        self._failures: list[_Failure] = []

    def deny(self, rt: ResourceType | None, verb: str, denied: bool = True) -> None:
        key = (rt.plural if rt else "*", verb)
        with self._lock:
            (self._denied.add if denied else self._denied.discard)(key)

    def fail_next(
        self, n: int, code: int, rt: ResourceType | None, verb: str | None, message: str | None, retry_after: int | None
    ) -> None:
        with self._lock:
            self._failures.append(_Failure(n, code, rt, verb, message, retry_after))

    def denied(self, rt: ResourceType, verb: str) -> bool:
        with self._lock:
            return bool({(rt.plural, verb), (rt.plural, "*"), ("*", verb), ("*", "*")} & self._denied)

    def check(self, rt: ResourceType, verb: str, namespace: str | None, name: str | None) -> None:
        """Raise the 403 or injected failure this request gets, if any."""
        if self.denied(rt, verb):
            raise st.forbidden(rt, verb, namespace, name)
        with self._lock:
            for failure in self._failures:
                if failure.resource not in (None, rt) or failure.verb not in (None, verb):
                    continue
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failures.remove(failure)
                message = failure.message or f"injected failure ({failure.code}) for {verb} {rt.plural}"
                headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
                raise _InjectedError(failure.code, message, headers)

    def denies(self, plural: str, verb: str) -> bool:
        """Whether ``verb`` on ``plural`` is denied (by name or by a ``*`` rule)."""
        with self._lock:
            return bool({(plural, verb), (plural, "*"), ("*", verb), ("*", "*")} & self._denied)


class _InjectedError(st.ApiError):
    def __init__(self, code: int, message: str, headers: dict[str, str]):
        super().__init__(code, message)
        self.headers = headers


_JSON_SURROGATE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_YAML_ERROR = "error decoding YAML: error converting YAML to JSON: yaml: "


def _yaml_problem(exc: Exception) -> str:
    """A PyYAML error in go-yaml's words, as far as the transcripts show them."""
    problem = str(getattr(exc, "problem", None) or exc)
    mark = getattr(exc, "problem_mark", None)
    if problem.startswith("expected the node content"):
        problem = "did not find expected node content"
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem


def _decode(req: Request) -> Any:
    """The request body, parsed and turned into what the server stores (:func:`.jsonwire.stored_value`).

    JSON bodies are read as Go's encoding/json does (a lone surrogate escape becomes U+FFFD). An apply
    body is YAML (JSON being YAML), and go-yaml refuses a JSON surrogate-pair escape such as
    ``\\ud83d\\ude80``: 400 "found invalid Unicode character escape code".
    """
    if not req.body.strip():
        raise st.bad_request("the request body is empty")
    text = req.body.decode("utf-8", errors="replace")
    if req.content_type == APPLY and _JSON_SURROGATE_ESCAPE.search(text):
        raise st.bad_request(_YAML_ERROR + "found invalid Unicode character escape code")
    try:
        return stored_value(json.loads(text))
    except ValueError:
        if "yaml" not in req.content_type:
            raise st.bad_request("the request body is not valid JSON") from None
    import yaml

    try:
        return stored_value(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise st.bad_request(_YAML_ERROR + _yaml_problem(exc)) from None


def _manager(req: Request) -> str:
    """``fieldManager``, else the user agent up to its first ``/`` (as the API server derives it)."""
    manager = req.param("fieldManager")
    if manager is not None:
        if len(manager) > 128:
            raise st.invalid_options(
                "PatchOptions", "fieldManager", "must be at most 128 characters", "FieldValueInvalid"
            )
        return manager
    agent = req.headers.get("User-Agent") or "unknown"
    return agent.split("/")[0] or "unknown"


def _dry_run(req: Request) -> bool:
    value = req.param("dryRun")
    if value not in (None, "", "All"):
        raise st.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return value == "All"


def _check_identity(
    rt: ResourceType, namespace: str, body: Any, name: str | None, require_type: bool
) -> dict[str, Any]:
    """400 unless ``body`` is an object of this resource, namespace and name."""
    if not isinstance(body, dict):
        raise st.bad_request("the request body must be a JSON object")
    if require_type and ("apiVersion" not in body or "kind" not in body):
        raise st.bad_request("Object 'apiVersion' and 'Kind' must be set for an apply request")
    if body.get("apiVersion", rt.api_version) != rt.api_version or body.get("kind", rt.kind) != rt.kind:
        raise st.bad_request(
            f"the API version in the data ({body.get('apiVersion')}) and kind ({body.get('kind')}) "
            f"do not match {rt.api_version} {rt.kind}"
        )
    meta = body.get("metadata") or {}
    if meta.get("namespace") not in (None, "", namespace):
        raise st.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    if name is not None and meta.get("name") not in (None, name):
        raise st.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
    return body


class KubeApi:
    """Turns :class:`Request` into :class:`Reply` / :class:`WatchReply`."""

    def __init__(self, store: Store, faults: Faults, server_address: Callable[[], str]):
        self.store = store
        self.faults = faults
        self.server_address = server_address
        self.crd_installed = True
        self.validate = True
        self.access_reviews = AccessReviews(faults)
        self.valid_tokens: frozenset[str] | None = None  # None: any bearer token is accepted
        self.time_scale = 1.0

    def _authenticated(self, req: Request) -> bool:
        """False for a bearer token outside :attr:`valid_tokens` (no token at all: anonymous, accepted)."""
        authorization = req.headers.get("Authorization") or ""
        if self.valid_tokens is None or not authorization.lower().startswith("bearer "):
            return True
        return authorization[7:].strip() in self.valid_tokens

    def handle(self, req: Request) -> Reply | WatchReply:
        if not self._authenticated(req):
            return Reply(401, st.ApiError(401, "Unauthorized").to_status())
        try:
            return self._route(req)
        except _InjectedError as err:
            return Reply(err.code, err.to_status(), err.headers)
        except st.PageNotFound as err:
            return Reply(err.code, {}, text=err.TEXT)
        except st.ApiError as err:
            return Reply(err.code, err.to_status())

    def _route(self, req: Request) -> Reply | WatchReply:
        parts = [p for p in req.path.split("/") if p]
        if parts == ACCESS_REVIEWS_PATH:
            return Reply(*self.access_reviews.answer(req))
        discovery = self._discovery(parts)
        if discovery is not None:
            if req.method != "GET":
                raise st.ApiError(
                    405, f"the server does not allow this method on the requested resource ({req.method})"
                )
            return Reply(200, discovery)
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise st.PageNotFound()
        if not res.serves(group, version, self.crd_installed):
            raise st.PageNotFound()
        # {name}/status of a namespaced object (5 parts) or of a cluster-scoped one (3)
        in_namespace = rest[:1] == ["namespaces"]
        subresource = rest.pop() if len(rest) == (5 if in_namespace else 3) else None
        if len(rest) in (1, 2):  # across namespaces, or a cluster-scoped object (by name)
            namespace, plural, name = None, rest[0], (rest[1] if len(rest) == 2 else None)
        elif len(rest) in (3, 4) and rest[0] == "namespaces":
            namespace, plural, name = rest[1], rest[2], (rest[3] if len(rest) == 4 else None)
        else:
            raise st.path_not_found()
        rt = res.find_resource(group, version, plural)
        if rt is None or (rt.custom and not self.crd_installed):
            raise st.path_not_found()
        if name is not None and namespace is None and rt.namespaced:
            raise st.path_not_found()
        if namespace is not None and not rt.namespaced:
            raise st.path_not_found()
        if subresource is not None:
            if subresource != "status" or not rt.status_subresource:
                raise st.path_not_found()
            assert name is not None
            return self._status(req, rt, namespace if namespace is not None else "", name)
        return self._resource(req, rt, namespace, name)

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        if parts == ["version"]:
            return res.version_info()
        if parts == ["api"]:
            return res.api_versions(self.server_address())
        if parts == ["apis"]:
            return res.api_group_list(self.crd_installed)
        if len(parts) == 2 and parts[0] == "apis":
            if not res.known_group(parts[1], self.crd_installed):
                raise st.PageNotFound()
            return res.api_group(parts[1])
        if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            doc = res.api_resource_list(group, version)
            if doc is None or not res.serves(group, version, self.crd_installed):
                raise st.PageNotFound()
            return doc
        return None

    @staticmethod
    def _verb(req: Request, name: str | None) -> str:
        table = {
            ("GET", False): "watch" if req.flag("watch") else "list",
            ("GET", True): "watch" if req.flag("watch") else "get",
            ("POST", False): "create",
            ("PUT", True): "update",
            ("PATCH", True): "patch",
            ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection",
        }
        verb = table.get((req.method, name is not None))
        if verb is None:
            raise st.ApiError(405, f"the server does not allow this method on the requested resource ({req.method})")
        return verb

    def _selection(self, req: Request, rt: ResourceType, namespace: str | None, name: str | None) -> Selection:
        fields = FieldSelector.parse(req.param("fieldSelector"), rt.field_selectors)
        if name is not None:
            fields = FieldSelector((*fields.terms, ("metadata.name", True, name)))
        scope = namespace if rt.namespaced else None
        return Selection(scope, LabelSelector.parse(req.param("labelSelector")), fields)

    def _resource(self, req: Request, rt: ResourceType, namespace: str | None, name: str | None) -> Reply | WatchReply:
        verb = self._verb(req, name)
        self.faults.check(rt, verb, namespace, name)
        if namespace is None and rt.namespaced and verb not in ("list", "watch"):
            raise st.ApiError(405, f"{verb} is not supported across all namespaces")
        if not rt.namespaced:
            namespace = ""  # where the store keeps cluster-scoped objects
        if verb == "watch":
            return self._watch(req, rt, self._selection(req, rt, namespace, name))
        if verb == "list":
            limit = req.param("limit")
            try:
                limit_n = int(limit) if limit else 0
            except ValueError:
                raise st.bad_request(f"invalid limit: {limit!r}") from None
            if not req.param("continue"):
                self._list_version(req, limit_n > 0)
            page = self.store.list(rt, self._selection(req, rt, namespace, None), limit_n, req.param("continue"))
            return Reply(200, page)
        assert namespace is not None
        if verb == "deletecollection":
            deleted = self.store.delete_collection(
                rt, self._selection(req, rt, namespace, None), cascade=self._cascade(req)
            )
            meta = {"resourceVersion": str(self.store.resource_version)}
            return Reply(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": deleted})
        if verb == "create":
            body, warnings = self._pruned(req, rt, _check_identity(rt, namespace, _decode(req), None, False))
            obj = self.store.create(rt, namespace, body, _manager(req), validate=self.validate, dry_run=_dry_run(req))
            return Reply(201, obj, warnings=warnings)
        assert name is not None
        if verb == "get":
            return Reply(200, self.store.get(rt, namespace, name))
        if verb == "update":
            body, warnings = self._pruned(req, rt, _check_identity(rt, namespace, _decode(req), name, False))
            replaced = self.store.replace(
                rt, namespace, name, body, _manager(req), validate=self.validate, dry_run=_dry_run(req)
            )
            return Reply(200, replaced, warnings=warnings)
        if verb == "patch":
            creating = req.content_type == APPLY and self.store.find(rt, namespace, name) is None
            if creating and self.faults.denied(rt, "create"):  # an apply that would create needs create too
                raise st.forbidden_create(rt, name)
            return self._patch(req, rt, namespace, name)
        return Reply(
            200,
            self.store.delete(
                rt,
                namespace,
                name,
                self._preconditions(req),
                cascade=self._cascade(req),
                dry_run=_dry_run(req),
                grace=self._grace(req),
            ),
        )

    def _status(self, req: Request, rt: ResourceType, namespace: str, name: str) -> Reply:
        """``.../{name}/status``: GET, or a merge patch that changes the status alone (what a kubelet sends)."""
        verb = self._verb(req, name)
        self.faults.check(rt, verb, namespace, name)
        if verb == "get":
            return Reply(200, self.store.get(rt, namespace, name))
        if verb != "patch" or req.content_type not in (MERGE, STRATEGIC):
            raise st.ApiError(405, f"the fake serves only GET and merge PATCH of {rt.plural}/status")
        return Reply(200, patch_status(self.store, rt, namespace, name, _decode(req), _manager(req)))

    def _list_version(self, req: Request, paged: bool) -> None:
        """410 for a LIST at a version etcd compacted; a wait, then 504, for one from the future."""
        wanted = self.store.check_list_version(req.param("resourceVersion"), req.param("resourceVersionMatch"), paged)
        if wanted is not None:
            self.store.wait_for_version(wanted, TOO_LARGE_VERSION_WAIT * self.time_scale)

    def _grace(self, req: Request) -> int | None:
        grace = req.param("gracePeriodSeconds")
        if grace is None:
            grace = self._delete_options(req).get("gracePeriodSeconds")
        try:
            return None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise st.bad_request(f"invalid gracePeriodSeconds: {grace!r}") from None

    def _patch(self, req: Request, rt: ResourceType, namespace: str, name: str) -> Reply:
        kind = req.content_type
        dry_run = _dry_run(req)
        if kind != APPLY and req.param("force") is not None:
            raise st.invalid_options(
                "PatchOptions", "force", "Forbidden: may not be specified for non-apply patch", "FieldValueForbidden"
            )
        if kind == APPLY:
            manager = req.param("fieldManager")
            if not manager:
                raise st.invalid_options("PatchOptions", "fieldManager", "Required value: is required for apply patch")
            body = _check_identity(rt, namespace, _decode(req), name, require_type=True)
            self.access_reviews.refuse_create_by_apply(rt, name, self.store.find(rt, namespace, name) is not None)
            if rt.custom and self.validate:
                schema.check_apply(rt, (body.get("metadata") or {}).get("namespace") or "", name, body)
            obj, created = self.store.apply(
                rt,
                namespace,
                name,
                body,
                _manager(req),
                force=req.flag("force"),
                validate=self.validate,
                dry_run=dry_run,
            )
            return Reply(201 if created else 200, obj)
        if kind == MERGE or (kind == STRATEGIC and not rt.custom):
            patch, warnings = _decode(req), list[str]()
            if isinstance(patch, dict):
                patch, warnings = self._pruned(req, rt, patch)
            patched = self.store.merge_patch(
                rt, namespace, name, patch, _manager(req), validate=self.validate, dry_run=dry_run
            )
            return Reply(200, patched, warnings=warnings)
        accepted = [MERGE, APPLY] if rt.custom else [MERGE, STRATEGIC, APPLY]
        raise st.unsupported_media_type(kind, accepted)

    def _pruned(self, req: Request, rt: ResourceType, body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """A custom resource body without the fields its schema does not declare, and the warnings naming them."""
        if not (rt.custom and self.validate):
            return body, []
        return schema.prune(rt, body, req.param("fieldValidation"))

    def _delete_options(self, req: Request) -> dict[str, Any]:
        if not req.body.strip():
            return {}
        options = _decode(req)
        return options if isinstance(options, dict) else {}

    def _preconditions(self, req: Request) -> dict[str, Any]:
        return self._delete_options(req).get("preconditions") or {}

    def _cascade(self, req: Request) -> bool:
        options = self._delete_options(req)
        policy = req.param("propagationPolicy") or options.get("propagationPolicy")
        return policy != "Orphan" and not options.get("orphanDependents")

    def _watch(self, req: Request, rt: ResourceType, selection: Selection) -> WatchReply:
        timeout = req.param("timeoutSeconds")
        try:
            seconds = float(timeout) if timeout else DEFAULT_WATCH_TIMEOUT
        except ValueError:
            raise st.bad_request(f"invalid timeoutSeconds: {timeout!r}") from None
        bookmarks = req.flag("allowWatchBookmarks")
        try:
            watcher = self.store.watch(rt, selection, req.param("resourceVersion"), req.flag("sendInitialEvents"))
        except st.ApiError as err:
            if err.code != 410:
                raise
            return WatchReply(rt, seconds, bookmarks, error={"type": "ERROR", "object": err.to_status()})
        return WatchReply(rt, seconds, bookmarks, watcher=watcher)
