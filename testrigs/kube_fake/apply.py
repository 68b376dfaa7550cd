"""Field ownership (``metadata.managedFields``), server-side apply and JSON merge patch.

Simplified structured-merge semantics, enough for one or a few field managers on a CR:

* maps are granular (each key path is a field), everything else is atomic, so lists such as
  ``metadata.ownerReferences`` are owned as a whole;
* ``apiVersion``, ``kind`` and the server-set metadata (name, uid, resourceVersion, …) are never owned;
* an apply owns the leaf fields of its configuration; a field another manager owns conflicts when the
  apply would change its value (409 without ``force``; with ``force`` the applier takes it over);
  fields the same manager applied before and now omits are removed unless someone else owns them;
* an update (create, PUT, merge patch) gives its manager the fields whose value it changed.
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

    def __init__(self, conflicts: list[tuple[str, str, FieldPath]]):
        super().__init__(f"{len(conflicts)} conflict(s)")
        self.conflicts = conflicts  # (manager, apiVersion, path)


@dataclass(frozen=True)
class ManagedEntry:
    """One ``metadata.managedFields`` entry."""

    manager: str
    operation: str  # "Apply" or "Update"
    api_version: str
    time: str
    fields: frozenset[FieldPath]

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


def leaf_paths(value: Any, prefix: FieldPath = ()) -> set[FieldPath]:
    """Paths of the non-map values and empty maps under ``value``."""
    if isinstance(value, dict) and value:
        found: set[FieldPath] = set()
        for key, sub in value.items():
            found |= leaf_paths(sub, (*prefix, key))
        return found
    return {prefix} if prefix else set()


def lookup(obj: Any, path: FieldPath) -> Any:
    """The value at ``path``, or :data:`MISSING`."""
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return MISSING
        obj = obj[part]
    return obj


def _remove(obj: dict[str, Any], path: FieldPath) -> None:
    """Delete the value at ``path`` and then any map left empty on the way up (in place)."""
    parents = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key] == {} and not (parent is obj and key == "metadata"):  # keep the object's own
            del parent[key]
        else:
            break


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
    """The ``fieldsV1`` tree: ``{"f:spec": {"f:data": {}}}``."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


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


def _overlaps(path: FieldPath, wanted: set[FieldPath]) -> bool:
    if path in wanted:
        return True
    return any(p[: len(path)] == path or path[: len(p)] == p for p in wanted)


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
    :class:`ApplyConflict` when ``force`` is false and another manager owns a field being changed.
    """
    config = drop_nulls(owned_content(applied))
    wanted = leaf_paths(config)
    entries = load_entries(current)
    mine = next((e for e in entries if e.manager == manager and e.operation == "Apply"), None)
    others = [e for e in entries if e is not mine]
    owned_by_others = set().union(*(e.fields for e in others))

    result = copy.deepcopy(current) if current else {}
    for path in sorted((mine.fields if mine else frozenset()) - wanted - owned_by_others, key=len, reverse=True):
        _remove(result, path)
    result = deep_merge(result, config)

    lost: dict[int, set[FieldPath]] = {}
    conflicts = []
    for index, entry in enumerate(others):
        for path in sorted(entry.fields):
            if _overlaps(path, wanted) and lookup(current, path) != lookup(result, path):
                conflicts.append((entry.manager, entry.api_version, path))
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
    changed = {p for p in leaf_paths(new_content) if lookup(old_content, p) != lookup(new_content, p)}
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
