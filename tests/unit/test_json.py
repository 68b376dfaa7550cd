"""The stored JSON of every instance variant (docs/design.md §2): orjson round trips and bad input."""

import orjson
import pytest

import discovery_sync as ds
from discovery_sync import (
    Endpoint,
    EventChannel,
    Model,
    NatsTransport,
    Transport,
    ValidationError,
    ZmqBrokerTransport,
    ZmqTransport,
    instance_from_json,
    instance_to_json,
)
from tests.unit.helpers import SCOPES, card, endpoint, event_channel, event_source, json_round_trip, model

REFERENCE_ENDPOINT = (
    b'{"type":"Endpoint","component":"backend","endpoint":"generate","namespace":"pyns",'
    b'"instance_id":10173651931486282114,'
    b'"transport":{"tcp":"127.0.0.1:34553/8d30128784b4e182/pyns/backend/generate"},'
    b'"device_type":"cuda","request_plane_codec":"msgpack"}'
)


def endpoint_dict(**fields):
    """A minimal Endpoint record as a dict, in the reference's field order."""
    data = {
        "type": "Endpoint",
        "component": "comp",
        "endpoint": "ep",
        "namespace": "ns",
        "instance_id": 42,
        "transport": {"tcp": "127.0.0.1:9000"},
    }
    return {**data, **fields}


def assert_round_trips(instance):
    parsed = json_round_trip(instance)
    assert parsed == instance
    assert parsed.to_dict() == instance.to_dict()
    assert instance_to_json(parsed) == instance_to_json(instance)


def assert_bytes_round_trip(raw: bytes):
    """Parsing ``raw`` and serialising again gives exactly ``raw``."""
    assert instance_to_json(instance_from_json(raw)) == raw


# -- Endpoint ---------------------------------------------------------------------------------------
def test_reference_bytes_parse_and_reserialise_identically():
    parsed = instance_from_json(REFERENCE_ENDPOINT)
    assert isinstance(parsed, Endpoint)
    assert parsed.instance_id == 10173651931486282114
    assert parsed.transport == Transport.tcp("127.0.0.1:34553/8d30128784b4e182/pyns/backend/generate")
    assert (parsed.device_type, parsed.request_plane_codec) == ("cuda", "msgpack")
    assert instance_to_json(parsed) == REFERENCE_ENDPOINT


def test_reference_bytes_parse_from_str_too():
    assert instance_to_json(instance_from_json(REFERENCE_ENDPOINT.decode())) == REFERENCE_ENDPOINT


@pytest.mark.parametrize(
    "transport",
    [Transport.nats_tcp("ns.comp.ep-2a"), Transport.http("http://127.0.0.1:8000/v1"), Transport.tcp("127.0.0.1:9000")],
    ids=lambda t: t.kind,
)
def test_endpoint_transports(transport):
    instance = endpoint(transport=transport)
    assert orjson.loads(instance_to_json(instance))["transport"] == {transport.kind: transport.value}
    assert_round_trips(instance)


def test_unknown_transport_tag_with_object_value_is_preserved_exactly():
    value = {"host": "h", "ports": [1, 2], "nested": {"x": None, "f": 1.5, "s": "é"}}
    raw = orjson.dumps(endpoint_dict(transport={"quic_v9": value}))
    parsed = instance_from_json(raw)
    assert parsed.transport == Transport("quic_v9", value)
    assert_bytes_round_trip(raw)


@pytest.mark.parametrize("device_type", ["cuda", {"kind": "gpu", "index": [0, 1], "extra": None}, 7])
def test_device_type_is_opaque(device_type):
    raw = orjson.dumps(endpoint_dict(device_type=device_type))
    assert instance_from_json(raw).device_type == device_type
    assert_bytes_round_trip(raw)


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_request_plane_codec(codec):
    raw = orjson.dumps(endpoint_dict(request_plane_codec=codec))
    assert instance_from_json(raw).request_plane_codec == codec
    assert_bytes_round_trip(raw)


def test_legacy_endpoint_without_codec_stays_without_it():
    raw = orjson.dumps(endpoint_dict())
    parsed = instance_from_json(raw)
    assert parsed.request_plane_codec is None
    assert parsed.device_type is None
    assert "request_plane_codec" not in parsed.to_dict()
    assert "device_type" not in parsed.to_dict()
    assert_bytes_round_trip(raw)


