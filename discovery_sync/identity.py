"""Identities of stored records and their paths (``DiscoveryInstanceId.to_path/from_path``).

* endpoint: ``{ns}/{comp}/{ep}/{id:x}``
* model card: ``{ns}/{comp}/{ep}/{id:x}[/{suffix}]``
* event channel / source: ``{scope path}/topic/{topic}/{id:x}`` (segments percent-encoded)

``{id:x}`` is lowercase hex without padding. Endpoint and model segments are not encoded,
which is why their names may not be empty or contain ``/``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .errors import ValidationError
from .pathcodec import decode, encode_segment
from .scope import EventScope
from .validation import check_instance_id, check_name, check_unicode

_Id = TypeVar("_Id")


def _hashed_once(cls: type[_Id]) -> type[_Id]:
    """Give a frozen identity class the hash its dataclass computes, computed once per object: ids
    are dict keys on every idle round (the heartbeat's files, the views, the feeds), and the
    generated hash builds a tuple of every field on each call. The hash is not pickled."""
    computed: Callable[[Any], int] = cls.__hash__

    def __hash__(self: Any) -> int:
        value: int | None = getattr(self, "_hash", None)  # not raised in Python: cheap on the first call too
        if value is None:
            value = computed(self)
            object.__setattr__(self, "_hash", value)
        return value

    # pickled by its fields alone: a hash of str differs between processes
    arguments = tuple(f.name for f in fields(cls) if f.init)  # type: ignore[arg-type]

    def __reduce__(self: Any) -> tuple[type[_Id], tuple[Any, ...]]:
        return cls, tuple(getattr(self, name) for name in arguments)

    cls.__hash__ = __hash__  # type: ignore[method-assign]
    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls


class RecordKind(enum.Enum):
    """The four kinds of record, each with its own bucket (docs/design.md §3)."""

    ENDPOINT = "endpoint"
    MODEL = "model"
    EVENT_CHANNEL = "event_channel"
    EVENT_SOURCE = "event_source"

    @property
    def bucket(self) -> str:
        return _BUCKETS[self]


_BUCKETS = {
    RecordKind.ENDPOINT: "v1/instances",
    RecordKind.MODEL: "v1/mdc",
    RecordKind.EVENT_CHANNEL: "v1/event_channels",
    RecordKind.EVENT_SOURCE: "v1/event_sources",
}


def parse_hex_id(text: str, field: str = "instance id") -> int:
    """A u64 written as lowercase hex of 1 to 16 digits (as paths carry ids); ValidationError otherwise."""
    if not isinstance(text, str):
        raise ValidationError(f"{field} must be lowercase hex text, got {type(text).__name__}")
    if not text or len(text) > 16 or any(c not in "0123456789abcdef" for c in text):
        raise ValidationError(f"{field} {text!r} is not lowercase hex of at most 16 digits")
    return int(text, 16)


@_hashed_once
@dataclass(frozen=True, slots=True)
class EndpointInstanceId:
    namespace: str
    component: str
    endpoint: str
    instance_id: int

    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.ENDPOINT

    def __post_init__(self) -> None:
        _check_endpoint_names(self.namespace, self.component, self.endpoint)
        check_instance_id(self.instance_id)

    def to_path(self) -> str:
        return f"{self.namespace}/{self.component}/{self.endpoint}/{self.instance_id:x}"


@_hashed_once
@dataclass(frozen=True, slots=True)
class ModelCardInstanceId:
    namespace: str
    component: str
    endpoint: str
    instance_id: int
    model_suffix: str | None = None

    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.MODEL

    def __post_init__(self) -> None:
        _check_endpoint_names(self.namespace, self.component, self.endpoint)
        check_instance_id(self.instance_id)
        if self.model_suffix is not None and not isinstance(self.model_suffix, str):
            raise ValidationError(f"model_suffix must be a string or None, got {type(self.model_suffix).__name__}")
        if self.model_suffix:
            check_unicode(self.model_suffix, "model_suffix")
        if self.model_suffix == "":  # the path omits an empty suffix, so the identity does too
            object.__setattr__(self, "model_suffix", None)

    def to_path(self) -> str:
        path = f"{self.namespace}/{self.component}/{self.endpoint}/{self.instance_id:x}"
        return f"{path}/{self.model_suffix}" if self.model_suffix else path

    @property
    def is_base(self) -> bool:
        """True for the instance's base model card (no suffix)."""
        return not self.model_suffix


@_hashed_once
@dataclass(frozen=True, slots=True)
class EventChannelInstanceId:
    scope: EventScope
    topic: str
    instance_id: int

    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.EVENT_CHANNEL

    def __post_init__(self) -> None:
        _check_scope(self.scope)
        check_name(self.topic, "topic")
        check_instance_id(self.instance_id)

    def to_path(self) -> str:
        return f"{self.scope.to_path()}/topic/{encode_segment(self.topic)}/{self.instance_id:x}"


@_hashed_once
@dataclass(frozen=True, slots=True)
class EventSourceInstanceId:
    scope: EventScope
    topic: str
    publisher_id: int

    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.EVENT_SOURCE

    def __post_init__(self) -> None:
        _check_scope(self.scope)
        check_name(self.topic, "topic")
        check_instance_id(self.publisher_id, "publisher_id")

    def to_path(self) -> str:
        return f"{self.scope.to_path()}/topic/{encode_segment(self.topic)}/{self.publisher_id:x}"


DiscoveryInstanceId = EndpointInstanceId | ModelCardInstanceId | EventChannelInstanceId | EventSourceInstanceId


def _check_endpoint_names(namespace: str, component: str, endpoint: str) -> None:
    check_name(namespace, "namespace", allow_slash=False)
    check_name(component, "component", allow_slash=False)
    check_name(endpoint, "endpoint", allow_slash=False)


def _check_scope(scope: object) -> None:
    if not isinstance(scope, EventScope):
        raise ValidationError(f"scope must be an EventScope, got {type(scope).__name__}")


def id_from_path(kind: RecordKind, path: str) -> DiscoveryInstanceId:
    """Parse an identity path of the given kind.

    ValidationError when ``kind`` is not a RecordKind, ``path`` is not a non-empty string, or
    the path is malformed for its kind (wrong segments, bad names or percent escapes, an id
    that is not lowercase hex of at most 16 digits).
    """
    if not isinstance(kind, RecordKind):
        raise ValidationError(f"kind must be a RecordKind (e.g. RecordKind.ENDPOINT), got {type(kind).__name__}")
    if not isinstance(path, str) or not path:
        raise ValidationError(f"{kind.value} path must be a non-empty string, got {_describe_path(path)}")
    if kind is RecordKind.ENDPOINT:
        parts = path.split("/")
        if len(parts) != 4:
            raise ValidationError(f"endpoint path {path!r} must be namespace/component/endpoint/id")
        return EndpointInstanceId(parts[0], parts[1], parts[2], parse_hex_id(parts[3]))
    if kind is RecordKind.MODEL:
        parts = path.split("/", 4)
        if len(parts) < 4:
            raise ValidationError(f"model path {path!r} must be namespace/component/endpoint/id[/suffix]")
        suffix = parts[4] if len(parts) == 5 else None
        return ModelCardInstanceId(parts[0], parts[1], parts[2], parse_hex_id(parts[3]), suffix or None)
    scope, rest = EventScope.from_path_parts(path.split("/"))
    if len(rest) != 3 or rest[0] != "topic":
        raise ValidationError(f"event path {path!r} must end with topic/{{topic}}/{{id}}")
    topic, number = decode(rest[1]), parse_hex_id(rest[2])
    if kind is RecordKind.EVENT_CHANNEL:
        return EventChannelInstanceId(scope, topic, number)
    return EventSourceInstanceId(scope, topic, number)


def id_from_key(key: str) -> DiscoveryInstanceId:
    """Parse a store key, ``{bucket}/{identity path}`` (``v1/instances/ns/backend/generate/2a``;
    the buckets are the :class:`RecordKind` ``bucket`` values). ValidationError for anything else."""
    if not isinstance(key, str) or not key:
        raise ValidationError(f"a store key must be a non-empty string, got {_describe_path(key)}")
    for kind in RecordKind:
        if key.startswith(kind.bucket + "/"):
            return id_from_path(kind, key[len(kind.bucket) + 1 :])
    buckets = ", ".join(f"{kind.bucket}/" for kind in RecordKind)
    raise ValidationError(f"store key {key!r} must start with one of {buckets}")


def _describe_path(path: object) -> str:
    return "an empty string" if path == "" else type(path).__name__
