"""Request-plane transports of endpoints and event-plane transports of event channels."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any

from .assembly import blank, slot_setters
from .errors import ValidationError
from .validation import require, require_object, require_str


@dataclass(frozen=True, slots=True)
class Transport:
    """An endpoint's request-plane address, externally tagged in JSON: ``{"tcp": "host:port/..."}``.

    Known tags are ``nats_tcp``, ``http`` and ``tcp``; any other tag and its value are kept as
    opaque JSON so records written by newer runtimes round-trip unchanged.
    """

    kind: str
    value: Any = field(hash=False)  # opaque JSON for unknown kinds, possibly an object

    KNOWN_KINDS = ("nats_tcp", "http", "tcp")

    @classmethod
    def tcp(cls, address: str) -> Transport:
        return cls("tcp", address)

    @classmethod
    def http(cls, url: str) -> Transport:
        return cls("http", url)

    @classmethod
    def nats_tcp(cls, subject: str) -> Transport:
        return cls("nats_tcp", subject)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ValidationError("transport kind must be a non-empty string")
        if self.kind in self.KNOWN_KINDS:
            require_str(self.value, f"{self.kind} transport address")

    def to_json_value(self) -> dict[str, Any]:
        return {self.kind: self.value}

    @classmethod
    def from_json_value(cls, data: Any) -> Transport:
        if isinstance(data, dict) and len(data) == 1:
            ((kind, value),) = data.items()
            if type(kind) is str and kind and (type(value) is str or kind not in cls.KNOWN_KINDS):
                return _plain_transport(kind, value)
            return cls(kind, value)
        raise ValidationError(f"transport must be a JSON object with exactly one tag, got {data!r}")


_TRANSPORT_SLOTS = slot_setters(Transport, "kind", "value")


def _plain_transport(kind: str, value: Any) -> Transport:
    """The Transport of a tag and value its checks accept, built without them."""
    set_kind, set_value = _TRANSPORT_SLOTS
    transport = blank(Transport)
    set_kind(transport, kind)
    set_value(transport, value)
    return transport


class EventTransportKind(enum.Enum):
    """The event plane in use: ``nats`` or ``zmq``."""

    NATS = "nats"
    ZMQ = "zmq"

    @classmethod
    def from_env(cls) -> EventTransportKind:
        """Read ``DYN_EVENT_PLANE``; unset or empty means ``zmq``."""
        raw = os.environ.get("DYN_EVENT_PLANE", "").strip().lower()
        if not raw:
            return cls.ZMQ
        try:
            return cls(raw)
        except ValueError:
            raise ValidationError(
                f"DYN_EVENT_PLANE={raw!r} is not valid: use one of {', '.join(k.value for k in cls)}"
            ) from None


class EventCodecKind(enum.Enum):
    """The event payload codec: ``json`` or ``msgpack``."""

    JSON = "json"
    MSGPACK = "msgpack"

    @classmethod
    def from_env(cls, transport: EventTransportKind | None = None) -> EventCodecKind:
        """Read ``DYN_EVENT_PLANE_CODEC``; unset means the transport's default (nats: json, zmq: msgpack)."""
        raw = os.environ.get("DYN_EVENT_PLANE_CODEC", "").strip().lower()
        if not raw:
            transport = transport or EventTransportKind.from_env()
            return cls.JSON if transport is EventTransportKind.NATS else cls.MSGPACK
        try:
            return cls(raw)
        except ValueError:
            raise ValidationError(
                f"DYN_EVENT_PLANE_CODEC={raw!r} is not valid: use one of {', '.join(k.value for k in cls)}"
            ) from None


class EventTransport:
    """Base of the event-plane transports; adjacently tagged in JSON: ``{"kind", "config"}``."""

    __slots__ = ()
    tag: str = ""

    def kind(self) -> EventTransportKind:
        raise NotImplementedError

    def address(self) -> str:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.tag, "config": self.config()}

    @staticmethod
    def from_dict(data: Any) -> EventTransport:
        require_object(data, "event transport")
        tag = require(data, "kind", "EventTransport")
        config = require_object(require(data, "config", "EventTransport"), "event transport config")
        if tag == "Nats":
            return NatsTransport(require(config, "subject_prefix", "Nats config"))
        if tag == "Zmq":
            return ZmqTransport(require(config, "endpoint", "Zmq config"))
        if tag == "ZmqBroker":
            return ZmqBrokerTransport(
                require(config, "xsub_endpoints", "ZmqBroker config"),
                require(config, "xpub_endpoints", "ZmqBroker config"),
            )
        raise ValidationError(f"unknown event transport kind {tag!r}: expected Nats, Zmq or ZmqBroker")


@dataclass(frozen=True, slots=True)
class NatsTransport(EventTransport):
    subject_prefix: str
    tag = "Nats"

    def __post_init__(self) -> None:
        require_str(self.subject_prefix, "subject_prefix")

    def kind(self) -> EventTransportKind:
        return EventTransportKind.NATS

    def address(self) -> str:
        return self.subject_prefix

    def config(self) -> dict[str, Any]:
        return {"subject_prefix": self.subject_prefix}


@dataclass(frozen=True, slots=True)
class ZmqTransport(EventTransport):
    endpoint: str
    tag = "Zmq"

    def __post_init__(self) -> None:
        require_str(self.endpoint, "zmq endpoint")

    def kind(self) -> EventTransportKind:
        return EventTransportKind.ZMQ

    def address(self) -> str:
        return self.endpoint

    def config(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint}


@dataclass(frozen=True, slots=True)
class ZmqBrokerTransport(EventTransport):
    xsub_endpoints: tuple[str, ...]
    xpub_endpoints: tuple[str, ...]
    tag = "ZmqBroker"

    def __post_init__(self) -> None:
        # lists are accepted and kept as tuples, so the transport stays hashable
        object.__setattr__(self, "xsub_endpoints", _endpoint_tuple(self.xsub_endpoints, "xsub_endpoints"))
        object.__setattr__(self, "xpub_endpoints", _endpoint_tuple(self.xpub_endpoints, "xpub_endpoints"))
        if not self.xsub_endpoints:
            raise ValidationError("a ZmqBroker transport needs at least one xsub endpoint")

    def kind(self) -> EventTransportKind:
        return EventTransportKind.ZMQ

    def address(self) -> str:
        return self.xsub_endpoints[0]

    def config(self) -> dict[str, Any]:
        return {"xsub_endpoints": list(self.xsub_endpoints), "xpub_endpoints": list(self.xpub_endpoints)}


def _endpoint_tuple(value: Any, field: str) -> tuple[str, ...]:
    """A tuple or list of strings, as a tuple; a lone string is refused rather than split into characters."""
    if not isinstance(value, (tuple, list)):
        raise ValidationError(f"{field} must be a list or tuple of strings, got {type(value).__name__}")
    for endpoint in value:
        require_str(endpoint, f"each of {field}")
    return tuple(value)
