"""What a client registers: specs become instances once the client's id is filled in.

Endpoint and model specs take the registering client's ``instance_id``; event channels take
it too; event sources carry their own ``publisher_id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ValidationError
from .lora import check_model_suffix
from .model import DiscoveryInstance, Endpoint, EventChannel, EventSource, Model
from .scope import EventScope
from .transports import EventTransport, Transport
from .typed_cards import card_json_of
from .validation import require, require_object


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    namespace: str
    component: str
    endpoint: str
    transport: Transport
    device_type: Any = field(default=None, hash=False)
    request_plane_codec: str | None = None

    def to_instance(self, instance_id: int) -> Endpoint:
        return Endpoint(
            self.namespace,
            self.component,
            self.endpoint,
            instance_id,
            self.transport,
            self.device_type,
            self.request_plane_codec,
        )


@dataclass(frozen=True, slots=True)
class ModelSpec:
    namespace: str
    component: str
    endpoint: str
    card_json: dict[str, Any] = field(hash=False)
    model_suffix: str | None = None

    @classmethod
    def from_card(
        cls, namespace: str, component: str, endpoint: str, card: Any, model_suffix: str | None = None
    ) -> ModelSpec:
        """A spec whose ``card_json`` is ``card`` (a mapping, a dataclass or a pydantic model) as JSON,
        per :func:`~discovery_sync.typed_cards.card_json_of`: the reference's ``DiscoverySpec::from_model``
        (``from_model_with_suffix`` with ``model_suffix``). ValidationError for another kind of card;
        values that are not storable JSON are refused by ``register()``, as for any spec."""
        return cls(namespace, component, endpoint, card_json_of(card), model_suffix)

    def to_instance(self, instance_id: int) -> Model:
        """The record ``register()`` writes. ValidationError for a suffix the reference cannot key
        (:func:`~discovery_sync.lora.check_model_suffix`): checked here, on the way to a store
        only, as a stored card with any suffix stays readable (the reference reads it)."""
        suffix = check_model_suffix(self.model_suffix)
        return Model(self.namespace, self.component, self.endpoint, instance_id, self.card_json, suffix)


@dataclass(frozen=True, slots=True)
class EventChannelSpec:
    scope: EventScope
    topic: str
    transport: EventTransport

    def to_instance(self, instance_id: int) -> EventChannel:
        return EventChannel(self.scope, self.topic, instance_id, self.transport)


@dataclass(frozen=True, slots=True)
class EventSourceSpec:
    scope: EventScope
    topic: str
    publisher_id: int
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_instance(self, instance_id: int) -> EventSource:
        return EventSource(self.scope, self.topic, self.publisher_id, self.metadata)


DiscoverySpec = EndpointSpec | ModelSpec | EventChannelSpec | EventSourceSpec


def spec_from_dict(data: Any) -> DiscoverySpec:
    """Parse a spec written like an instance without ``instance_id`` (the CLI's ``register`` input);
    ValidationError when it is not a valid record, or has a model suffix ``register()`` refuses."""
    from .model import instance_from_dict

    require_object(data, "spec")
    tag = require(data, "type", "spec")
    placeholder = dict(data)
    if tag in ("Endpoint", "Model", "EventChannel"):
        if "instance_id" in placeholder:
            raise ValidationError("a spec must not carry instance_id: the client fills in its own")
        placeholder["instance_id"] = 0
    spec = spec_of(instance_from_dict(placeholder))
    if isinstance(spec, ModelSpec):
        check_model_suffix(spec.model_suffix)
    return spec


def spec_of(instance: DiscoveryInstance) -> DiscoverySpec:
    """The spec an instance was made from."""
    if isinstance(instance, Endpoint):
        return EndpointSpec(
            instance.namespace,
            instance.component,
            instance.endpoint,
            instance.transport,
            instance.device_type,
            instance.request_plane_codec,
        )
    if isinstance(instance, Model):
        return ModelSpec(
            instance.namespace, instance.component, instance.endpoint, instance.card_json, instance.model_suffix
        )
    if isinstance(instance, EventChannel):
        return EventChannelSpec(instance.scope, instance.topic, instance.transport)
    if isinstance(instance, EventSource):
        return EventSourceSpec(instance.scope, instance.topic, instance.publisher_id, instance.metadata)
    raise ValidationError(f"expected a discovery instance, got {type(instance).__name__}")
