"""The DynamoWorkerMetadata structural schema, read from the CRD manifest the library ships, and what the
API server does with it (as ``tests/fixtures/kube-apiserver-1.28/pruning.json`` shows):

* an apply naming a field the schema does not declare, or giving a map-typed field a non-map, fails
  with **500** "failed to create typed patch object (...)" before anything is stored;
* a create, update or merge patch has undeclared fields **pruned**, each reported in a ``Warning: 299``
  header (``fieldValidation=Strict``: 400 instead; ``Ignore``: silently);
* the stored object is then validated: required properties present, declared types respected (422).

``x-kubernetes-preserve-unknown-fields`` makes a subtree free-form; ``apiVersion``, ``kind`` and
``metadata`` are always declared at the root.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from . import status as st
from .resources import ResourceType

CRD_MANIFEST = Path(__file__).resolve().parents[2] / "backends" / "kube" / "manifests" / "crd.yaml"
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class Schema:
    """One node of an OpenAPI v3 structural schema."""

    type: str | None = None
    properties: dict[str, Schema] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    preserve_unknown: bool = False

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Schema:
        return cls(
            type=raw.get("type"),
            properties={k: cls.parse(v) for k, v in (raw.get("properties") or {}).items()},
            required=tuple(raw.get("required") or ()),
            preserve_unknown=bool(raw.get("x-kubernetes-preserve-unknown-fields")),
        )

    def declares(self, key: str, at_root: bool) -> bool:
        return self.preserve_unknown or key in self.properties or (at_root and key in _ROOT_FIELDS)


@cache
def crd_schema() -> Schema:
    """The served version's ``openAPIV3Schema`` from ``backends/kube/manifests/crd.yaml``."""
    import yaml

    crd = yaml.safe_load(CRD_MANIFEST.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    return Schema.parse(version["schema"]["openAPIV3Schema"])


def _json_type(value: Any) -> str:
    """The OpenAPI name of a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _go_value(value: Any) -> str:
    """A value as Go's ``%v`` prints it inside structured-merge-diff's error (``&{[1 2]}`` for a list)."""
    if isinstance(value, list):
        return "&{[" + " ".join(_go_value(v) for v in value) + "]}"
    if isinstance(value, dict):
        return "&{map[" + " ".join(f"{k}:{_go_value(v)}" for k, v in sorted(value.items())) + "]}"
    return "<nil>" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _typed_errors(value: Any, schema: Schema, path: str) -> list[str]:
    """Why ``value`` cannot be a typed patch object: undeclared fields, non-maps where maps are declared."""
    if value is None:
        return []
    if schema.type == "object" or schema.properties:
        if not isinstance(value, dict):
            return [f"{path}: expected map, got {_go_value(value)}"]
        if schema.preserve_unknown:
            return []
        errors = []
        for key in sorted(value):
            if not schema.declares(key, at_root=not path):
                errors.append(f"{path}.{key}: field not declared in schema")
            elif key in schema.properties:
                errors.extend(_typed_errors(value[key], schema.properties[key], f"{path}.{key}"))
        return errors
    return []


def check_apply(rt: ResourceType, namespace_in_body: str, name: str, body: dict[str, Any]) -> None:
    """500 when the apply configuration does not fit the schema (structured-merge-diff's typed patch)."""
    errors = _typed_errors(body, crd_schema(), "")
    if errors:
        where = f"{namespace_in_body}/{name}; {rt.api_version}, Kind={rt.kind}"
        raise st.ApiError(500, f"failed to create typed patch object ({where}): {errors[0]}", reason="")


def _prune(value: Any, schema: Schema, path: str, dropped: list[str]) -> Any:
    if schema.preserve_unknown or not isinstance(value, dict) or not (schema.type == "object" or schema.properties):
        return value
    kept = {}
    for key in sorted(value):
        if not schema.declares(key, at_root=not path):
            dropped.append(f"{path}.{key}".lstrip("."))
        elif key in schema.properties:
            kept[key] = _prune(value[key], schema.properties[key], f"{path}.{key}", dropped)
        else:
            kept[key] = value[key]
    return {key: kept[key] for key in value if key in kept}


def prune(rt: ResourceType, body: dict[str, Any], validation: str | None) -> tuple[dict[str, Any], list[str]]:
    """``body`` without undeclared fields, and the ``Warning`` header values naming them.

    ``validation`` is the ``fieldValidation`` parameter: ``Strict`` refuses them (400), ``Ignore`` drops
    them without warnings, anything else (the default, ``Warn``) drops them with warnings.
    """
    dropped: list[str] = []
    pruned = _prune(body, crd_schema(), "", dropped)
    if dropped and validation == "Strict":
        unknown = ", ".join(f'unknown field "{path}"' for path in dropped)
        raise st.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding error: {unknown}'
        )
    if validation == "Ignore":
        return pruned, []
    return pruned, [f'299 - "unknown field \\"{path}\\""' for path in dropped]


def _invalid(value: Any, schema: Schema, path: str) -> list[tuple[str, str, str]]:
    causes: list[tuple[str, str, str]] = []
    if schema.type is not None and _json_type(value) != schema.type:
        kind = _json_type(value)
        if not (schema.type == "number" and kind == "integer"):
            message = f'Invalid value: "{kind}": {path} in body must be of type {schema.type}: "{kind}"'
            return [("FieldValueTypeInvalid", path, message)]
    if isinstance(value, dict):
        for key in schema.required:
            if key not in value:
                causes.append(("FieldValueRequired", f"{path}.{key}".lstrip("."), "Required value"))
        for key, sub in schema.properties.items():
            if key in value:
                causes.extend(_invalid(value[key], sub, f"{path}.{key}".lstrip(".")))
    return causes


def validate(rt: ResourceType, obj: dict[str, Any]) -> None:
    """422 ``Invalid`` unless the stored object satisfies the schema's types and required properties."""
    causes = _invalid({k: v for k, v in obj.items() if k not in _ROOT_FIELDS}, crd_schema(), "")
    if causes:
        raise st.invalid(rt, (obj.get("metadata") or {}).get("name", ""), causes)
