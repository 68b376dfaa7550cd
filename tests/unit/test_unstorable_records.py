"""Readers and writers accept the same records (issue 25, case 5): a stored record ``register()``
would refuse is unreadable to every reader, and values that contain themselves are refused by
name wherever a caller can pass them."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import orjson
import pytest
from discovery_sync.backends.etcd.wire import KeyValue, parse_value
from discovery_sync.backends.file.names import record_from
from discovery_sync.backends.kube.layout import parse_data
from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.jsonsafe import MAX_DEPTH
from discovery_sync.model import stored_form
from testrigs.helpers import caught_logs
from tests.fuzz.strategies import FUZZ, json_text, json_values, only_discovery_errors
from tests.unstorable import ORJSON_MAX_DEPTH, deep_model, model_file_name

TOO_DEEP = f"more than {MAX_DEPTH} levels deep"
UNSTORABLE_DEPTHS = [MAX_DEPTH + 1, ORJSON_MAX_DEPTH]


def test_the_deepest_record_register_stores_is_read_and_one_level_more_is_not():
    deepest = ds.instance_from_json(deep_model(MAX_DEPTH))
    assert stored_form(deepest) == deepest  # register() would store it as it is
    assert deepest.card_as(dict) == deepest.card_json
    with pytest.raises(ds.ValidationError, match=TOO_DEEP):
        ds.instance_from_json(deep_model(MAX_DEPTH + 1))


@pytest.mark.parametrize("depth", UNSTORABLE_DEPTHS)
def test_a_record_nested_deeper_than_register_stores_does_not_parse(depth):
    raw = deep_model(depth)
    for stored in (raw, raw.decode()):
        with pytest.raises(ds.ValidationError, match=TOO_DEEP):
            ds.instance_from_json(stored)
    with pytest.raises(ds.ValidationError, match=TOO_DEEP):  # parsed JSON too: the Kubernetes reader's input
        ds.instance_from_dict(orjson.loads(raw))


@pytest.mark.parametrize("depth", UNSTORABLE_DEPTHS)
def test_the_file_reader_refuses_it_as_an_unusable_record(depth):
    with pytest.raises(ds.ValidationError, match=TOO_DEEP):
        record_from(deep_model(depth), ds.RecordKind.MODEL, model_file_name())


@pytest.mark.parametrize("depth", UNSTORABLE_DEPTHS)
def test_the_etcd_reader_skips_it_with_a_warning(depth):
    kv = KeyValue(b"v1/mdc/ns/backend/generate/1", deep_model(depth), 5, 5, 0)
    with caught_logs("discovery_sync.backends.etcd") as warnings:
        assert parse_value(kv) is None
    assert len(warnings.messages) == 1 and TOO_DEEP in warnings.messages[0]


@pytest.mark.parametrize("depth", UNSTORABLE_DEPTHS)
def test_the_kubernetes_reader_keeps_the_last_valid_value_of_the_slot(depth):
    slot = ("model_cards", "ns/backend/generate/1")
    valid = ds.instance_from_json(deep_model(3))
    data = {"model_cards": {slot[1]: orjson.loads(deep_model(depth))}}
    with caught_logs("discovery_sync.backends.kube") as warnings:
        assert parse_data(data, {}, "pod-a") == {}
        assert parse_data(data, {slot: valid}, "pod-a") == {slot: valid}
    assert len(warnings.messages) == 2 and all(TOO_DEEP in message for message in warnings.messages)


# what a store can hold besides depth: orjson's parse never returns another value register() refuses,
# but for the numbers some store would change (_CHANGED_BY_A_STORE), which readers still read
_NUMBERS = st.sampled_from(
    b"0 -0 1.5 -0.0 5e-324 1e-400 1.7976931348623157e308 1e308 1e400 -1e400 NaN Infinity -Infinity "
    b"18446744073709551615 18446744073709551616 -9223372036854775808 -9223372036854775809 "
    b"123456789012345678901234567890".split()
)
_STRINGS = st.sampled_from(
    [
        *rb'"" "a" "[{" "\"]" "\\" "\ud800" "\udc00x" "\ud83d\ude00" "\u0000" "\u005b"'.split(),
        '"é☃"'.encode(),
        b'"\xff"',
    ]
)
_SCALARS = _NUMBERS | _STRINGS | st.sampled_from([b"true", b"false", b"null"])
#: of _NUMBERS, those the Kubernetes API server would change (u64 beyond int64; a negative zero)
_CHANGED_BY_A_STORE = (b"18446744073709551615", b"-0.0")


def _nest(value: bytes, levels: int, keys: list[bytes]) -> bytes:
    """``value`` inside ``levels`` arrays and objects (whose keys come from ``keys``)."""
    for level in range(levels):
        key = keys[level % len(keys)]
        value = b"[" + value + b"]" if level % 3 == 0 else b"{" + key + b":" + value + b"}"
    return value


_CARD_TEXT = st.builds(
    _nest,
    st.lists(_SCALARS, min_size=1, max_size=3).map(lambda items: b"[" + b",".join(items) + b"]"),
    st.integers(min_value=MAX_DEPTH - 6, max_value=MAX_DEPTH + 3),
    st.lists(_STRINGS, min_size=1, max_size=3),
)


def _record_with_card(card: bytes) -> bytes:
    """A Model record whose card holds ``card`` (JSON text) under ``"c"``: two levels above it."""
    return (
        b'{"type":"Model","namespace":"ns","component":"backend","endpoint":"generate","instance_id":1,"card_json":{"c":'
        + card
        + b"}}"
    )


@FUZZ
@given(_CARD_TEXT)
def test_every_record_a_reader_accepts_is_one_register_stores(card):
    raw = _record_with_card(card)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    instance = only_discovery_errors(ds.instance_from_json, raw)
    if instance is not None and any(number in card for number in _CHANGED_BY_A_STORE):
        with pytest.raises(ds.ValidationError, match="the Kubernetes API server"):
            stored_form(instance)  # read as it is, but not written: some store would change it
    elif instance is not None:
        assert stored_form(instance) == instance
    elif parsed is not None:  # orjson read it: refused for its depth alone, as the writer refuses it
        with pytest.raises(ds.ValidationError, match=TOO_DEEP):
            stored_form(ds.Model("ns", "backend", "generate", 1, parsed["card_json"]))


def _depth(value: Any) -> int:
    """How many levels of arrays and objects ``value`` nests (a scalar: none)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TRICKY_TEXT = st.sampled_from(['"', "\\", '"]', '\\"[', '[{"', ']}\\\\"', "\\]", '{"a":[']) | json_text