# -- Model ------------------------------------------------------------------------------------------
def test_model_with_card_and_suffix():
    card_json = card(taints=["b", "a"], runtime_config={"max_tokens": 8}, source_path="/m", lora={"rank": 8})
    instance = model(card_json=card_json, suffix="my-lora")
    assert instance.to_dict() == {
        "type": "Model",
        "namespace": "ns",
        "component": "comp",
        "endpoint": "ep",
        "instance_id": 0x2A,
        "card_json": card_json,
        "model_suffix": "my-lora",
    }
    fields = ["type", "namespace", "component", "endpoint", "instance_id", "card_json", "model_suffix"]
    assert list(instance.to_dict()) == fields
    assert_round_trips(instance)


def test_model_without_suffix_omits_it():
    instance = model()
    assert "model_suffix" not in instance.to_dict()
    assert_round_trips(instance)


def test_model_null_suffix_is_accepted_and_omitted_on_write():
    data = model().to_dict() | {"model_suffix": None}
    parsed = instance_from_json(orjson.dumps(data))
    assert isinstance(parsed, Model)
    assert parsed.model_suffix is None
    assert b"model_suffix" not in instance_to_json(parsed)


# -- EventChannel / EventSource -------------------------------------------------------------------
EVENT_TRANSPORTS = [
    (NatsTransport("namespace.ns"), {"kind": "Nats", "config": {"subject_prefix": "namespace.ns"}}),
    (ZmqTransport("tcp://127.0.0.1:5557"), {"kind": "Zmq", "config": {"endpoint": "tcp://127.0.0.1:5557"}}),
    (
        ZmqBrokerTransport(("tcp://a:1", "tcp://b:1"), ("tcp://a:2",)),
        {
            "kind": "ZmqBroker",
            "config": {"xsub_endpoints": ["tcp://a:1", "tcp://b:1"], "xpub_endpoints": ["tcp://a:2"]},
        },
    ),
]
SCOPE_JSON = [
    {"kind": "namespace", "name": "ns"},
    {"kind": "component", "namespace": "ns", "component": "comp"},
    {"kind": "endpoint", "endpoint": {"namespace": "ns", "component": "comp", "name": "ep"}},
]
SCOPE_CASES = [pytest.param(scope, data, id=scope.kind) for scope, data in zip(SCOPES, SCOPE_JSON, strict=True)]
TRANSPORT_CASES = [pytest.param(transport, data, id=transport.tag) for transport, data in EVENT_TRANSPORTS]


@pytest.mark.parametrize(("scope", "scope_json"), SCOPE_CASES)
@pytest.mark.parametrize(("transport", "transport_json"), TRANSPORT_CASES)
def test_event_channel(scope, scope_json, transport, transport_json):
    instance = event_channel(scope=scope, transport=transport)
    assert instance.to_dict() == {
        "type": "EventChannel",
        "scope": scope_json,
        "topic": "kv-events",
        "instance_id": 0x2A,
        "transport": transport_json,
    }
    assert list(instance.to_dict()) == ["type", "scope", "topic", "instance_id", "transport"]
    assert_round_trips(instance)


@pytest.mark.parametrize(("scope", "scope_json"), SCOPE_CASES)
def test_event_source_with_metadata(scope, scope_json):
    metadata = {"worker": "w0", "ranks": [0, 1], "nested": {"ok": True, "none": None}}
    instance = event_source(scope=scope, metadata=metadata, topic="kv.events/é")
    assert instance.to_dict() == {
        "type": "EventSource",
        "scope": scope_json,
        "topic": "kv.events/é",
        "publisher_id": 0x2A,
        "metadata": metadata,
    }
    assert_round_trips(instance)


# -- ids at the u64 bounds ------------------------------------------------------------------------
@pytest.mark.parametrize("number", [0, 2**64 - 1])
@pytest.mark.parametrize("build", [endpoint, model, event_channel, event_source], ids=lambda b: b.__name__)
def test_ids_at_the_u64_bounds(build, number):
    instance = build(number)
    assert str(number).encode() in instance_to_json(instance)
    assert json_round_trip(instance).id() == instance.id()
    assert_round_trips(instance)


# -- bad input ----------------------------------------------------------------------------------------
def without(data, key):
    return {k: v for k, v in data.items() if k != key}


def channel_dict(transport):
    return event_channel().to_dict() | {"transport": transport}


