"""Field ownership (``metadata.managedFields``), server-side apply and JSON merge patch.

Simplified structured-merge semantics, enough for one or a few field managers on a CR:

* a manager owns a set of *members*: every leaf it set (a scalar, null, an empty map or a list; lists are
  atomic except ``metadata.ownerReferences``, whose items are members keyed by uid, ``k:{"uid":...}``) and
  every non-empty map below the object's declared structure (``metadata.labels``, the maps inside
  ``spec.data``; fieldsV1 marks those with ``"."``); ``root``, ``metadata``, ``spec``, ``spec.data`` and
  ``status`` are structure, not members, for an apply (an update owns ``spec`` and ``spec.data`` too);
* ``apiVersion``, ``kind`` and the server-set metadata (name, uid, resourceVersion, …) are never owned;
* an apply merges its configuration into the live object (maps merge key by key; anything else, null
  included, replaces), then removes the members its manager applied before and now omits unless someone
  else owns them; a map emptied by that removal becomes **null** (not ``{}``), as the real server's
  structured-merge-diff does: re-applying ``{}`` then stores ``{}``;
* a member another manager owns conflicts when the apply changes it (a map changes only when it appears
  or changes type: its keys are members of their own); 409 without ``force``, with it the applier takes over;
* an update (create, PUT, merge patch) gives its manager the members it changed and takes them from the others;
* ``managedFields`` entries are ordered by operation, time and manager; a write that changed nothing but
  its manager's field set leaves that entry without a time.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

FieldPath = tuple[str, ...]
MISSING: Any = object()
SERVER_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


class ApplyConflict(Exception):
    """An apply without ``force`` would change fields other managers own."""

    def __init__(self, conflicts: list[tuple[str, FieldPath]]):
        super().__init__(f"{len(conflicts)} conflict(s)")
        self.conflicts = conflicts  # (the manager as conflict messages name it, path)


@dataclass(frozen=True)
class ManagedEntry:
    """One ``metadata.managedFields`` entry."""

    manager: str
    operation: str  # "Apply" or "Update"
    api_version: str
    time: str
    fields: frozenset[FieldPath]

    def printed(self) -> str:
        """How conflict messages name this manager: ``"m"``, or ``"m" using v1`` for an Update."""
        name = f'"{self.manager}"'
        return f"{name} using {self.api_version}" if self.operation == "Update" else name

    def to_json(self) -> dict[str, Any]:
        entry = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:  # none when the manager's write changed nothing but its own field set
            entry["time"] = self.time
        return {**entry, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(self.fields)}


def dotted(path: FieldPath) -> str:
    """``('spec', 'data')`` → ``.spec.data`` (the form conflict messages use)."""
    return "".join(f".{p}" for p in path)


def owned_content(obj: dict[str, Any] | None) -> dict[str, Any]:
    """The part of ``obj`` whose fields can be owned."""
    if not obj:
        return {}
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_METADATA}
    if meta:
        out["metadata"] = meta
    return out


STRUCTURE: frozenset[FieldPath] = frozenset({(), ("metadata",), ("spec",), ("spec", "data"), ("status",)})


UPDATE_STRUCTURE: frozenset[FieldPath] = frozenset({(), ("metadata",)})
KEYED_LISTS: dict[FieldPath, str] = {
    ("metadata", "ownerReferences"): "uid"
}  # lists whose items are members, by key (others: atomic)


def item_part(list_path: FieldPath, item: Any) -> str | None:
    """The path part naming ``item`` of a keyed list: ``k:{"uid":"..."}`` (None: not a keyed item)."""
    key = KEYED_LISTS.get(list_path)
    if key is None or not isinstance(item, dict) or key not in item:
        return None
    return "k:" + json.dumps({key: item[key]}, separators=(",", ":"))


def member_paths(value: Any, prefix: FieldPath = (), structure: frozenset[FieldPath] = STRUCTURE) -> set[FieldPath]:
    """The members ``value`` sets: leaves (non-maps and empty maps) and non-empty maps outside ``structure``.

    An apply configuration leaves the declared objects out (:data:`STRUCTURE`); an update, whose set is
    what it changed in the whole object, owns ``spec`` and ``spec.data`` too (:data:`UPDATE_STRUCTURE`).
    """
    if isinstance(value, dict) and value:
        found: set[FieldPath] = set() if prefix in structure else {prefix}
        for key, sub in value.items():
            found |= member_paths(sub, (*prefix, key), structure)
        return found
    if isinstance(value, list) and value and prefix in KEYED_LISTS:
        parts = [item_part(prefix, item) for item in value]
        if all(parts):
            return {(*prefix, str(part)) for part in parts}
    return {prefix} if prefix else set()


def node_changed(before: Any, after: Any) -> bool:
    """Whether a member's own value differs: two maps are the same node (their keys are members of their own)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return False
    return bool(before != after)