@st.composite
def _json_texts(draw: st.DrawFn) -> bytes:
    """JSON text, as any writer may lay it out, nesting about MAX_DEPTH levels: a chain of arrays
    and objects (keys and strings full of brackets, quotes and backslashes) with wide siblings
    at a few levels."""
    levels = draw(st.integers(min_value=MAX_DEPTH - 4, max_value=MAX_DEPTH + 2))
    widened = draw(st.dictionaries(st.integers(min_value=0, max_value=levels - 1), json_values, max_size=4))
    key = draw(_TRICKY_TEXT)
    value = draw(json_values | _TRICKY_TEXT)
    for level in range(levels):
        sibling = widened.get(level)
        if level % 2:
            value = [value] if sibling is None else [sibling, value, sibling]
        else:
            value = {key: value} if sibling is None else {"a": sibling, key: value, "z[": sibling}
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    return json.dumps(value, separators=separators, ensure_ascii=draw(st.booleans())).encode()


@FUZZ
@given(_json_texts())
def test_the_depth_measured_on_the_bytes_is_the_depth_of_the_value(raw):
    from discovery_sync.jsonsafe import too_deep  # the one test of writers and readers

    assert too_deep(raw) == (_depth(orjson.loads(raw)) > MAX_DEPTH)


# -- records built by hand, and values that contain themselves -------------------------------------
def _chain(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"k": 1}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH, 1000])
def test_card_as_refuses_a_hand_built_card_deeper_than_a_stored_one(levels):
    @dataclasses.dataclass
    class Card:
        k: Any = None

    model = ds.Model("ns", "backend", "generate", 1, _chain(levels))  # record depth: levels + 1
    for cls in (dict, Card):
        with pytest.raises(ds.ValidationError, match=TOO_DEEP):
            model.card_as(cls)


def test_card_as_refuses_a_hand_built_card_that_contains_itself():
    card: dict[str, Any] = {"display_name": "m", "tags": {1, 2}}
    card["self"] = card
    with pytest.raises(ds.ValidationError, match=r'card_json\["self"\] is card_json itself'):
        ds.Model("ns", "backend", "generate", 1, card).card_as(dict)


@dataclasses.dataclass
class Node:
    name: str
    self_ref: Any = None


def test_from_card_of_a_dataclass_that_contains_itself_names_the_field():
    node = Node("a")
    node.self_ref = node
    with pytest.raises(
        ds.ValidationError, match=r'model card Node cannot be stored: card_json\["self_ref"\] is card_json itself'
    ):
        ds.ModelSpec.from_card("ns", "backend", "generate", node)
    inner = Node("inner")
    inner.self_ref = [inner]
    with pytest.raises(
        ds.ValidationError, match=r'card_json\["self_ref"\]\["self_ref"\]\[0\] is card_json\["self_ref"\] itself'
    ):
        ds.ModelSpec.from_card("ns", "backend", "generate", Node("outer", inner))


def test_from_card_of_a_dataclass_nested_deeper_than_asdict_recurses_names_the_depth():
    node = Node("leaf")
    for index in range(3000):
        node = Node(str(index), node)
    with pytest.raises(ds.ValidationError, match=r'card_json\["self_ref"\]\["self_ref"\].*' + TOO_DEEP):
        ds.ModelSpec.from_card("ns", "backend", "generate", node)


