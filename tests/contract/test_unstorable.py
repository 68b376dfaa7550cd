"""Values that cannot be stored as JSON the reference runtime reads back are refused alike by
every backend: a ValidationError naming the field, and nothing written. What can be stored
comes back equal on every backend (tuples as lists)."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

import discovery_sync as ds
from discovery_sync.jsonsafe import MAX_DEPTH
from testrigs.helpers import endpoint_spec, model_spec

ALL_QUERIES = [ds.Query.endpoints(), ds.Query.models(), ds.Query.event_channels(), ds.Query.event_sources()]
FIELD = r'card_json\["runtime_config"\]\["x"\]'


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


UNSTORABLE: dict[str, Any] = {
    "2**64": 2**64,
    "2**63 (beyond int64: the Kubernetes API server rounds it)": 2**63,
    "u64 max": 2**64 - 1,
    "below -2**63": -(2**63) - 1,
    "negative zero (stored as 0 by the Kubernetes API server)": -0.0,
    "whole float written back as another integer": 2.0**60,
    "set": {1, 2},
    "int key": {1: "a"},
    "bytes": b"x",
    "nan": math.nan,
    "inf": math.inf,
    "object": object(),
    "datetime": datetime.datetime(2024, 1, 2),
    "lone surrogate": "\ud800",
    "surrogate key": {"\udcff": 1},
    "too deep": _nested(MAX_DEPTH),
}


def snapshot(client: ds.Discovery) -> list[ds.DiscoveryInstance]:
    return [instance for query in ALL_QUERIES for instance in client.list(query)]


def card_with(value: Any) -> ds.ModelSpec:
    """A model card on its own endpoint holding ``value`` at ``card_json["runtime_config"]["x"]``."""
    return model_spec(endpoint="other", runtime_config={"x": value})


def test_register_refuses_every_unstorable_card_value_and_stores_nothing(rig):
    client, reader = rig.client(), rig.client()
    client.register(endpoint_spec())
    client.register(model_spec())
    before = snapshot(reader)
    for label, value in UNSTORABLE.items():
        with pytest.raises(ds.ValidationError, match=FIELD) as refused:
            client.register(card_with(value))
        assert "cannot store model" in str(refused.value), label
    assert snapshot(reader) == before
    assert snapshot(client) == before


def test_register_refuses_unstorable_opaque_fields_of_every_kind(rig):
    client = rig.client()
    scope = ds.EventScope.for_namespace("ns")
    cases = [
        ("device_type", ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("a:1"), device_type={1, 2})),
        (r'transport\["quic"\]\["port"\]', ds.EndpointSpec("ns", "b", "g", ds.Transport("quic", {"port": 2**64}))),
        (r'metadata\["at"\]', ds.EventSourceSpec(scope, "kv-events", 7, {"at": datetime.date(2024, 1, 2)})),
        (r'transport\["config"\]\["subject_prefix"\]', ds.EventChannelSpec(scope, "t", ds.NatsTransport("\udcff"))),
    ]
    for field, spec in cases:
        with pytest.raises(ds.ValidationError, match=field):
            client.register(spec)
    assert snapshot(client) == []


def test_update_model_taints_refuses_taints_that_are_not_valid_text_and_keeps_the_card(rig):
    owner, reader = rig.client(), rig.client()
    model = owner.register(model_spec(taints=["a"]))
    for taints in (["\udcff"], [1], [b"x"], [None], ["ok", math.nan]):
        with pytest.raises(ds.ValidationError, match="taint"):
            owner.update_model_taints(model.id(), taints)
    assert reader.list(ds.Query.models()) == [model]
    assert owner.list(ds.Query.models()) == [model]


def test_storable_edge_values_come_back_equal_and_tuples_as_lists(rig):
    owner, reader = rig.client(), rig.client()
    edges = {
        "i64 max": 2**63 - 1,
        "i64 min": -(2**63),
        "zero": 0.0,
        "whole float": 1.0,  # the Kubernetes API server gives back 1: an equal number
        "exact whole float beyond 2**53": 2.0**53 + 2,
        "whole float beyond int64": 1e19,
        "smallest float": 5e-324,
        "largest float": 1.7976931348623157e308,
        "unicode é 日本 🚀": '\u2028\x00"\\',
        "tuple": (1, ("a", None)),
        "deepest": _nested(MAX_DEPTH - 4),  # under the record, card_json, runtime_config and x
    }
    stored = owner.register(card_with(edges))
    expected = {**edges, "tuple": [1, ["a", None]]}
    assert stored.card_json["runtime_config"]["x"] == expected
    assert reader.list(ds.Query.models()) == [stored]


def test_changing_the_registered_card_afterwards_changes_nothing_stored(rig):
    owner, reader = rig.client(), rig.client()
    card = {"display_name": "m", "runtime_config": {"x": [1]}}
    stored = owner.register(ds.ModelSpec("ns", "backend", "other", card))
    card["runtime_config"]["x"].append(2)
    card["display_name"] = "changed"
    listed = reader.list(ds.Query.models())
    assert [m.card_json for m in listed] == [stored.card_json]
    assert stored.card_json["runtime_config"]["x"] == [1] and stored.card_json["display_name"] == "m"
