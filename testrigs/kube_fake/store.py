"""The object store: one global resourceVersion, a watch cache per resource, watchers, pagination, GC.

Stored objects are never mutated after they are committed (every write stores a fresh dict), so
references handed to watchers and list pages stay valid snapshots.

Two histories are modelled apart, as on a real API server: each resource's **watch cache** (the
last ``history_limit`` changes of that resource; a watch from an older version gets 410) and
**etcd's compaction** (:meth:`Store.compact`; LISTs at an exact older version and continue tokens
older than it get 410, watches are still served from the cache).
"""

from __future__ import annotations

import base64
import binascii
import builtins
import copy
import json
import re
import secrets
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from . import schema
from . import status as st
from .apply import ApplyConflict, dotted, merge_patch, record_update, server_side_apply
from .jsonwire import sorted_keys
from .objects import build_namespace, now, with_namespace_defaults
from .resources import ALL_RESOURCES, NAMESPACES, ResourceType
from .selectors import Selection
from .watch import INITIAL_EVENTS_END, Change, Watcher, bookmark

Key = tuple[str, str]  # (namespace, name)
Hook = Callable[[Change], None]
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SNAPSHOTS_KEPT = 64
_TOKEN_VERSION = "kube-fake/v1"


def sorted_keys_shallow(page: dict[str, Any]) -> dict[str, Any]:
    """A list document with its own keys sorted (its items are already stored sorted)."""
    return {key: page[key] for key in sorted(page)}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _content(rt: ResourceType, obj: dict[str, Any] | None) -> dict[str, Any]:
    """What metadata.generation tracks: everything but metadata (and status with a status subresource)."""
    skip = {"apiVersion", "kind", "metadata"} | ({"status"} if rt.status_subresource else set())
    return {k: v for k, v in (obj or {}).items() if k not in skip}


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without resourceVersion and managedFields timestamps (a write that only changes those is a no-op)."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata") or {}
    meta.pop("resourceVersion", None)
    for entry in meta.get("managedFields") or []:
        entry.pop("time", None)
    return out


def validate_name(rt: ResourceType, name: str | None) -> None:
    """422 unless ``name`` is a DNS-1123 subdomain."""
    if not name:
        raise st.invalid(
            rt, "", [("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")]
        )
    if len(name) > 253 or not _NAME.match(name):
        message = (
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
            "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
            f"regex used for validation is '{_NAME.pattern[1:-1]}')"
        )
        raise st.invalid(rt, name, [("FieldValueInvalid", "metadata.name", message)])


def validate_custom(rt: ResourceType, obj: dict[str, Any]) -> None:
    """422 unless a custom resource satisfies its CRD's schema (:mod:`.schema`)."""
    if rt.custom:
        schema.validate(rt, obj)


