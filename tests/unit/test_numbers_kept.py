"""Numbers some store would change are refused at register(), on every backend alike (issue 34).

The Kubernetes API server keeps JSON integers as int64 and floats as float64, prints floats as Go
does and reads its own output back as an integer where it can (recorded in
``tests/fixtures/kube-apiserver-1.28/numbers.json``): a card valid on one backend must be valid on
all, so ``register()`` refuses such numbers everywhere, naming the field, while a record's own id
keeps the whole u64 range (file-store ids are random u64).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

import discovery_sync as ds
from discovery_sync.jsonsafe import changed_number
from discovery_sync.model import stored_form

NUMBERS = Path(__file__).resolve().parents[1] / "fixtures" / "kube-apiserver-1.28" / "numbers.json"


def model(value: object, instance_id: int = 1) -> ds.Model:
    return ds.Model("ns", "c", "e", instance_id, {"display_name": "m", "runtime_config": {"x": value}})


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (2**63, "outside the integers every store keeps exact"),
        (2**64 - 1, "outside the integers every store keeps exact"),
        (-(2**63) - 1, "outside the integers"),
        (-0.0, "is -0.0, which the Kubernetes API server stores as 0"),
        (2.0**60, "writes back as the integer 1152921504606847000"),
        (-(2.0**60), "writes back as the integer -1152921504606847000"),
        (2.0**63, "writes back as the integer 9223372036854776000"),
    ],
)
def test_a_number_some_store_changes_is_refused_naming_the_field(value, why):
    with pytest.raises(
        ds.ValidationError, match=r'^cannot store model ns/c/e/1: card_json\["runtime_config"\]\["x"\] is '
    ) as refused:
        stored_form(model(value))
    assert why in str(refused.value)


@pytest.mark.parametrize(
    "value",
    [2**63 - 1, -(2**63), 0.0, 1.0, 0.1, 5e-324, 1e308, 2.0**53, 2.0**53 + 2, 1e16, 1e19, 2.0**64, 1e21, 1e30],
)
def test_numbers_every_store_keeps_are_stored(value):
    assert stored_form(model(value)).card_json["runtime_config"]["x"] == value


def test_a_records_own_id_keeps_the_whole_u64_range_but_its_content_does_not():
    big = 2**64 - 1  # a file-store instance id
    assert stored_form(model(7, instance_id=big)).instance_id == big
    source = ds.EventSource(ds.EventScope.for_namespace("ns"), "kv", big, {"worker": {"worker_id": 5}})
    assert stored_form(source).publisher_id == big
    with pytest.raises(ds.ValidationError, match=r'metadata\["worker"\]\["worker_id"\] is 18446744073709551615'):
        stored_form(ds.EventSource(ds.EventScope.for_namespace("ns"), "kv", 5, {"worker": {"worker_id": big}}))
    # the same digits inside a string, or the id's own digits elsewhere, are no number
    assert stored_form(model(str(big), instance_id=big)).card_json["runtime_config"]["x"] == str(big)
    with pytest.raises(ds.ValidationError, match="outside the integers every store keeps exact"):
        stored_form(model(big, instance_id=big))


def test_the_rule_predicts_every_number_the_real_api_server_changed():
    """Each number the recorded server gave back differently is refused; each it kept is stored."""
    recording = json.loads(NUMBERS.read_text(encoding="utf-8"))
    sent = applied = None
    for step in recording["steps"]:
        request, response = step["request"], step["response"]
        if request["method"] == "PATCH":
            sent = orjson.loads(request["body"])
        if request["method"] == "GET" and request["path"].endswith("/apply-numbers"):
            applied = orjson.loads(response["body_text"])
    assert sent is not None and applied is not None
    (key,) = sent["spec"]["data"]["model_cards"]
    before = sent["spec"]["data"]["model_cards"][key]["card_json"]
    after = applied["spec"]["data"]["model_cards"][key]["card_json"]
    checked = 0
    for name, value in _numbers(before):
        came_back = _at(after, name)
        changed = came_back != value or repr(came_back).startswith("-") != repr(value).startswith("-")
        assert (changed_number(value) is not None) == changed, (name, value, came_back)
        checked += 1
    assert checked >= 8


def _numbers(value: object, path: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], object]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _numbers(item, (*path, key))]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _numbers(item, (*path, index))]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [(path, value)]
    return []


def _at(value: object, path: tuple[str | int, ...]) -> object:
    for part in path:
        value = value[part]  # type: ignore[index]
    return value
