"""Discovery instances: the records workers announce, and their JSON wire format.

The JSON is the reference runtime's serde form, internally tagged by ``"type"``:
``Endpoint``, ``Model``, ``EventChannel`` and ``EventSource``. Field order on output follows
the reference; optional fields are omitted when absent. Instances are immutable; treat the
JSON objects they hold (``card_json``, ``metadata``, opaque ``device_type``) as read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

import orjson

from . import typed_cards
from .assembly import blank, slot_setters
from .errors import UnknownRecordType, ValidationError
from .identity import (
    EndpointInstanceId,
    EventChannelInstanceId,
    EventSourceInstanceId,
    ModelCardInstanceId,
    RecordKind,
)
from .jsonsafe import TOO_DEEP, problem_of, storable, to_json, too_deep
from .scope import EndpointId, EventScope
from .transports import EventTransport, Transport
from .validation import RequiredFields, plain_segments, plain_u64, require, require_object

REQUEST_PLANE_CODECS = ("json", "msgpack")

_T = TypeVar("_T")


class _Record:
    """What every kind of record offers besides its fields."""

    __slots__ = ()

    def card_as(self, cls: type[_T]) -> _T:
        """A Model's card as a ``cls`` (a dataclass, a pydantic model, a mapping type, ...): the
        reference's ``deserialize_model``; the rules are :func:`discovery_sync.typed_cards.card_as`'s.
        ValidationError when the card does not fit ``cls``, and for the other kinds of record."""
        return typed_cards.card_as(self, cls)


class _ServedOnEndpoint(_Record):
    """Records that belong to one request-plane endpoint (endpoints and model cards)."""

    __slots__ = ()
    namespace: str
    component: str
    endpoint: str

    @property
    def endpoint_id(self) -> EndpointId:
        return EndpointId(self.namespace, self.component, self.endpoint)


@dataclass(frozen=True, slots=True)
class Endpoint(_ServedOnEndpoint):
    """A request-plane endpoint served by one worker instance."""

    namespace: str
    component: str
    endpoint: str
    instance_id: int
    transport: Transport
    device_type: Any = field(default=None, hash=False)
    request_plane_codec: str | None = None

    _id: EndpointInstanceId = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.ENDPOINT

    def __post_init__(self) -> None:
        if not isinstance(self.transport, Transport):
            raise ValidationError("transport must be a Transport")
        if self.request_plane_codec is not None and self.request_plane_codec not in REQUEST_PLANE_CODECS:
            raise ValidationError(f"request_plane_codec {self.request_plane_codec!r} is not valid: use json or msgpack")
        # building the identity validates names and id; it is kept because readers ask for it often
        object.__setattr__(
            self, "_id", EndpointInstanceId(self.namespace, self.component, self.endpoint, self.instance_id)
        )

    def id(self) -> EndpointInstanceId:
        return self._id

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": "Endpoint",
            "component": self.component,
            "endpoint": self.endpoint,
            "namespace": self.namespace,
            "instance_id": self.instance_id,
            "transport": self.transport.to_json_value(),
        }
        if self.device_type is not None:
            data["device_type"] = self.device_type
        if self.request_plane_codec is not None:
            data["request_plane_codec"] = self.request_plane_codec
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Endpoint:
        namespace, component, endpoint, instance_id, transport = _ENDPOINT_FIELDS.of(data)
        plane, device_type = Transport.from_json_value(transport), data.get("device_type")
        codec = data.get("request_plane_codec")
        if (codec is None or (type(codec) is str and codec in REQUEST_PLANE_CODECS)) and _plain_ids(
            namespace, component, endpoint, instance_id
        ):
            return _plain_endpoint(namespace, component, endpoint, instance_id, plane, device_type, codec)
        return cls(namespace, component, endpoint, instance_id, plane, device_type, codec)


@dataclass(frozen=True, slots=True)
class Model(_ServedOnEndpoint):
    """A model deployment card served on an endpoint; ``card_json`` is the card itself."""

    namespace: str
    component: str
    endpoint: str
    instance_id: int
    card_json: dict[str, Any] = field(hash=False)
    model_suffix: str | None = None

    _id: ModelCardInstanceId = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.MODEL

    def __post_init__(self) -> None:
        require_object(self.card_json, "card_json")
        identity = ModelCardInstanceId(
            self.namespace, self.component, self.endpoint, self.instance_id, self.model_suffix
        )
        object.__setattr__(self, "_id", identity)

    def id(self) -> ModelCardInstanceId:
        return self._id

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": "Model",
            "namespace": self.namespace,
            "component": self.component,
            "endpoint": self.endpoint,
            "instance_id": self.instance_id,
            "card_json": self.card_json,
        }
        if self.model_suffix is not None:
            data["model_suffix"] = self.model_suffix
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Model:
        namespace, component, endpoint, instance_id, card_json = _MODEL_FIELDS.of(data)
        suffix = data.get("model_suffix")
        if suffix is None and type(card_json) is dict and _plain_ids(namespace, component, endpoint, instance_id):
            return _plain_base_card(namespace, component, endpoint, instance_id, card_json)
        return cls(namespace, component, endpoint, instance_id, card_json, suffix)


@dataclass(frozen=True, slots=True)
class EventChannel(_Record):
    """Where an instance publishes events of one topic (e.g. KV-cache events)."""

    scope: EventScope
    topic: str
    instance_id: int
    transport: EventTransport

    _id: EventChannelInstanceId = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.EVENT_CHANNEL

    def __post_init__(self) -> None:
        if not isinstance(self.scope, EventScope):
            raise ValidationError("scope must be an EventScope")
        if not isinstance(self.transport, EventTransport):
            raise ValidationError("transport must be an EventTransport (Nats, Zmq or ZmqBroker)")
        object.__setattr__(self, "_id", EventChannelInstanceId(self.scope, self.topic, self.instance_id))

    def id(self) -> EventChannelInstanceId:
        return self._id

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "EventChannel",
            "scope": self.scope.to_dict(),
            "topic": self.topic,
            "instance_id": self.instance_id,
            "transport": self.transport.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EventChannel:
        if "scope" in data:
            scope = EventScope.from_dict(data["scope"])
        else:  # legacy (v1.2) shape: namespace + component, empty component = namespace scope
            namespace = require(data, "namespace", "EventChannel")
            component = data.get("component") or None
            scope = EventScope(namespace, component)
        topic, instance_id, transport = _EVENT_CHANNEL_FIELDS.of(data)
        return cls(scope, topic, instance_id, EventTransport.from_dict(transport))


@dataclass(frozen=True, slots=True)
class EventSource(_Record):
    """A publisher of events, identified by its own ``publisher_id``; its descriptor is immutable."""

    scope: EventScope
    topic: str
    publisher_id: int
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    _id: EventSourceInstanceId = field(init=False, repr=False, compare=False, hash=False)

    kind = RecordKind.EVENT_SOURCE

    def __post_init__(self) -> None:
        if not isinstance(self.scope, EventScope):
            raise ValidationError("scope must be an EventScope")
        require_object(self.metadata, "metadata")
        object.__setattr__(self, "_id", EventSourceInstanceId(self.scope, self.topic, self.publisher_id))

    @property
    def instance_id(self) -> int:
        return self.publisher_id

    def id(self) -> EventSourceInstanceId:
        return self._id

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "EventSource",
            "scope": self.scope.to_dict(),
            "topic": self.topic,
            "publisher_id": self.publisher_id,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EventSource:
        scope, topic, publisher_id = _EVENT_SOURCE_FIELDS.of(data)
        return cls(EventScope.from_dict(scope), topic, publisher_id, _or_empty(data.get("metadata")))


DiscoveryInstance = Endpoint | Model | EventChannel | EventSource

if TYPE_CHECKING:
    # a default (PEP 696; typing_extensions is in every type checker's stubs): ``Query``,
    # ``Watch``, ``Added`` and ``Resync`` written without a parameter mean ``...[DiscoveryInstance]``
    from typing_extensions import TypeVar as _TypeVarWithDefault

    R = _TypeVarWithDefault("R", bound=DiscoveryInstance, covariant=True, default=DiscoveryInstance)
else:
    R = TypeVar("R", bound=DiscoveryInstance, covariant=True)
"""The kind of record a query selects, and so what its listings, watches and events carry:
``Query.endpoints()`` is a ``Query[Endpoint]``, whose ``list`` is a ``list[Endpoint]``."""


def _or_empty(metadata: Any) -> Any:
    """Absent or null metadata is an empty object; anything else is validated as given."""
    return {} if metadata is None else metadata


_ENDPOINT_FIELDS = RequiredFields("Endpoint", "namespace", "component", "endpoint", "instance_id", "transport")
_MODEL_FIELDS = RequiredFields("Model", "namespace", "component", "endpoint", "instance_id", "card_json")
_EVENT_CHANNEL_FIELDS = RequiredFields("EventChannel", "topic", "instance_id", "transport")
_EVENT_SOURCE_FIELDS = RequiredFields("EventSource", "scope", "topic", "publisher_id")


def _plain_ids(namespace: Any, component: Any, endpoint: Any, instance_id: Any) -> bool:
    """Whether the identity fields of an endpoint or a model card are what the identity's checks
    accept at a glance (the usual record's): the reader then builds it without them."""
    return plain_u64(instance_id) and plain_segments(namespace, component, endpoint)


_IDENTITY_FIELDS = ("namespace", "component", "endpoint", "instance_id")
_ENDPOINT_SLOTS = slot_setters(Endpoint, *_IDENTITY_FIELDS, "transport", "device_type", "request_plane_codec", "_id")
_MODEL_SLOTS = slot_setters(Model, *_IDENTITY_FIELDS, "card_json", "model_suffix", "_id")
# an endpoint's and a base card's identity alike; the cached hash is left unset (made when asked)
_ENDPOINT_ID_SLOTS = slot_setters(EndpointInstanceId, *_IDENTITY_FIELDS)
_MODEL_ID_SLOTS = slot_setters(ModelCardInstanceId, *_IDENTITY_FIELDS, "model_suffix")


def _plain_endpoint(
    namespace: str, component: str, endpoint: str, instance_id: int, transport: Transport, device_type: Any, codec: Any
) -> Endpoint:
    """The Endpoint of these values, which its checks accept (see :func:`_plain_ids`), built without them."""
    set_namespace, set_component, set_endpoint, set_instance_id = _ENDPOINT_ID_SLOTS
    identity = blank(EndpointInstanceId)
    set_namespace(identity, namespace)
    set_component(identity, component)
    set_endpoint(identity, endpoint)
    set_instance_id(identity, instance_id)
    set_namespace, set_component, set_endpoint, set_instance_id, set_transport, set_device, set_codec, set_id = (
        _ENDPOINT_SLOTS
    )
    record = blank(Endpoint)
    set_namespace(record, namespace)
    set_component(record, component)
    set_endpoint(record, endpoint)
    set_instance_id(record, instance_id)
    set_transport(record, transport)
    set_device(record, device_type)
    set_codec(record, codec)
    set_id(record, identity)
    return record


def _plain_base_card(namespace: str, component: str, endpoint: str, instance_id: int, card: dict[str, Any]) -> Model:
    """The base Model card of these values, which its checks accept (see :func:`_plain_ids`), built without them."""
    set_namespace, set_component, set_endpoint, set_instance_id, set_suffix = _MODEL_ID_SLOTS
    identity = blank(ModelCardInstanceId)
    set_namespace(identity, namespace)
    set_component(identity, component)
    set_endpoint(identity, endpoint)
    set_instance_id(identity, instance_id)
    set_suffix(identity, None)
    set_namespace, set_component, set_endpoint, set_instance_id, set_card, set_suffix, set_id = _MODEL_SLOTS
    record = blank(Model)
    set_namespace(record, namespace)
    set_component(record, component)
    set_endpoint(record, endpoint)
    set_instance_id(record, instance_id)
    set_card(record, card)
    set_suffix(record, None)
    set_id(record, identity)
    return record


_TYPES: dict[str, type[Endpoint] | type[Model] | type[EventChannel] | type[EventSource]] = {
    "Endpoint": Endpoint,
    "Model": Model,
    "EventChannel": EventChannel,
    "EventSource": EventSource,
}


def instance_from_dict(data: Any) -> DiscoveryInstance:
    """Build an instance from its parsed JSON; ValidationError when it is not a valid record
    (UnknownRecordType when its ``type`` names a kind this version does not know), or
    not JSON that ``register()`` would store: nested deeper than
    :data:`~discovery_sync.jsonsafe.MAX_DEPTH` (the test :func:`instance_from_json` runs on a
    record's bytes), or holding something orjson cannot serialise."""
    try:
        raw = orjson.dumps(data)
    except orjson.JSONEncodeError as exc:
        raise ValidationError(f"record is not storable JSON: {problem_of(data) or exc}") from None
    if too_deep(raw):
        raise ValidationError(_TOO_DEEP_TO_READ)
    return _from_parsed(data)


def instance_from_json(raw: bytes | str) -> DiscoveryInstance:
    """Parse the stored JSON of one record. ValidationError when it is not a valid record
    (UnknownRecordType, a subclass, when its ``type`` names a kind this version does not know), or
    not one ``register()`` would store: the same depth test as ``register()``'s
    (:func:`discovery_sync.jsonsafe.too_deep`), so readers skip what writers refuse. orjson's
    parse can return nothing else ``register()`` refuses (see :mod:`discovery_sync.jsonsafe`)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"record is not valid JSON: {exc}") from None
    if too_deep(raw if isinstance(raw, bytes) else raw.encode()):
        raise ValidationError(_TOO_DEEP_TO_READ)
    return _from_parsed(data)


_TOO_DEEP_TO_READ = f"record {TOO_DEEP}; its writer must nest it less deeply"


def _from_parsed(data: Any) -> DiscoveryInstance:
    """An instance of JSON already known to be storable (or parsed from a record's bytes)."""
    require_object(data, "discovery instance")
    tag = require(data, "type", "discovery instance")
    cls = _TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        message = f"unknown instance type {tag!r}: expected one of {', '.join(_TYPES)}"
        if isinstance(tag, str) and tag:  # a kind of a newer runtime: skipped quietly (decisions)
            raise UnknownRecordType(tag, message)
        raise ValidationError(message)
    return cls.from_dict(data)


@overload
def stored_form(instance: Endpoint) -> Endpoint: ...
@overload
def stored_form(instance: Model) -> Model: ...
@overload
def stored_form(instance: EventChannel) -> EventChannel: ...
@overload
def stored_form(instance: EventSource) -> EventSource: ...
def stored_form(instance: DiscoveryInstance) -> DiscoveryInstance:
    """``instance`` as every backend will return it once stored: an equal instance rebuilt from
    its JSON, sharing no mutable part with ``instance`` (a caller changing its card dict after
    ``register()`` changes neither the store nor the returned instance; tuples became lists).

    ValidationError naming the offending field (``card_json["runtime_config"]["x"]``) and what
    is allowed when its JSON is not what the reference runtime reads back unchanged (the rules
    are in :mod:`discovery_sync.jsonsafe`). Callers check before writing, so a refusal leaves
    the store unchanged, on every backend alike.
    """
    data = instance.to_dict()
    stored = storable(
        data, lambda: _subject(instance), "publisher_id" if isinstance(instance, EventSource) else "instance_id"
    )
    return _from_parsed(stored)


def instance_to_json(instance: DiscoveryInstance) -> bytes:
    """The compact stored JSON of one record.

    ValidationError naming the offending field (``card_json["x"] is 18446744073709551616, outside
    the integers JSON readers keep exact ...``), as ``register()``, when the instance holds what
    JSON cannot: an instance built by hand or through :func:`instance_from_dict` whose card was
    changed afterwards (see :func:`discovery_sync.jsonsafe.to_json`)."""
    return to_json(instance.to_dict(), lambda: _subject(instance))


def _subject(instance: DiscoveryInstance) -> str:
    """The record as an error message names it: ``model ns/c/e/2a``."""
    return f"{instance.kind.value} {instance.id().to_path()}"
