"""Field ownership (``metadata.managedFields``), server-side apply and JSON merge patch.

Simplified structured-merge semantics, enough for one or a few field managers on a CR:

* a manager owns a set of *members*: every leaf it set (a scalar, null, an empty map or a list, lists
  being atomic, so ``metadata.ownerReferences`` is owned as a whole) and every non-empty map below the
  object's declared structure (``metadata.labels``, the maps inside ``spec.data``; fieldsV1 marks those
  with ``"."``); ``root``, ``metadata``, ``spec``, ``spec.data`` and ``status`` are structure, not members;
* ``apiVersion``, ``kind`` and the server-set metadata (name, uid, resourceVersion, …) are never owned;
* an apply merges its configuration into the live object (maps merge key by key; anything else, null
  included, replaces), then removes the members its manager applied before and now omits unless someone
  else owns them; a map emptied by that removal becomes **null** (not ``{}``), as the real server's
  structured-merge-diff does: re-applying ``{}`` then stores ``{}``;
* a member another manager owns conflicts when the apply changes it (a map changes only when it appears
  or changes type: its keys are members of their own); 409 without ``force``, with it the applier takes over;
* an update (create, PUT, merge patch) gives its manager the members it changed and takes them from the others.
"""

from __future__ import annotations

import copy
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
        return {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }


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


def member_paths(value: Any, prefix: FieldPath = ()) -> set[FieldPath]:
    """The members ``value`` sets: leaves (non-maps and empty maps) and non-empty maps outside :data:`STRUCTURE`."""
    if isinstance(value, dict) and value:
        found: set[FieldPath] = set() if prefix in STRUCTURE else {prefix}
        for key, sub in value.items():
            found |= member_paths(sub, (*prefix, key))
        return found
    return {prefix} if prefix else set()


def node_changed(before: Any, after: Any) -> bool:
    """Whether a member's own value differs: two maps are the same node (their keys are members of their own)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return False
    return bool(before != after)


def lookup(obj: Any, path: FieldPath) -> Any:
    """The value at ``path``, or :data:`MISSING`."""
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return MISSING
        obj = obj[part]
    return obj


def _remove(obj: dict[str, Any], path: FieldPath) -> None:
    """Delete the member at ``path`` (in place); each map on the way that this leaves empty becomes null."""
    parents = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(part), dict):
            return  # gone already, or no longer a map: nothing of it left to remove
        parents.append((node, part))
        node = node[part]
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
            node = node.setdefault(f"f:{part}", {})
    for path in members:
        node = tree
        for part in path:
            node = node[f"f:{part}"]
        if node:
            node["."] = {}
    return _sorted_tree(tree)


def from_fields_v1(tree: dict[str, Any], prefix: FieldPath = ()) -> set[FieldPath]:
    """Inverse of :func:`to_fields_v1` (``.`` and keyed list items own their parent as a whole)."""
    found: set[FieldPath] = set()
    for key, sub in tree.items():
        if key.startswith("f:"):
            path = (*prefix, key[2:])
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
    return [e.to_json() for e in entries if e.fields]


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
    applied_entry = ManagedEntry(manager, "Apply", api_version, now, frozenset(wanted))
    position = entries.index(mine) if mine else len(new_entries)
    new_entries.insert(min(position, len(new_entries)), applied_entry)
    result.setdefault("metadata", {})["managedFields"] = render_entries(new_entries)
    return result


def record_update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str, api_version: str, now: str
) -> list[dict[str, Any]]:
    """``managedFields`` for ``new`` after ``manager`` replaced ``old`` with it (create when old is None)."""
    old_content, new_content = owned_content(old), owned_content(new)
    changed = {p for p in member_paths(new_content) if node_changed(lookup(old_content, p), lookup(new_content, p))}
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
