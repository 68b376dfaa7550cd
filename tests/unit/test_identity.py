"""Identity paths of the four record kinds (docs/design.md §2 "Identity paths")."""

import pytest

import discovery_sync as ds
from discovery_sync import (
    EndpointInstanceId,
    EventChannelInstanceId,
    EventScope,
    EventSourceInstanceId,
    ModelCardInstanceId,
    RecordKind,
    ValidationError,
    id_from_path,
)
from tests.unit.helpers import COMPONENT_SCOPE, ENDPOINT_SCOPE, NAMESPACE_SCOPE

ROUND_TRIPS = [
    pytest.param(EndpointInstanceId("ns", "comp", "ep", 0x2A), "ns/comp/ep/2a", id="endpoint"),
    pytest.param(ModelCardInstanceId("ns", "comp", "ep", 0x2A), "ns/comp/ep/2a", id="model-base"),
    pytest.param(ModelCardInstanceId("ns", "comp", "ep", 0x2A, "lora-a"), "ns/comp/ep/2a/lora-a", id="model-suffix"),
    pytest.param(
        EventChannelInstanceId(NAMESPACE_SCOPE, "kv-events", 0x2A), "namespace/ns/topic/kv-events/2a", id="ch-namespace"
    ),
    pytest.param(
        EventChannelInstanceId(COMPONENT_SCOPE, "kv-events", 0x2A),
        "namespace/ns/component/comp/topic/kv-events/2a",
        id="ch-component",
    ),
    pytest.param(
        EventChannelInstanceId(ENDPOINT_SCOPE, "kv-events", 0x2A),
        "namespace/ns/component/comp/endpoint/ep/topic/kv-events/2a",
        id="ch-endpoint",
    ),
    pytest.param(
        EventSourceInstanceId(NAMESPACE_SCOPE, "kv_metrics", 0xFF),
        "namespace/ns/topic/kv_metrics/ff",
        id="src-namespace",
    ),
    pytest.param(
        EventSourceInstanceId(COMPONENT_SCOPE, "a/b.c*d>e%f g", 0x2A),
        "namespace/ns/component/comp/topic/a%2Fb%2Ec%2Ad%3Ee%25f%20g/2a",
        id="src-reserved-topic",
    ),
    pytest.param(
        EventSourceInstanceId(EventScope("my ns", "c.o/mp", "é"), "日本", 1),
        "namespace/my%20ns/component/c%2Eo%2Fmp/endpoint/%C3%A9/topic/%E6%97%A5%E6%9C%AC/1",
        id="src-reserved-scope",
    ),
    pytest.param(
        EventSourceInstanceId(ENDPOINT_SCOPE, "topic", 0x2A),
        "namespace/ns/component/comp/endpoint/ep/topic/topic/2a",
        id="src-topic-named-topic",
    ),
]


@pytest.mark.parametrize(("identity", "path"), ROUND_TRIPS)
def test_to_path(identity, path):
    assert identity.to_path() == path


@pytest.mark.parametrize(("identity", "path"), ROUND_TRIPS)
def test_from_path(identity, path):
    assert id_from_path(identity.kind, path) == identity


def test_model_without_suffix_has_no_suffix():
    parsed = id_from_path(RecordKind.MODEL, "ns/comp/ep/2a")
    assert parsed.model_suffix is None
    assert parsed.is_base


def test_empty_model_suffix_gives_the_base_path():
    identity = ModelCardInstanceId("ns", "comp", "ep", 0x2A, "")
    assert identity.to_path() == "ns/comp/ep/2a"
    assert identity.is_base


def test_trailing_slash_means_no_suffix():
    assert id_from_path(RecordKind.MODEL, "ns/comp/ep/2a/").model_suffix is None


def test_empty_model_suffix_identity_round_trips():
    # "" is treated as no suffix: the id must survive to_path/from_path unchanged.
    identity = ModelCardInstanceId("ns", "comp", "ep", 0x2A, "")
    assert id_from_path(RecordKind.MODEL, identity.to_path()) == identity


@pytest.mark.parametrize(
    ("number", "text"), [(0, "0"), (1, "1"), (0x2A, "2a"), (0xABCDEF, "abcdef"), (2**64 - 1, "ffffffffffffffff")]
)
def test_ids_are_lowercase_hex_without_padding(number, text):
    assert EndpointInstanceId("ns", "comp", "ep", number).to_path() == f"ns/comp/ep/{text}"
    assert EventChannelInstanceId(NAMESPACE_SCOPE, "t", number).to_path() == f"namespace/ns/topic/t/{text}"
    assert id_from_path(RecordKind.ENDPOINT, f"ns/comp/ep/{text}").instance_id == number


