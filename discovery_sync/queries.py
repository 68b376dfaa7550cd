"""Queries: which records a ``list`` or ``list_and_watch`` call is about.

Endpoints and models are queried by scope: all, a namespace, a component or one endpoint.
Event channels and sources are queried by an optional exact scope plus an optional topic
(exact: a namespace-scoped query does not match component-scoped publishers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, cast

from .errors import ValidationError
from .identity import RecordKind
from .model import DiscoveryInstance, Endpoint, EventChannel, EventSource, Model, R
from .pathcodec import encode_segment
from .scope import EventScope
from .validation import check_name

_KIND_NAMES = {
    "endpoints": RecordKind.ENDPOINT,
    "models": RecordKind.MODEL,
    "event_channels": RecordKind.EVENT_CHANNEL,
    "event_sources": RecordKind.EVENT_SOURCE,
}


@dataclass(frozen=True, slots=True)
class Query(Generic[R]):
    """Build with :meth:`endpoints`, :meth:`models`, :meth:`event_channels` or :meth:`event_sources`.

    The parameter is the kind of record the query selects, for type checkers only:
    ``Query.endpoints()`` is a ``Query[Endpoint]``, so ``client.list(Query.endpoints())`` is a
    ``list[Endpoint]``. A query made by :meth:`from_dict` or the constructor is a
    ``Query[DiscoveryInstance]`` (``Query`` alone means that too).
    """

    kind: RecordKind
    namespace: str | None = None
    component: str | None = None
    endpoint: str | None = None
    scope: EventScope | None = None
    topic: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, RecordKind):
            raise ValidationError(f"unknown query kind {self.kind!r}: expected one of {', '.join(_KIND_NAMES)}")
        if self.kind in (RecordKind.ENDPOINT, RecordKind.MODEL):
            if self.scope is not None or self.topic is not None:
                raise ValidationError("endpoint and model queries take namespace/component/endpoint, not scope/topic")
            if self.component is not None and self.namespace is None:
                raise ValidationError("a component query needs its namespace")
            if self.endpoint is not None and self.component is None:
                raise ValidationError("an endpoint query needs its namespace and component")
            for value, label in (
                (self.namespace, "namespace"),
                (self.component, "component"),
                (self.endpoint, "endpoint"),
            ):
                if value is not None:
                    check_name(value, label, allow_slash=False)
        else:
            if (self.namespace, self.component, self.endpoint) != (None, None, None):
                raise ValidationError("event queries take scope and topic, not namespace/component/endpoint")
            if self.scope is not None and not isinstance(self.scope, EventScope):
                raise ValidationError("scope must be an EventScope")
            if self.topic is not None:
                check_name(self.topic, "topic")

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def endpoints(
        cls, namespace: str | None = None, component: str | None = None, endpoint: str | None = None
    ) -> Query[Endpoint]:
        """All endpoints, or those of a namespace, a component, or one endpoint."""
        return cast("Query[Endpoint]", cls(RecordKind.ENDPOINT, namespace, component, endpoint))

    @classmethod
    def models(
        cls, namespace: str | None = None, component: str | None = None, endpoint: str | None = None
    ) -> Query[Model]:
        """All model cards, or those of a namespace, a component, or one endpoint."""
        return cast("Query[Model]", cls(RecordKind.MODEL, namespace, component, endpoint))

    @classmethod
    def event_channels(cls, scope: EventScope | None = None, topic: str | None = None) -> Query[EventChannel]:
        return cast("Query[EventChannel]", cls(RecordKind.EVENT_CHANNEL, scope=scope, topic=topic))

    @classmethod
    def event_sources(cls, scope: EventScope | None = None, topic: str | None = None) -> Query[EventSource]:
        return cast("Query[EventSource]", cls(RecordKind.EVENT_SOURCE, scope=scope, topic=topic))

    @classmethod
    def from_dict(cls, data: Any) -> Query[DiscoveryInstance]:
        """Parse ``{"kind": "endpoints", "namespace": ...}`` (as the CLI takes it)."""
        if not isinstance(data, dict):
            raise ValidationError(f"a query must be a JSON object, got {type(data).__name__}")
        name = data.get("kind")
        kind = _KIND_NAMES.get(name) if isinstance(name, str) else None
        if kind is None:
            raise ValidationError(f"unknown query kind {name!r}: expected one of {', '.join(_KIND_NAMES)}")
        unknown = set(data) - {"kind", "namespace", "component", "endpoint", "scope", "topic"}
        if unknown:
            raise ValidationError(f"unknown query fields: {', '.join(sorted(unknown))}")
        scope = data.get("scope")
        return cls(
            kind,
            data.get("namespace"),
            data.get("component"),
            data.get("endpoint"),
            EventScope.from_dict(scope) if scope is not None else None,
            data.get("topic"),
        )

    # -- use ----------------------------------------------------------------------------------
    @property
    def kind_name(self) -> str:
        return next(name for name, kind in _KIND_NAMES.items() if kind is self.kind)

    def matches(self, instance: Any) -> bool:
        """True when ``instance`` is a record this query selects."""
        if getattr(instance, "kind", None) is not self.kind:
            return False
        if self.kind in (RecordKind.ENDPOINT, RecordKind.MODEL):
            return (
                (self.namespace is None or instance.namespace == self.namespace)
                and (self.component is None or instance.component == self.component)
                and (self.endpoint is None or instance.endpoint == self.endpoint)
            )
        return (self.scope is None or instance.scope == self.scope) and (
            self.topic is None or instance.topic == self.topic
        )

    def key_prefix(self) -> str:
        """The store-key prefix (ending at a path boundary) that holds every matching record.

        Records under the prefix may still not match (an event query by topic alone);
        filter with :meth:`matches`.
        """
        parts = [self.kind.bucket]
        if self.kind in (RecordKind.ENDPOINT, RecordKind.MODEL):
            parts += [p for p in (self.namespace, self.component, self.endpoint) if p is not None]
        elif self.scope is not None:
            parts.append(self.scope.to_path())
            parts.append("topic")
            if self.topic is not None:
                parts.append(encode_segment(self.topic))
        return "/".join(parts) + "/"

    def __str__(self) -> str:
        if self.kind in (RecordKind.ENDPOINT, RecordKind.MODEL):
            where = ".".join(p for p in (self.namespace, self.component, self.endpoint) if p is not None)
        else:
            where = " ".join(
                p
                for p in (f"scope={self.scope}" if self.scope else "", f"topic={self.topic}" if self.topic else "")
                if p
            )
        return f"{self.kind_name}({where or 'all'})"
