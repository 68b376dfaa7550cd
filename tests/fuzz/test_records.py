"""Stored records: whatever bytes or JSON a store holds, parsing gives a valid instance or a
ValidationError, and what parses writes back as itself."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.jsonsafe import changed_number
from discovery_sync.model import stored_form
from tests.fuzz.strategies import (
    FUZZ,
    FUZZ_PER_CASE,
    UNSTORABLE,
    VALID_RECORDS,
    any_values,
    card_with_planted,
    damaged_bytes,
    instances,
    json_values,
    mutated_records,
    only_discovery_errors,
    path_text,
)

valid_records = st.sampled_from(VALID_RECORDS)
VALID_MODEL = next(record for record in VALID_RECORDS if record["type"] == "Model")
generated_records = instances.map(lambda instance: instance.to_dict())


def assert_well_formed(instance: ds.DiscoveryInstance) -> None:
    """A parsed instance is usable: it hashes, its id round-trips, and its JSON parses back as itself."""
    hash(instance)
    repr(instance)
    assert ds.id_from_path(instance.kind, instance.id().to_path()) == instance.id()
    assert ds.instance_from_json(ds.instance_to_json(instance)) == instance
    # readers build the usual records without their classes' checks (discovery_sync.assembly):
    # the same record through __init__ must be accepted and be the same in every respect
    rebuilt = dataclasses.replace(instance)
    assert (rebuilt, rebuilt.id(), hash(rebuilt.id()), repr(rebuilt)) == (
        instance,
        instance.id(),
        hash(instance.id()),
        repr(instance),
    )
    assert pickle.loads(pickle.dumps(instance)) == instance
    changed = changed_number({key: value for key, value in instance.to_dict().items() if key not in OWN_IDS})
    if changed is None:
        assert stored_form(instance) == instance
    else:  # readable, but register() refuses it: some store would change that number
        with pytest.raises(ds.ValidationError, match="Kubernetes API server"):
            stored_form(instance)


#: a record's own id: only the serialisable range binds it (jsonsafe.numbers_kept)
OWN_IDS = ("instance_id", "publisher_id")


def check_parse(raw: bytes | str) -> None:
    instance = only_discovery_errors(ds.instance_from_json, raw)
    if instance is not None:
        assert_well_formed(instance)


def test_every_valid_record_parses():
    for record in VALID_RECORDS:
        assert_well_formed(ds.instance_from_dict(record))


@FUZZ
@given(instances)
def test_generated_instances_round_trip_through_their_json(instance):
    assert_well_formed(instance)
    assert ds.instance_from_dict(orjson.loads(ds.instance_to_json(instance))) == instance


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes(raw):
    check_parse(raw)


@FUZZ
@given(st.text(max_size=100))
def test_arbitrary_text_surrogates_included(raw):
    check_parse(raw)


@FUZZ
@given(json_values)
def test_arbitrary_json(value):
    check_parse(orjson.dumps(value))


@FUZZ
@given(mutated_records(valid_records | generated_records))
def test_mutated_records(record):
    check_parse(orjson.dumps(record))


@FUZZ
@given(st.data())
def test_damaged_bytes_of_valid_records(data):
    record = data.draw(valid_records | generated_records)
    check_parse(data.draw(damaged_bytes(orjson.dumps(record))))


@FUZZ
@given(st.data())
def test_instance_from_dict_with_python_values_in_any_field(data):
    """Callers of instance_from_dict may hand over any Python values, not only parsed JSON."""
    record: dict[str, Any] = dict(data.draw(valid_records))
    key = data.draw(st.sampled_from(sorted(record)))
    record[key] = data.draw(any_values)
    instance = only_discovery_errors(ds.instance_from_dict, record)
    if instance is not None:
        hash(instance)
        instance.id().to_path()


@FUZZ
@given(any_values)
def test_instance_from_dict_and_json_of_anything(value):
    only_discovery_errors(ds.instance_from_dict, value)
    only_discovery_errors(ds.instance_from_json, value)


#: the unstorable values orjson writes without complaint (NaN as null, a datetime as text...): only
#: register()'s check (``jsonsafe.storable``) refuses them; instance_to_json refuses the others
ORJSON_WRITES = {"nan", "inf", "-inf", "datetime", "date", "uuid", "enum", "dataclass", "fragment"}
out_of_range = st.integers(min_value=2**64) | st.integers(max_value=-(2**63) - 1)


@FUZZ
@given(out_of_range, st.data())
def test_instance_to_json_names_an_integer_beyond_json_readers_in_a_card_changed_after_building(number, data):
    card, path = data.draw(card_with_planted(number))
    instance = ds.instance_from_dict({**VALID_MODEL, "card_json": {}})
    instance.card_json.update(card)
    with pytest.raises(ds.ValidationError) as refused:
        ds.instance_to_json(instance)
    assert path_text(path) in str(refused.value)


@pytest.mark.parametrize(("label", "value"), UNSTORABLE, ids=[label for label, _ in UNSTORABLE])
@FUZZ_PER_CASE
@given(data=st.data())
def test_instance_to_json_of_an_unstorable_card_is_json_or_a_validation_error_naming_the_field(label, value, data):
    card, path = data.draw(card_with_planted(value))
    instance = ds.Model("ns", "backend", "generate", 1, card)
    if label in ORJSON_WRITES:
        assert isinstance(ds.instance_to_json(instance), bytes)
        return
    with pytest.raises(ds.ValidationError) as refused:  # never orjson's TypeError
        ds.instance_to_json(instance)
    assert path_text(path) in str(refused.value), (label, str(refused.value))
