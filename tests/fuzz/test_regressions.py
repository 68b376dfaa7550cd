"""The reproducers of issue 14 (values that cannot be stored, wrong types) and what the fuzzers
found, kept as plain tests."""

from __future__ import annotations

import math
import uuid

import orjson
import pytest

import discovery_sync as ds
from discovery_sync.identity import parse_hex_id
from discovery_sync.jsonsafe import MAX_DEPTH
from discovery_sync.pathcodec import encode_filename, encode_segment
from discovery_sync.taints import normalized_card

SCOPE = ds.EventScope.for_namespace("ns")


@pytest.fixture(params=["memory", "file"])
def client(request, tmp_path):
    url = f"memory://regression-{uuid.uuid4().hex}" if request.param == "memory" else f"file://{tmp_path / 'store'}"
    with ds.connect(url) as client:
        yield client


def card(**runtime_config):
    return {"display_name": "m", "runtime_config": runtime_config}


def model_spec(card_json):
    return ds.ModelSpec("ns", "backend", "generate", card_json)


# -- issue 14: a card holding 2**64, a set, non-string keys or bytes; device_type=object() ---------
@pytest.mark.parametrize(
    ("value", "what"),
    [
        (2**64, "outside the integers"),
        (-(2**63) - 1, "outside the integers"),
        ({1, 2}, "has type set"),
        ({1: "a"}, "has the key 1"),
        (b"x", "has type bytes"),
        (math.nan, "NaN"),
        (math.inf, "infinity"),
        ("\ud800", "lone surrogate"),
        (orjson.Fragment(b"[1,"), "has type orjson.Fragment"),
    ],
    ids=["2**64", "below-i64", "set", "int-key", "bytes", "nan", "inf", "surrogate", "fragment"],
)
def test_unstorable_card_values_are_refused_on_file_and_memory_alike(client, value, what):
    with pytest.raises(ds.ValidationError, match=rf'card_json\["runtime_config"\]\["x"\] .*{what}'):
        client.register(model_spec(card(x=value)))
    assert client.list(ds.Query.models()) == []


def test_an_opaque_device_type_that_is_not_json_is_refused(client):
    with pytest.raises(ds.ValidationError, match="device_type has type object"):
        client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("a:1"), device_type=object()))
    assert client.list(ds.Query.endpoints()) == []


def nested(levels):
    """Empty lists nested ``levels`` deep: ``[[...]]``."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_nesting_deeper_than_the_reference_reads_is_refused(client):
    # x sits in the record, card_json and runtime_config: three levels above it
    with pytest.raises(ds.ValidationError, match=f"more than {MAX_DEPTH} levels deep"):
        client.register(model_spec(card(x=nested(MAX_DEPTH - 2))))
    assert client.list(ds.Query.models()) == []
    stored = client.register(model_spec(card(x=nested(MAX_DEPTH - 3))))
    assert client.list(ds.Query.models()) == [stored]


def test_tuples_are_stored_as_arrays_and_come_back_as_lists(client):
    stored = client.register(model_spec(card(x=(1, (2, "a")))))
    assert stored.card_json["runtime_config"]["x"] == [1, [2, "a"]]
    assert client.list(ds.Query.models()) == [stored]


def test_integers_at_the_bounds_and_finite_floats_are_stored_exactly(client):
    # the bounds every store keeps (issue 34: the Kubernetes API server keeps int64 and turns -0.0 into 0)
    values = {"max": 2**63 - 1, "min": -(2**63), "tiny": 5e-324, "big": 1.7976931348623157e308, "zero": 0.0}
    stored = client.register(model_spec(card(**values)))
    assert client.list(ds.Query.models())[0].card_json["runtime_config"] == values == stored.card_json["runtime_config"]


def test_taints_that_are_not_valid_text_are_refused(client):
    model = client.register(model_spec(card(taints=["a"])))
    for taints in (["\udcff"], [1], [b"x"], [""]):
        with pytest.raises(ds.ValidationError, match="taint"):
            client.update_model_taints(model.id(), taints)
    assert client.list(ds.Query.models()) == [model]


# -- issue 14: id_from_path with a wrong type ------------------------------------------------------
@pytest.mark.parametrize("path", [None, b"ns/c/e/1", 42, ["ns", "c", "e", "1"], ""])
def test_id_from_path_of_a_non_string_is_a_validation_error(path):
    with pytest.raises(ds.ValidationError, match="non-empty string"):
        ds.id_from_path(ds.RecordKind.ENDPOINT, path)


@pytest.mark.parametrize("kind", ["endpoint", None, 1])
def test_id_from_path_of_a_kind_that_is_not_a_record_kind_is_a_validation_error(kind):
    with pytest.raises(ds.ValidationError, match="RecordKind"):
        ds.id_from_path(kind, "ns/c/e/1")


# -- found by the fuzzers --------------------------------------------------------------------------
@pytest.mark.parametrize("text", [1, None, ["2", "a"], b"2a"])
def test_parse_hex_id_of_a_non_string(text):
    with pytest.raises(ds.ValidationError):
        parse_hex_id(text)


def test_an_endpoint_scope_with_a_slash_in_its_names_reads_back():
    """Scope paths are percent-encoded, so the constructor allows '/'; reading it back did not."""
    channel = ds.EventChannel(ds.EventScope("a/b", "c/d", "e/f"), "t", 1, ds.NatsTransport("x"))
    assert ds.instance_from_json(ds.instance_to_json(channel)) == channel


@pytest.mark.parametrize("endpoints", [None, "tcp://a:1", 5, [1]])
def test_zmq_broker_endpoints_must_be_a_list_of_strings(endpoints):
    with pytest.raises(ds.ValidationError, match="xsub_endpoints"):
        ds.ZmqBrokerTransport(endpoints, ())


def test_zmq_broker_endpoints_given_as_lists_are_kept_as_tuples():
    transport = ds.ZmqBrokerTransport(["tcp://a:1"], ["tcp://a:2"])
    assert transport.xsub_endpoints == ("tcp://a:1",)
    hash(transport)


@pytest.mark.parametrize("encode", [encode_segment, encode_filename])
@pytest.mark.parametrize("text", ["\ud800", None, b"x", 5])
def test_encoders_refuse_what_is_not_unicode_text(encode, text):
    with pytest.raises(ds.ValidationError):
        encode(text)


def test_topology_domains_with_a_non_string_key():
    with pytest.raises(ds.ValidationError, match="topology_domains"):
        normalized_card({"display_name": "m", "runtime_config": {"topology_domains": {1: "a"}}})


@pytest.mark.parametrize("build", [ds.EventChannelInstanceId, ds.EventSourceInstanceId])
def test_event_identities_need_a_scope(build):
    with pytest.raises(ds.ValidationError, match="scope"):
        build("ns", "topic", 1)


def test_a_model_suffix_must_be_valid_text():
    with pytest.raises(ds.ValidationError, match="model_suffix"):
        ds.ModelCardInstanceId("ns", "c", "e", 1, "\udcff")