def lookup(obj: Any, path: FieldPath) -> Any:
    """The value at ``path``, or :data:`MISSING`."""
    for index, part in enumerate(path):
        if isinstance(obj, list) and part.startswith("k:"):
            obj = next((item for item in obj if item_part(path[:index], item) == part), MISSING)
            if obj is MISSING:
                return MISSING
            continue
        if not isinstance(obj, dict) or part not in obj:
            return MISSING
        obj = obj[part]
    return obj


def _remove(obj: dict[str, Any], path: FieldPath) -> None:
    """Delete the member at ``path`` (in place); each map on the way that this leaves empty becomes null."""
    parents = []
    node: Any = obj
    for index, part in enumerate(path[:-1]):
        keyed_list = path[: index + 1] in KEYED_LISTS and index == len(path) - 2
        if not isinstance(node, dict) or not isinstance(node.get(part), list if keyed_list else dict):
            return  # gone already, or no longer a map: nothing of it left to remove
        parents.append((node, part))
        node = node[part]
    if isinstance(node, list):  # an item of a keyed list
        parent, key = parents.pop()
        kept = [item for item in node if item_part(path[:-1], item) != path[-1]]
        if kept:
            parent[key] = kept
        else:
            del parent[key]  # an empty list is omitted, as typed metadata omits it
        return
    if not isinstance(node, dict) or path[-1] not in node:
        return
    del node[path[-1]]
    for parent, key in reversed(parents):
        if parent[key] or (parent is obj and key == "metadata"):
            break
        parent[key] = None


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``overlay`` merged into a copy of ``base``: maps merge recursively, other values replace."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def drop_nulls(value: Any) -> Any:
    """``value`` without map entries whose value is null (an apply treats them as unspecified)."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def to_fields_v1(paths: Iterable[FieldPath]) -> dict[str, Any]:
    """The ``fieldsV1`` tree: ``{"f:spec": {"f:data": {"f:m": {".": {}, "f:k": {}}}}}`` (``"."``: the map itself
    is a member, besides its keys)."""
    tree: dict[str, Any] = {}
    members = set(paths)
    for path in sorted(members):
        node = tree
        for part in path:
            node = node.setdefault(_tree_key(part), {})
    for path in members:
        node = tree
        for part in path:
            node = node[_tree_key(part)]
        if node:
            node["."] = {}
    return _sorted_tree(tree)


def _tree_key(part: str) -> str:
    return part if part.startswith("k:") else f"f:{part}"


def from_fields_v1(tree: dict[str, Any], prefix: FieldPath = ()) -> set[FieldPath]:
    """Inverse of :func:`to_fields_v1` (other list item forms, ``v:`` and ``i:``, own their list as a whole)."""
    found: set[FieldPath] = set()
    for key, sub in tree.items():
        if key.startswith(("f:", "k:")):
            path = (*prefix, key[2:] if key.startswith("f:") else key)
            found |= from_fields_v1(sub, path) if sub else {path}
        elif prefix:
            found.add(prefix)
    return found


def load_entries(obj: dict[str, Any] | None) -> list[ManagedEntry]:
    """Parse ``metadata.managedFields`` of ``obj``."""
    entries = []
    for raw in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        if not isinstance(raw, dict) or "manager" not in raw:
            continue
        fields = frozenset(from_fields_v1(raw.get("fieldsV1") or {}))
        entries.append(
            ManagedEntry(
                raw["manager"], raw.get("operation", "Update"), raw.get("apiVersion", ""), raw.get("time", ""), fields
            )
        )
    return entries


def render_entries(entries: Iterable[ManagedEntry]) -> list[dict[str, Any]]:
    """The ``managedFields`` list in the server's order: by operation (Apply first), time (none first),
    manager and apiVersion; entries owning nothing are dropped."""
    ordered = sorted(entries, key=lambda e: (e.operation, e.time, e.manager, e.api_version))
    return [e.to_json() for e in ordered if e.fields]


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {key: _sorted_tree(tree[key]) for key in sorted(tree)}


def server_side_apply(
    current: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    api_version: str,
    now: str,
    *,
    force: bool,
) -> dict[str, Any]:
    """The object after ``manager`` applies ``applied`` to ``current`` (None: it does not exist yet).

    Server-set metadata is left as in ``current``; the caller fills it in. Raises
    :class:`ApplyConflict` when ``force`` is false and another manager owns a member being changed.
    """
    config = owned_content(applied)
    if isinstance(config.get("metadata"), dict):
        config["metadata"] = drop_nulls(config["metadata"])  # ObjectMeta is typed: a null there is unset
    wanted = member_paths(config)
    entries = load_entries(current)
    mine = next((e for e in entries if e.manager == manager and e.operation == "Apply"), None)
    others = [e for e in entries if e is not mine]
    owned_by_others = set().union(*(e.fields for e in others))

    result = deep_merge(copy.deepcopy(current) if current else {}, config)
    for path in sorted((mine.fields if mine else frozenset()) - wanted - owned_by_others, key=len, reverse=True):
        _remove(result, path)

    lost: dict[int, set[FieldPath]] = {}
    conflicts = []
    for index, entry in enumerate(others):
        for path in sorted(entry.fields):
            after = lookup(result, path)
            if path in wanted and after is not MISSING and node_changed(lookup(current, path), after):
                conflicts.append((entry.printed(), path))
                lost.setdefault(index, set()).add(path)
    if conflicts and not force:
        raise ApplyConflict(conflicts)

    new_entries = [
        replace(e, fields=frozenset(p for p in e.fields - lost.get(i, set()) if lookup(result, p) is not MISSING))
        for i, e in enumerate(others)
    ]
    changed = owned_content(result) != owned_content(current)
    when = now if changed else (mine.time if mine else "")
    new_entries.append(ManagedEntry(manager, "Apply", api_version, when, frozenset(wanted)))
    result.setdefault("metadata", {})["managedFields"] = render_entries(new_entries)
    return result


def record_update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str, api_version: str, now: str
) -> list[dict[str, Any]]:
    """``managedFields`` for ``new`` after ``manager`` replaced ``old`` with it (create when old is None)."""
    old_content, new_content = owned_content(old), owned_content(new)
    members = member_paths(new_content, structure=UPDATE_STRUCTURE)
    changed = {p for p in members if node_changed(lookup(old_content, p), lookup(new_content, p))}
    kept: list[ManagedEntry] = []
    mine: ManagedEntry | None = None
    for entry in load_entries(old):
        fields = frozenset(p for p in entry.fields if lookup(new_content, p) is not MISSING)
        if entry.manager == manager and entry.operation == "Update":
            mine = replace(entry, fields=fields | changed, time=now, api_version=api_version)
            kept.append(mine)
        else:
            kept.append(replace(entry, fields=fields - changed))
    if mine is None and changed:
        kept.append(ManagedEntry(manager, "Update", api_version, now, frozenset(changed)))
    return render_entries(kept)