BAD_RECORDS = {
    "not-json": b"not json",
    "empty": b"",
    "not-utf8": b"\xff",
    "array": b"[1, 2]",
    "null": b"null",
    "string": b'"Endpoint"',
    "unknown-type": {"type": "Service"},
    "type-not-string": endpoint_dict(type=5),
    "no-type": without(endpoint_dict(), "type"),
    **{f"endpoint-missing-{key}": without(endpoint_dict(), key) for key in list(endpoint_dict())[1:]},
    **{f"model-missing-{key}": without(model().to_dict(), key) for key in list(model().to_dict())[1:]},
    **{f"channel-missing-{key}": without(event_channel().to_dict(), key) for key in ("topic", "instance_id")},
    "channel-missing-transport": without(event_channel().to_dict(), "transport"),
    "source-missing-scope": without(event_source().to_dict(), "scope"),
    "source-missing-publisher_id": without(event_source().to_dict(), "publisher_id"),
    "card-json-array": model().to_dict() | {"card_json": []},
    "card-json-string": model().to_dict() | {"card_json": "{}"},
    "card-json-null": model().to_dict() | {"card_json": None},
    "suffix-not-string": model().to_dict() | {"model_suffix": 5},
    "unknown-codec": endpoint_dict(request_plane_codec="protobuf"),
    "codec-not-string": endpoint_dict(request_plane_codec=["json"]),
    "transport-two-tags": endpoint_dict(transport={"tcp": "a:1", "http": "http://a"}),
    "transport-no-tag": endpoint_dict(transport={}),
    "transport-string": endpoint_dict(transport="tcp"),
    "transport-tcp-not-string": endpoint_dict(transport={"tcp": 9000}),
    "id-string": endpoint_dict(instance_id="42"),
    "id-negative": endpoint_dict(instance_id=-1),
    "id-float": endpoint_dict(instance_id=4.2),
    "id-bool": endpoint_dict(instance_id=True),
    "id-too-big": b'{"type":"Endpoint","component":"c","endpoint":"e","namespace":"n",'
    b'"instance_id":18446744073709551616,"transport":{"tcp":"a:1"}}',
    "namespace-with-slash": endpoint_dict(namespace="a/b"),
    "namespace-empty": endpoint_dict(namespace=""),
    "namespace-not-string": endpoint_dict(namespace=1),
    "scope-unknown-kind": event_channel().to_dict() | {"scope": {"kind": "galaxy", "name": "ns"}},
    "scope-not-object": event_channel().to_dict() | {"scope": "ns"},
    "scope-missing-name": event_channel().to_dict() | {"scope": {"kind": "namespace"}},
    "event-transport-unknown-kind": channel_dict({"kind": "Kafka", "config": {}}),
    "event-transport-no-config": channel_dict({"kind": "Nats"}),
    "nats-missing-prefix": channel_dict({"kind": "Nats", "config": {}}),
    "zmq-endpoint-not-string": channel_dict({"kind": "Zmq", "config": {"endpoint": 5}}),
    "broker-no-xsub": channel_dict({"kind": "ZmqBroker", "config": {"xsub_endpoints": [], "xpub_endpoints": []}}),
    "broker-xsub-int": channel_dict({"kind": "ZmqBroker", "config": {"xsub_endpoints": 5, "xpub_endpoints": []}}),
    "broker-xsub-null": channel_dict({"kind": "ZmqBroker", "config": {"xsub_endpoints": None, "xpub_endpoints": []}}),
    "broker-xsub-string": channel_dict(
        {"kind": "ZmqBroker", "config": {"xsub_endpoints": "tcp://a:1", "xpub_endpoints": []}}
    ),
    "metadata-string": event_source().to_dict() | {"metadata": "x"},
}


@pytest.mark.parametrize("record", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_bad_records_raise_validation_error(record):
    raw = record if isinstance(record, bytes) else orjson.dumps(record)
    with pytest.raises(ValidationError):
        instance_from_json(raw)


def test_legacy_event_channel_shape_is_rewritten_with_a_scope():
    legacy = {"type": "EventChannel", "namespace": "ns", "component": "comp", "topic": "t", "instance_id": 1}
    legacy["transport"] = EVENT_TRANSPORTS[0][1]
    parsed = instance_from_json(orjson.dumps(legacy))
    assert isinstance(parsed, EventChannel)
    assert parsed.to_dict()["scope"] == SCOPE_JSON[1]
    assert "namespace" not in parsed.to_dict()


def test_event_source_metadata_must_be_an_object_when_present():
    base = {"type": "EventSource", "scope": {"kind": "namespace", "name": "ns"}, "topic": "t", "publisher_id": 1}
    assert ds.instance_from_dict(base).metadata == {}
    assert ds.instance_from_dict({**base, "metadata": None}).metadata == {}
    for bad in ([], 0, "x"):
        with pytest.raises(ds.ValidationError, match="metadata"):
            ds.instance_from_dict({**base, "metadata": bad})


def test_endpoints_with_object_valued_unknown_transports_are_hashable():
    endpoint = ds.instance_from_dict(
        {
            "type": "Endpoint",
            "namespace": "n",
            "component": "c",
            "endpoint": "e",
            "instance_id": 1,
            "transport": {"quic": {"host": "127.0.0.1", "port": 1}},
        }
    )
    assert endpoint in {endpoint}
