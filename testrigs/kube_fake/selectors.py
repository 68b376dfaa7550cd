"""Label selectors (equality and set based) and field selectors, parsed from query parameters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .status import bad_request

_KEY = r"[A-Za-z0-9][A-Za-z0-9._/-]*"
_VALUE = r"[A-Za-z0-9._-]*"
_EQUALITY = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: ``key op values``."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _split_terms(text: str) -> list[str]:
    """Split at commas that are not inside ``( )``."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def _parse_term(term: str) -> Requirement:
    if m := _SET.match(term):
        values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
        return Requirement(m.group(1), m.group(2), values)
    if m := _EQUALITY.match(term):
        op = "=" if m.group(2) == "==" else m.group(2)
        return Requirement(m.group(1), op, (m.group(3),))
    if m := _EXISTS.match(term):
        return Requirement(m.group(2), "!exists" if m.group(1) else "exists")
    raise bad_request(f"unable to parse requirement: {term.strip()!r}")


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        return cls(tuple(_parse_term(t) for t in _split_terms(text or "")))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def _field_value(obj: Mapping[str, Any], dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class FieldSelector:
    """``field=value`` / ``field!=value`` terms over the fields a resource supports."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str | None, supported: tuple[str, ...]) -> FieldSelector:
        terms = []
        for raw in _split_terms(text or ""):
            m = re.match(r"^\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*$", raw)
            if not m:
                raise bad_request(f"invalid field selector: {raw.strip()!r}")
            if m.group(1) not in supported:
                known = ", ".join(f'"{s}"' for s in supported)
                raise bad_request(f"field label not supported: {m.group(1)} (supported: {known})")
            terms.append((m.group(1), m.group(2) != "!=", m.group(3)))
        return cls(tuple(terms))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, f) == v) == equal for f, equal, v in self.terms)


@dataclass(frozen=True)
class Selection:
    """Which objects a list or watch covers: namespace (None = all) plus both selectors."""

    namespace: str | None
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(obj) and self.fields.matches(obj)
