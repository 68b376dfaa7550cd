"""Endpoint ids and event scopes (where an event channel or source publishes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ValidationError
from .pathcodec import decode, encode_segment
from .validation import check_name, require, require_object


@dataclass(frozen=True, slots=True)
class EndpointId:
    """``namespace.component.name`` of a request-plane endpoint."""

    namespace: str
    component: str
    name: str

    def __post_init__(self) -> None:
        check_name(self.namespace, "namespace", allow_slash=False)
        check_name(self.component, "component", allow_slash=False)
        check_name(self.name, "endpoint", allow_slash=False)

    @classmethod
    def parse(cls, dotted: str) -> EndpointId:
        """Parse ``"ns.comp.ep"`` (the reference runtime's notation)."""
        parts = dotted.split(".") if isinstance(dotted, str) else []
        if len(parts) != 3:
            raise ValidationError(f"endpoint {dotted!r} must look like 'namespace.component.endpoint'")
        return cls(*parts)

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "component": self.component, "name": self.name}

    @classmethod
    def from_dict(cls, data: Any) -> EndpointId:
        require_object(data, "endpoint id")
        return cls(
            require(data, "namespace", "EndpointId"),
            require(data, "component", "EndpointId"),
            require(data, "name", "EndpointId"),
        )

    def __str__(self) -> str:
        return f"{self.namespace}.{self.component}.{self.name}"


@dataclass(frozen=True, slots=True)
class EventScope:
    """A namespace, a component of it, or one endpoint of a component.

    Build one with :meth:`for_namespace`, :meth:`for_component` or :meth:`for_endpoint`.
    Scopes are exact: a namespace query does not match component-scoped publishers.
    """

    namespace: str
    component: str | None = None
    endpoint: str | None = None

    def __post_init__(self) -> None:
        check_name(self.namespace, "scope namespace")
        if self.component is not None:
            check_name(self.component, "scope component")
        if self.endpoint is not None:
            if self.component is None:
                raise ValidationError("an endpoint scope needs a component")
            check_name(self.endpoint, "scope endpoint")

    @classmethod
    def for_namespace(cls, namespace: str) -> EventScope:
        return cls(namespace)

    @classmethod
    def for_component(cls, namespace: str, component: str) -> EventScope:
        return cls(namespace, component)

    @classmethod
    def for_endpoint(cls, endpoint: EndpointId) -> EventScope:
        return cls(endpoint.namespace, endpoint.component, endpoint.name)

    @property
    def kind(self) -> str:
        """``namespace``, ``component`` or ``endpoint``."""
        if self.endpoint is not None:
            return "endpoint"
        return "component" if self.component is not None else "namespace"

    def to_dict(self) -> dict[str, Any]:
        if self.endpoint is not None:
            endpoint = {"namespace": self.namespace, "component": self.component, "name": self.endpoint}
            return {"kind": "endpoint", "endpoint": endpoint}
        if self.component is not None:
            return {"kind": "component", "namespace": self.namespace, "component": self.component}
        return {"kind": "namespace", "name": self.namespace}

    @classmethod
    def from_dict(cls, data: Any) -> EventScope:
        require_object(data, "event scope")
        kind = require(data, "kind", "EventScope")
        if kind == "namespace":
            return cls(require(data, "name", "namespace scope"))
        if kind == "component":
            return cls(require(data, "namespace", "component scope"), require(data, "component", "component scope"))
        if kind == "endpoint":
            # read as the constructor checks scope names (a '/' is fine: scope paths are
            # percent-encoded), not as an EndpointId, which refuses '/' for unencoded endpoint keys
            endpoint = require_object(require(data, "endpoint", "endpoint scope"), "endpoint scope endpoint")
            return cls(
                require(endpoint, "namespace", "endpoint scope"),
                require(endpoint, "component", "endpoint scope"),
                require(endpoint, "name", "endpoint scope"),
            )
        raise ValidationError(f"unknown event scope kind {kind!r}: expected namespace, component or endpoint")

    def to_path(self) -> str:
        """``namespace/{ns}[/component/{c}[/endpoint/{e}]]`` with percent-encoded segments."""
        path = f"namespace/{encode_segment(self.namespace)}"
        if self.component is not None:
            path += f"/component/{encode_segment(self.component)}"
        if self.endpoint is not None:
            path += f"/endpoint/{encode_segment(self.endpoint)}"
        return path

    @classmethod
    def from_path_parts(cls, parts: list[str]) -> tuple[EventScope, list[str]]:
        """Parse the scope at the start of ``parts``; return it and the parts that follow."""

        def take(label: str, index: int) -> str:
            if len(parts) <= index + 1 or parts[index] != label:
                raise ValidationError(f"event path {'/'.join(parts)!r} lacks a {label!r} segment")
            return decode(parts[index + 1])

        namespace = take("namespace", 0)
        rest = parts[2:]
        component = endpoint = None
        if rest and rest[0] == "component":
            component = take("component", 2)
            rest = parts[4:]
            if rest and rest[0] == "endpoint":
                endpoint = take("endpoint", 4)
                rest = parts[6:]
        return cls(namespace, component, endpoint), rest

    def __str__(self) -> str:
        return ".".join(p for p in (self.namespace, self.component, self.endpoint) if p is not None)