def _token_problem(token: str) -> str:
    """Why a continue token does not decode, in the words of Go's base64 and encoding/json."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    bad = next((i for i, c in enumerate(token) if c not in alphabet), None)
    if bad is not None or len(token) % 4 == 1:
        return f"illegal base64 data at input byte {bad if bad is not None else len(token) - 1}"
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).lstrip(b" \t\r\n")
    if not raw:
        return "unexpected end of JSON input"
    if raw[:1] not in b'{["-0123456789tfn':
        char = chr(raw[0])
        quoted = char if char.isprintable() and raw[0] < 0x80 else f"\\u{raw[0]:04x}"
        return f"invalid character '{quoted}' looking for beginning of value"
    return "the token is not one this server issued"


def _uid_mismatch(rt: ResourceType, name: str, wanted: str, old: dict[str, Any]) -> st.ApiError:
    return st.uid_mismatch(rt, name, wanted, old["metadata"]["uid"])


class Store:
    """All objects of all resources, behind one re-entrant lock."""

    def __init__(self, history_limit: int = 1000, gc_delay: float = 0.03, namespaces: tuple[str, ...] = ("default",)):
        """``history_limit``: the changes each resource's watch cache holds; ``gc_delay``: seconds the
        garbage collector takes to delete a dependent whose owners are all gone; ``namespaces``: those
        that exist from the start."""
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[ResourceType, dict[Key, dict[str, Any]]] = {rt: {} for rt in ALL_RESOURCES}
        self._history: dict[ResourceType, deque[Change]] = {rt: deque() for rt in ALL_RESOURCES}
        self._history_limit = history_limit
        self._floors: dict[ResourceType, int] = {rt: 0 for rt in ALL_RESOURCES}  # a watch resumes from RV >= floor
        self._type_rv: dict[ResourceType, int] = {rt: 0 for rt in ALL_RESOURCES}  # each cache's newest change
        self._compacted = 0  # etcd's compaction revision
        self._watchers: set[Watcher] = set()
        self._snapshots: OrderedDict[str, tuple[int, list[dict[str, Any]]]] = OrderedDict()
        self._hooks: list[Hook] = [self._collect_garbage]
        self.gc_delay = gc_delay
        self.gc_running = True
        self._orphaned: set[str] = set()  # uids deleted with orphaning: their dependents stay
        self._gc_timer: threading.Timer | None = None
        self._gc_idle = threading.Condition(self._lock)
        self._committed = threading.Condition(self._lock)
        for namespace in namespaces:
            self.ensure_namespace(namespace)

    def locked(self) -> threading.RLock:
        """The store lock, for a read-modify-write that must not interleave with other writes."""
        return self._lock

    # ----- reads -------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def find(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects[rt].get((namespace, name))

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.find(rt, namespace, name)
        if obj is None:
            raise st.not_found(rt, name)
        return obj

    def select(self, rt: ResourceType, selection: Selection) -> list[dict[str, Any]]:
        """Matching objects ordered by (namespace, name), as the API server's storage orders them."""
        with self._lock:
            return [obj for key, obj in sorted(self._objects[rt].items()) if selection.matches(obj)]

    def list(self, rt: ResourceType, selection: Selection, limit: int = 0, token: str | None = None) -> dict[str, Any]:
        """A ``*List`` document, one page of it when ``limit`` is set (``token``: a continue token)."""
        with self._lock:
            if token:
                snapshot_id, offset, rv, items = self._resume(token)
            else:
                snapshot_id, offset, rv, items = None, 0, self._rv, self.select(rt, selection)
            end = offset + limit if limit > 0 else len(items)
            metadata: dict[str, Any] = {"continue": ""} if rt.custom else {}  # a CR list always has "continue"
            if end < len(items):
                if snapshot_id is None:
                    snapshot_id = secrets.token_hex(8)
                    self._snapshots[snapshot_id] = (rv, items)
                    while len(self._snapshots) > _SNAPSHOTS_KEPT:
                        self._snapshots.popitem(last=False)
                metadata["continue"] = self._token(snapshot_id, end, rv)
                metadata["remainingItemCount"] = len(items) - end
            metadata["resourceVersion"] = str(rv)
            page = {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": metadata,
                "items": items[offset:end],
            }
            return sorted_keys_shallow(page) if rt.custom else page

    @staticmethod
    def _token(snapshot_id: str, offset: int, rv: int) -> str:
        raw = json.dumps({"v": _TOKEN_VERSION, "s": snapshot_id, "o": offset, "rv": rv}).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _resume(self, token: str) -> tuple[str, int, int, builtins.list[dict[str, Any]]]:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            snapshot_id, offset, rv = decoded["s"], int(decoded["o"]), int(decoded["rv"])
            if decoded.get("v") != _TOKEN_VERSION:
                raise ValueError("unknown token version")
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise st.bad_request(
                f"invalid continue token: continue key is not valid: {_token_problem(token)}"
            ) from None
        if snapshot_id not in self._snapshots or rv < self._compacted:
            raise st.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter, or use the continue token in this "
                "response to retrieve the remainder of the results. Continuing with the provided token results "
                "in an inconsistent list - objects that were created, modified, or deleted between the time the "
                "first chunk was returned and now may show up in the list."
            )
        _, items = self._snapshots[snapshot_id]
        return snapshot_id, offset, rv, items

    # ----- watches -----------------------------------------------------------------------------
    def watch(
        self, rt: ResourceType, selection: Selection, resource_version: str | None, send_initial: bool = False
    ) -> Watcher:
        """Register a watcher, preloaded with the replay from ``resource_version`` or synthetic ADDED events.

        Raises a 410 ``Expired`` :class:`~.status.ApiError` when that version is older than the history.
        """
        with self._lock:
            if send_initial or resource_version in (None, "", "0"):
                watcher = Watcher(rt, selection, self._rv, self._type_rv[rt])
                events = [{"type": "ADDED", "object": obj} for obj in self.select(rt, selection)]
                if send_initial:
                    events.append(bookmark(rt, self._rv, {INITIAL_EVENTS_END: "true"}))
            else:
                try:
                    since = int(resource_version)
                except ValueError:
                    raise st.bad_request(f"invalid resource version: {resource_version!r}") from None
                if since < self._floors[rt]:
                    raise st.expired(f"too old resource version: {since} ({self._floors[rt]})")
                # a version from the future: the stream stays silent until changes pass it
                watcher = Watcher(rt, selection, since, self._type_rv[rt])
                translated = (watcher.translate(c) for c in self._history[rt] if c.rv > since)
                events = [e for e in translated if e is not None]
            watcher.preload(events)
            self._watchers.add(watcher)
            return watcher

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)

    def watchers(self, rt: ResourceType | None = None) -> builtins.list[Watcher]:
        with self._lock:
            return [w for w in self._watchers if rt is None or w.resource == rt]

    def close_watchers(self, rt: ResourceType | None = None) -> None:
        """End open streams (all, or those of one resource)."""
        for watcher in self.watchers(rt):
            watcher.close()

    def compact(self) -> int:
        """Compact etcd at the current revision (returned): LISTs at an exact older version and continue
        tokens issued before it get 410 from now on; watches are still served from the watch cache."""
        with self._lock:
            self._compacted = self._rv
            return self._compacted

    def reinitialise_watch_cache(self, rt: ResourceType | None = None, *, advance: int = 0) -> int:
        """Re-list the watch cache (all resources', or one's) at the current revision, as a restarted
        API server or a cacher whose etcd watch failed does: open streams end cleanly, and a watch from
        an older version than the new window gets 410. ``advance`` first moves the revision on (writes
        of resources the fake does not serve, such as the server's own leases). Returns the new floor.
        """
        with self._lock:
            self._rv += advance
            self._committed.notify_all()
            for resource in [rt] if rt is not None else ALL_RESOURCES:
                self._history[resource].clear()
                self._floors[resource] = self._rv
                self._type_rv[resource] = 0
            self.close_watchers(rt)
            return self._rv

    def check_list_version(self, resource_version: str | None, match: str | None, paged: bool) -> int | None:
        """The version a LIST must be served at, or None for the current state; 410 when etcd has
        compacted it away. Only ``Exact``, or a version with a limit and no match rule, read at that
        version (the fake then serves the current state); ``NotOlderThan`` and ``0`` read the newest
        state. A version newer than the current one is returned for the caller to wait on."""
        if resource_version in (None, "") or (resource_version == "0" and match != "Exact"):
            return None
        try:
            wanted = int(resource_version)
        except ValueError:
            raise st.bad_request(f"invalid resource version: {resource_version!r}") from None
        with self._lock:
            exact = match == "Exact" or (match in (None, "") and paged)
            if exact and wanted < self._compacted:
                raise st.expired("The resourceVersion for the provided list is too old.")
            return wanted if wanted > self._rv else None

    def wait_for_version(self, wanted: int, timeout: float) -> None:
        """Block until the revision reaches ``wanted``; the real server's 504 after ``timeout`` otherwise."""
        with self._committed:
            if not self._committed.wait_for(lambda: self._rv >= wanted, timeout):
                current = self._rv
                details = {
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                }
                message = f"Timeout: Too large resource version: {wanted}, current: {current}"
                raise st.ApiError(504, message, "Timeout", details)

    def add_hook(self, hook: Hook) -> None:
        """Run ``hook(change)`` after every commit, under the store lock (it may write, re-entrantly)."""
        with self._lock:
            self._hooks.append(hook)

    # ----- commit ------------------------------------------------------------------------------
    def _commit(
        self, rt: ResourceType, old: dict[str, Any] | None, new: dict[str, Any] | None, cascade: bool = True
    ) -> Change:
        self._rv += 1
        key_source = new if new is not None else old
        assert key_source is not None
        key = (_meta(key_source).get("namespace", ""), _meta(key_source)["name"])
        if new is not None:
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[rt][key] = new
        else:
            del self._objects[rt][key]
            old = copy.deepcopy(old)
            assert old is not None
            old["metadata"]["resourceVersion"] = str(self._rv)
        change = Change(self._rv, rt, old, new, cascade)
        history = self._history[rt]
        history.append(change)
        self._type_rv[rt] = self._rv
        while len(history) > self._history_limit:
            history.popleft()
            self._floors[rt] = history[0].rv - 1  # the watch cache's oldest event, less one
        for watcher in list(self._watchers):
            watcher.offer(change)
        for hook in list(self._hooks):
            hook(change)
        self._committed.notify_all()
        return change

    def _finalize(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        old: dict[str, Any] | None,
        new: dict[str, Any],
        uid: str | None = None,
        trusted: bool = False,
    ) -> dict[str, Any]:
        """``new`` with type, identity and server-set metadata filled in (resourceVersion comes at commit).

        ``trusted`` (test-control writes) lets ``new`` set a deletionTimestamp itself.
        """
        obj = copy.deepcopy(new)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta.pop("resourceVersion", None)
        if old is None:
            meta["uid"] = uid or str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
        else:
            old_meta = _meta(old)
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if field in old_meta:
                    meta[field] = old_meta[field]
                elif not (trusted and field.startswith("deletion")):
                    meta.pop(field, None)
            bump = _content(rt, old) != _content(rt, obj)
            meta["generation"] = int(old_meta.get("generation", 1)) + (1 if bump else 0)
        return obj

    def _write(
        self, rt: ResourceType, old: dict[str, Any] | None, new: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        if old is not None and _comparable(old) == _comparable(new):
            return old  # no-op: nothing written, no event, resourceVersion unchanged
        if rt.custom:  # an unstructured object: the server writes its keys sorted
            new["metadata"].setdefault("resourceVersion", "")  # (set at commit, in its sorted place)
            new = sorted_keys(new)
        if dry_run:
            if old is not None:
                new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return new
        self._commit(rt, old, new)
        return new

    # ----- writes through the API ----------------------------------------------------------------
    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: dict[str, Any],
        manager: str,
        *,
        validate: bool = True,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        meta = _meta(body)
        name = meta.get("name") or (
            meta["generateName"] + secrets.token_hex(3)[:5] if meta.get("generateName") else None
        )
        validate_name(rt, name)
        assert name is not None
        body = copy.deepcopy(body)
        if rt == NAMESPACES:
            body = with_namespace_defaults({**body, "metadata": {**meta, "name": name}})
        elif rt.status_subresource:
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        with self._lock:
            self.require_namespace(rt, namespace)
            if (namespace, name) in self._objects[rt]:
                raise st.already_exists(rt, name)
            obj = self._finalize(rt, namespace, name, None, body)
            if validate:
                validate_custom(rt, obj)
            obj["metadata"]["managedFields"] = record_update(None, obj, manager, rt.api_version, now())
            return self._write(rt, None, obj, dry_run)

    def _check_rv(self, rt: ResourceType, name: str, old: dict[str, Any], wanted: str | None) -> None:
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise st.stale(rt, name)

    def replace(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: dict[str, Any],
        manager: str,
        *,
        validate: bool = True,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PUT: resourceVersion in the body is a precondition (required for custom resources)."""
        meta = _meta(body)
        with self._lock:
            old = self.get(rt, namespace, name)
            wanted = meta.get("resourceVersion")
            if not wanted and rt.custom:
                message = "Invalid value: 0x0: must be specified for an update"
                raise st.invalid(rt, name, [("FieldValueInvalid", "metadata.resourceVersion", message)])
            self._check_rv(rt, name, old, wanted)
            if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
                raise _uid_mismatch(rt, name, meta["uid"], old)
            return self._update(rt, namespace, name, old, copy.deepcopy(body), manager, validate, dry_run)

    def merge_patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch: Any,
        manager: str,
        *,
        validate: bool = True,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(patch, dict):
            raise st.bad_request("a merge patch must be a JSON object")
        with self._lock:
            old = self.get(rt, namespace, name)
            self._check_rv(rt, name, old, _meta(patch).get("resourceVersion"))
            return self._update(rt, namespace, name, old, merge_patch(old, patch), manager, validate, dry_run)

    def _update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        old: dict[str, Any],
        obj: dict[str, Any],
        manager: str,
        validate: bool,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Store ``obj`` (a fresh copy) as the update of ``old`` by ``manager`` (lock held)."""
        if rt.status_subresource:
            obj["status"] = copy.deepcopy(old.get("status"))  # status is a subresource: not updated here
        obj = self._finalize(rt, namespace, name, old, obj)
        if validate:
            validate_custom(rt, obj)
        obj["metadata"]["managedFields"] = record_update(old, obj, manager, rt.api_version, now())
        return self._write(rt, old, obj, dry_run)

    def apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: dict[str, Any],
        manager: str,
        *,
        force: bool,
        validate: bool = True,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply; returns (object, created)."""
        validate_name(rt, name)
        with self._lock:
            old = self.find(rt, namespace, name)
            if old is None:
                self.require_namespace(rt, namespace)
            wanted = _meta(body).get("resourceVersion")
            if wanted and (old is None or wanted != old["metadata"]["resourceVersion"]):
                raise st.stale(rt, name)
            try:
                merged = server_side_apply(old, body, manager, rt.api_version, now(), force=force)
            except ApplyConflict as conflict:
                raise st.apply_conflict([(m, dotted(p)) for m, p in conflict.conflicts]) from None
            if rt.status_subresource:
                merged["status"] = copy.deepcopy((old or {}).get("status", {"phase": "Pending"}))
            obj = self._finalize(rt, namespace, name, old, merged)
            if validate:
                validate_custom(rt, obj)
            return self._write(rt, old, obj, dry_run), old is None

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        preconditions: dict[str, Any] | None = None,
        *,
        cascade: bool = True,
        dry_run: bool = False,
        grace: int | None = None,
    ) -> dict[str, Any]:
        """Delete (no finalizers); dependents are collected when ``cascade``.

        Pods are bound to a node, so like the real server: a graceful delete (``grace`` None: the
        pod's 30 s, or > 0) only marks the pod terminating (MODIFIED with ``deletionTimestamp``) and
        returns it; ``grace`` 0 marks it (MODIFIED), then removes it (DELETED). Other objects go at once.
        """
        with self._lock:
            old = self.get(rt, namespace, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise _uid_mismatch(rt, name, pre["uid"], old)
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise st.precondition_failed(
                    rt,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
                )
            if dry_run:
                return old
            if rt == NAMESPACES:
                return self._delete_namespace(old)
            if rt.plural == "pods":
                return self._delete_pod(rt, old, 30 if grace is None else grace, cascade)
            return self._commit(rt, old, None, cascade).current

    def _delete_pod(self, rt: ResourceType, old: dict[str, Any], grace: int, cascade: bool) -> dict[str, Any]:
        meta = _meta(old)
        if grace > 0 and meta.get("deletionTimestamp"):
            return old  # already terminating: nothing changes
        marked = copy.deepcopy(old)
        marked["metadata"]["deletionTimestamp"] = now(grace)
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        self._commit(rt, old, marked)
        if grace > 0:
            return marked
        return self._commit(rt, marked, None, cascade).current

    def delete_collection(
        self, rt: ResourceType, selection: Selection, *, cascade: bool = True
    ) -> builtins.list[dict[str, Any]]:
        with self._lock:
            return [
                self.delete(rt, _meta(o).get("namespace", ""), _meta(o)["name"], cascade=cascade)
                for o in self.select(rt, selection)
            ]

    # ----- namespaces ---------------------------------------------------------------------------
    def namespace_exists(self, namespace: str) -> bool:
        with self._lock:
            return ("", namespace) in self._objects[NAMESPACES]

    def require_namespace(self, rt: ResourceType, namespace: str) -> None:
        """404 ``namespaces "x" not found`` when a namespaced object would be created in a missing namespace
        (the NamespaceLifecycle admission check; lists and reads there just find nothing)."""
        if rt.namespaced and not self.namespace_exists(namespace):
            raise st.not_found(NAMESPACES, namespace)

    def ensure_namespace(self, namespace: str) -> dict[str, Any]:
        """The Namespace ``namespace``, created first when missing."""
        with self._lock:
            existing = self.find(NAMESPACES, "", namespace)
            if existing is not None:
                return existing
            return self.put(NAMESPACES, build_namespace(namespace), manager="kube-fake")

    def _delete_namespace(self, namespace: dict[str, Any]) -> dict[str, Any]:
        """Delete every object in ``namespace``, then the Namespace itself (at once: the namespace controller's
        work done synchronously). Returns the Namespace as the DELETE answer shows it: Terminating."""
        name = _meta(namespace)["name"]
        for rt in ALL_RESOURCES:
            if rt.namespaced:
                for obj in self.select(rt, Selection(name)):
                    if self._objects[rt].get((name, _meta(obj)["name"])) is obj:  # not collected meanwhile
                        self._commit(rt, obj, None)
        gone = copy.deepcopy(self._commit(NAMESPACES, namespace, None).current)
        gone["metadata"]["deletionTimestamp"] = now()
        gone["status"] = {"phase": "Terminating"}
        return gone

    # ----- writes from the test-control API -----------------------------------------------------
    def put(self, rt: ResourceType, obj: dict[str, Any], manager: str = "kube-fake") -> dict[str, Any]:
        """Create or overwrite ``obj`` without validation or preconditions (keeps a uid it names);
        a namespaced object's namespace is created first when missing."""
        meta = _meta(obj)
        namespace, name = (meta.get("namespace") or "default") if rt.namespaced else "", meta["name"]
        with self._lock:
            if rt.namespaced:
                self.ensure_namespace(namespace)
            old = self.find(rt, namespace, name)
            new = self._finalize(rt, namespace, name, old, obj, uid=meta.get("uid"), trusted=True)
            if old is not None and meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
                self._commit(rt, old, None)  # a different object under the same name: delete, recreate
                old = None
                new = self._finalize(rt, namespace, name, None, obj, uid=meta["uid"])
            new["metadata"]["managedFields"] = record_update(old, new, manager, rt.api_version, now())
            return self._write(rt, old, new, dry_run=False)

    def drop_all(self, rt: ResourceType) -> None:
        """Delete every object of ``rt`` (as removing its CRD does) and end its watches."""
        with self._lock:
            for obj in self.select(rt, Selection(None)):
                self._commit(rt, obj, None)
            self.close_watchers(rt)

    # ----- garbage collection -------------------------------------------------------------------
    def _collect_garbage(self, change: Change) -> None:
        """The garbage collector notices deletions and objects with ownerReferences: it acts ``gc_delay``
        later (tens of ms on a real cluster), deleting every object whose owners are all gone."""
        if change.new is None and not change.cascade:
            uid = _meta(change.current).get("uid")
            if uid:
                self._orphaned.add(uid)
            return
        if change.new is not None and not _meta(change.new).get("ownerReferences"):
            return
        self._schedule_collection()

    def _schedule_collection(self) -> None:
        if not self.gc_running or self._gc_timer is not None:
            return
        self._gc_timer = threading.Timer(self.gc_delay, self._collect)
        self._gc_timer.daemon = True
        self._gc_timer.start()

    def _collect(self) -> None:
        with self._lock:
            self._gc_timer = None
            if self.gc_running:
                for rt, obj in self._garbage():
                    key = (_meta(obj)["namespace"], _meta(obj)["name"])
                    if self._objects[rt].get(key) is obj:
                        self._commit(rt, obj, None)
            self._gc_idle.notify_all()

    def _garbage(self) -> builtins.list[tuple[ResourceType, dict[str, Any]]]:
        """Objects whose ownerReferences all name uids that no longer exist (and were not orphaned)."""
        alive = {_meta(o).get("uid") for objects in self._objects.values() for o in objects.values()}
        found = []
        for rt, objects in self._objects.items():
            for obj in objects.values():
                owners = {r.get("uid") for r in _meta(obj).get("ownerReferences") or []}
                if owners and not owners & alive and not owners & self._orphaned:
                    found.append((rt, obj))
        return found

    def set_garbage_collector(self, running: bool) -> None:
        """Stop (as with the controller manager down) or start the garbage collector; on start it
        looks at every object at once."""
        with self._lock:
            self.gc_running = running
            if running:
                self._schedule_collection()
            elif self._gc_timer is not None:
                self._gc_timer.cancel()
                self._gc_timer = None
                self._gc_idle.notify_all()

    def wait_for_garbage_collection(self, timeout: float) -> bool:
        """Block until the collector has nothing pending; False when it still had after ``timeout``."""
        with self._gc_idle:
            return self._gc_idle.wait_for(lambda: self._gc_timer is None, timeout)