BAD_PATHS = [
    (RecordKind.ENDPOINT, ""),
    (RecordKind.ENDPOINT, "ns/comp/2a"),
    (RecordKind.ENDPOINT, "ns/comp/ep/2a/extra"),
    (RecordKind.ENDPOINT, "ns/comp/ep/2A"),
    (RecordKind.ENDPOINT, "ns/comp/ep/xyz"),
    (RecordKind.ENDPOINT, "ns/comp/ep/"),
    (RecordKind.ENDPOINT, "ns/comp/ep/-1"),
    (RecordKind.ENDPOINT, "ns/comp/ep/0x2a"),
    (RecordKind.ENDPOINT, "ns/comp/ep/" + "1" * 17),
    (RecordKind.ENDPOINT, "//ep/2a"),
    (RecordKind.MODEL, "ns/comp/2a"),
    (RecordKind.MODEL, "ns/comp/ep/2A/lora"),
    (RecordKind.MODEL, "ns/comp/ep/g/lora"),
    (RecordKind.MODEL, "ns/comp/ep/" + "f" * 17),
    (RecordKind.MODEL, "ns//ep/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/kv-events/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/x/kv-events/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/topic/kv-events"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/topic/kv-events/2a/extra"),
    (RecordKind.EVENT_CHANNEL, "ns/topic/kv-events/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace"),
    (RecordKind.EVENT_CHANNEL, "namespace//topic/kv-events/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/topic//2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/component/topic/kv-events/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/component/c/topic/kv-events/2A"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/topic/kv%zz/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns%4/topic/kv-events/2a"),
    (RecordKind.EVENT_CHANNEL, "namespace/ns/topic/kv%/2a"),
    (RecordKind.EVENT_SOURCE, "namespace/ns/topic/%FF/2a"),
    (RecordKind.EVENT_SOURCE, "namespace/ns/topic/kv-events/" + "1" * 17),
    (RecordKind.EVENT_SOURCE, "namespace/ns/component/c/endpoint/topic/kv-events/2a"),
    (RecordKind.EVENT_SOURCE, "namespace/ns/component/c/endpoint/e/kv-events/2a"),
]


@pytest.mark.parametrize(("kind", "path"), BAD_PATHS, ids=[f"{k.value}:{p}" for k, p in BAD_PATHS])
def test_bad_paths_are_refused(kind, path):
    with pytest.raises(ValidationError):
        id_from_path(kind, path)


@pytest.mark.parametrize("make", [EndpointInstanceId, ModelCardInstanceId])
@pytest.mark.parametrize(
    "names", [("a/b", "comp", "ep"), ("ns", "a/b", "ep"), ("ns", "comp", "a/b"), ("", "comp", "ep"), ("ns", "", "ep")]
)
def test_endpoint_and_model_names_must_be_plain_segments(make, names):
    with pytest.raises(ValidationError):
        make(*names, 1)


def test_event_topic_must_not_be_empty():
    with pytest.raises(ValidationError):
        EventChannelInstanceId(NAMESPACE_SCOPE, "", 1)


ID_MAKERS = [
    pytest.param(lambda n: EndpointInstanceId("ns", "comp", "ep", n), id="endpoint"),
    pytest.param(lambda n: ModelCardInstanceId("ns", "comp", "ep", n), id="model"),
    pytest.param(lambda n: EventChannelInstanceId(NAMESPACE_SCOPE, "t", n), id="channel"),
    pytest.param(lambda n: EventSourceInstanceId(NAMESPACE_SCOPE, "t", n), id="source"),
]


@pytest.mark.parametrize("make", ID_MAKERS)
@pytest.mark.parametrize("number", [-1, 2**64, True, "1", 1.0, None])
def test_ids_out_of_range_or_of_the_wrong_type_are_refused(make, number):
    with pytest.raises(ValidationError):
        make(number)


@pytest.mark.parametrize("make", ID_MAKERS)
@pytest.mark.parametrize("number", [0, 2**64 - 1])
def test_ids_at_the_u64_bounds_are_accepted(make, number):
    identity = make(number)
    assert id_from_path(identity.kind, identity.to_path()) == identity


def test_id_kinds_name_their_buckets():
    assert {kind: kind.bucket for kind in RecordKind} == {
        RecordKind.ENDPOINT: "v1/instances",
        RecordKind.MODEL: "v1/mdc",
        RecordKind.EVENT_CHANNEL: "v1/event_channels",
        RecordKind.EVENT_SOURCE: "v1/event_sources",
    }
    assert ds.EndpointInstanceId.kind is RecordKind.ENDPOINT


@pytest.mark.parametrize(
    "instance_id",
    [
        ds.EndpointInstanceId("ns", "backend", "generate", 0x2A),
        ds.ModelCardInstanceId("ns", "backend", "generate", 0x2A, "lora-1"),
        ds.EventChannelInstanceId(ds.EventScope.for_component("ns", "backend"), "kv-events", 7),
        ds.EventSourceInstanceId(ds.EventScope.for_namespace("ns"), "kv events/x", 2**64 - 1),
    ],
)
def test_a_store_key_names_its_instance_id(instance_id):
    assert ds.id_from_key(f"{instance_id.kind.bucket}/{instance_id.to_path()}") == instance_id


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "non-empty string"),
        (None, "non-empty string"),
        ("ns/backend/generate/2a", "must start with one of v1/instances/"),
        ("v1/instances/ns/backend/2a", "namespace/component/endpoint/id"),
        ("v1/instances/ns/backend/generate/XYZ", "hex"),
    ],
)
def test_a_malformed_store_key_is_a_validation_error(key, message):
    with pytest.raises(ds.ValidationError, match=message):
        ds.id_from_key(key)