def _looped_dict() -> dict[str, Any]:
    card: dict[str, Any] = {"display_name": "m"}
    card["me"] = card
    return card


def _looped_list() -> dict[str, Any]:
    items: list[Any] = [1]
    items.append(items)
    return {"display_name": "m", "items": items}


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        (lambda: ds.ModelSpec("ns", "backend", "generate", _looped_dict()), r'card_json\["me"\] is card_json itself'),
        (
            lambda: ds.ModelSpec("ns", "backend", "generate", _looped_list()),
            r'card_json\["items"\]\[1\] is card_json\["items"\] itself',
        ),
        (
            lambda: ds.EventSourceSpec(ds.EventScope("ns"), "t", 7, _looped_dict()),
            r'metadata\["me"\] is metadata itself',
        ),
        (
            lambda: ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("a:1"), _looped_list()),
            r'device_type\["items"\]\[1\] is device_type\["items"\] itself',
        ),
    ],
)
def test_register_refuses_a_value_that_contains_itself_naming_the_field(spec, where):
    with ds.connect("memory://contains-itself") as client:
        with pytest.raises(ds.ValidationError, match=where):
            client.register(spec())
        assert client.list(ds.Query.models()) == [] and client.list(ds.Query.endpoints()) == []


def test_update_model_taints_refuses_a_mapping_or_a_list_that_contains_itself():
    with ds.connect("memory://contains-itself-taints") as client:
        model = client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m", "runtime_config": {}}))
        taints: dict[str, Any] = {"gpu=a100": 1}
        taints["me"] = taints
        with pytest.raises(ds.ValidationError, match=r"taints must be a collection of strings.*not a mapping \(dict\)"):
            client.update_model_taints(model.id(), taints)
        looped: list[Any] = ["gpu"]
        looped.append(looped)
        with pytest.raises(ds.ValidationError, match="every taint must be a non-empty string"):
            client.update_model_taints(model.id(), looped)
        assert client.list(ds.Query.models()) == [model]


def test_the_depth_warning_names_the_record_and_the_limit(caplog):
    # the one message every reader logs: it says what is wrong and that register() refuses it
    with caplog.at_level(logging.WARNING, logger="discovery_sync.backends.etcd"):
        parse_value(KeyValue(b"v1/mdc/ns/backend/generate/1", deep_model(MAX_DEPTH + 1), 5, 5, 0))
    (message,) = [record.getMessage() for record in caplog.records]
    assert "v1/mdc/ns/backend/generate/1" in message and "register() refuses" in message


# -- instance_to_json of an instance holding what JSON cannot (issue 28, case 13) --------------------
MODEL_RECORD = {"type": "Model", "namespace": "ns", "component": "c", "endpoint": "e", "instance_id": 1}
OUTSIDE = "outside the integers JSON readers keep exact (-9223372036854775808 to 18446744073709551615)"


@pytest.mark.parametrize("number", [2**64, 2**70, -(2**63) - 1, -(10**30)])
def test_instance_to_json_names_an_integer_json_readers_cannot_keep(number):
    card: dict[str, Any] = {"runtime_config": {"limits": [1, 2]}}
    built = ds.instance_from_dict({**MODEL_RECORD, "card_json": card})
    card["runtime_config"]["limits"][1] = number  # the card is the caller's: changed after building
    hand_built = ds.Model("ns", "c", "e", 1, {"runtime_config": {"limits": [1, number]}})
    for instance in (built, hand_built):
        with pytest.raises(ds.ValidationError) as refused:
            ds.instance_to_json(instance)
        assert str(refused.value) == (
            f'cannot store model ns/c/e/1: card_json["runtime_config"]["limits"][1] is {number}, {OUTSIDE}; '
            "store it as a string"
        )


@pytest.mark.parametrize("number", [2**64 - 1, -(2**63)])
def test_instance_to_json_writes_the_integers_at_the_bounds(number):
    instance = ds.instance_from_dict({**MODEL_RECORD, "card_json": {"x": number}})
    assert ds.instance_from_json(ds.instance_to_json(instance)) == instance


def test_instance_to_json_names_the_field_of_other_kinds_too():
    endpoint = ds.Endpoint("ns", "c", "e", 1, ds.Transport.tcp("a:1"), {"gpus": {0, 1}})
    with pytest.raises(ds.ValidationError, match=r"^cannot store endpoint ns/c/e/1: device_type\[.gpus.\] has type"):
        ds.instance_to_json(endpoint)
    source = ds.EventSource(ds.EventScope.for_namespace("ns"), "t", 7, {"big": 2**64})
    with pytest.raises(ds.ValidationError, match=r'metadata\["big"\] is 18446744073709551616, outside'):
        ds.instance_to_json(source)
