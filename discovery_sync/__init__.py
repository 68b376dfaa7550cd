"""discovery-sync: a blocking, thread-safe client of the dynamo discovery plane.

import discovery_sync as ds

with ds.connect("file:///tmp/store") as client:
    client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:9000")))
    with client.list_and_watch(ds.Query.endpoints("ns")) as watch:
        for event in watch:
            ...
"""

from .cohort import Replacement
from .connect import connect, default_url
from .connection import ConnectionState, StateChange
from .discovery import CollectedGarbage, Discovery
from .endpoint_leases import EndpointLease
from .errors import (
    BackendUnavailable,
    ClientClosed,
    ConflictError,
    DiscoveryError,
    InstanceReplaced,
    LockTimeout,
    NotFoundError,
    ValidationError,
    WatchClosed,
    WatchFailed,
)
from .events import Added, DiscoveryEvent, ModelTaintsUpdated, Removed, Resync, WatchEvent
from .failover import FailoverLock
from .identity import (
    DiscoveryInstanceId,
    EndpointInstanceId,
    EventChannelInstanceId,
    EventSourceInstanceId,
    ModelCardInstanceId,
    RecordKind,
    id_from_key,
    id_from_path,
)
from .live_view import LiveView
from .lora import lora_suffix
from .metrics import Metrics
from .model import (
    DiscoveryInstance,
    Endpoint,
    EventChannel,
    EventSource,
    Model,
    instance_from_dict,
    instance_from_json,
    instance_to_json,
)
from .queries import Query
from .scope import EndpointId, EventScope
from .specs import EndpointSpec, EventChannelSpec, EventSourceSpec, ModelSpec, spec_from_dict
from .taints import TOPOLOGY_TAINT_PREFIX
from .transports import (
    EventCodecKind,
    EventTransport,
    EventTransportKind,
    NatsTransport,
    Transport,
    ZmqBrokerTransport,
    ZmqTransport,
)
from .typed_cards import card_as, card_json_of
from .watch import Watch, WatchTimeout

__version__ = "0.1.0"

__all__ = [
    "Added",
    "BackendUnavailable",
    "ClientClosed",
    "CollectedGarbage",
    "ConflictError",
    "ConnectionState",
    "Discovery",
    "DiscoveryError",
    "FailoverLock",
    "InstanceReplaced",
    "DiscoveryEvent",
    "DiscoveryInstance",
    "DiscoveryInstanceId",
    "Endpoint",
    "EndpointId",
    "EndpointInstanceId",
    "EndpointLease",
    "LiveView",
    "EndpointSpec",
    "EventChannel",
    "EventChannelInstanceId",
    "EventChannelSpec",
    "EventCodecKind",
    "EventScope",
    "EventSource",
    "EventSourceInstanceId",
    "EventSourceSpec",
    "EventTransport",
    "EventTransportKind",
    "LockTimeout",
    "Metrics",
    "Model",
    "ModelCardInstanceId",
    "ModelSpec",
    "ModelTaintsUpdated",
    "NatsTransport",
    "NotFoundError",
    "Query",
    "RecordKind",
    "Removed",
    "Replacement",
    "Resync",
    "StateChange",
    "TOPOLOGY_TAINT_PREFIX",
    "Transport",
    "ValidationError",
    "Watch",
    "WatchClosed",
    "WatchEvent",
    "WatchFailed",
    "WatchTimeout",
    "ZmqBrokerTransport",
    "ZmqTransport",
    "card_as",
    "card_json_of",
    "connect",
    "default_url",
    "id_from_key",
    "id_from_path",
    "instance_from_dict",
    "instance_from_json",
    "instance_to_json",
    "lora_suffix",
    "spec_from_dict",
]
