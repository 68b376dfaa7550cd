"""register() and update_model_taints() on ``memory://``: a card that cannot be stored is refused
with a ValidationError naming the field and leaves the store unchanged; any storable card comes
back from list() equal (tuples as lists); no spec of any field values raises anything else."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from tests.fuzz.strategies import (
    FUZZ,
    FUZZ_PER_CASE,
    UNSTORABLE,
    any_values,
    as_lists,
    as_tuples,
    card_with_planted,
    cards,
    event_transports,
    json_text,
    json_values,
    names,
    only_discovery_errors,
    path_text,
    plain_names,
    request_transports,
    scopes,
)

ALL_QUERIES = [ds.Query.endpoints(), ds.Query.models(), ds.Query.event_channels(), ds.Query.event_sources()]


@contextlib.contextmanager
def memory_client() -> Iterator[ds.Discovery]:
    """A client of a fresh in-process store (hypothesis runs many examples per test function)."""
    client = ds.connect(f"memory://fuzz-{uuid.uuid4().hex}")
    try:
        yield client
    finally:
        client.shutdown()


def everything(client: ds.Discovery) -> list[ds.DiscoveryInstance]:
    return [instance for query in ALL_QUERIES for instance in client.list(query)]


def model_spec(card: dict[str, Any], suffix: str | None = None) -> ds.ModelSpec:
    return ds.ModelSpec("ns", "backend", "generate", card, suffix)


@pytest.mark.parametrize(("label", "value"), UNSTORABLE, ids=[label for label, _ in UNSTORABLE])
@FUZZ_PER_CASE
@given(data=st.data())
def test_unstorable_cards_are_refused_naming_the_field(label, value, data):
    card, path = data.draw(card_with_planted(value))
    with memory_client() as client:
        existing = client.register(model_spec({"display_name": "other"}, suffix="x"))
        with pytest.raises(ds.ValidationError) as refused:
            client.register(model_spec(card))
        assert path_text(path) in str(refused.value), (label, str(refused.value))
        assert everything(client) == [existing]


@FUZZ
@given(cards, st.data())
def test_storable_cards_round_trip_with_tuples_stored_as_lists(card, data):
    card = as_tuples(card, lambda: data.draw(st.booleans()))
    with memory_client() as client:
        stored = client.register(model_spec(card))
        assert stored.card_json == as_lists(card)
        assert client.list(ds.Query.models()) == [stored]


@FUZZ
@given(st.sampled_from([value for _, value in UNSTORABLE]), st.sampled_from(["device_type", "transport"]))
def test_unstorable_endpoint_fields_are_refused(value, field):
    transport = ds.Transport("quic", value) if field == "transport" else ds.Transport.tcp("127.0.0.1:1")
    device_type = value if field == "device_type" else None
    with memory_client() as client:
        with pytest.raises(ds.ValidationError, match=field):
            client.register(ds.EndpointSpec("ns", "backend", "generate", transport, device_type))
        assert everything(client) == []


@FUZZ
@given(st.sampled_from([value for _, value in UNSTORABLE]), json_text)
def test_unstorable_event_source_metadata_is_refused(value, key):
    with memory_client() as client:
        with pytest.raises(ds.ValidationError, match="metadata"):
            client.register(ds.EventSourceSpec(ds.EventScope.for_namespace("ns"), "t", 1, {key: value}))
        assert everything(client) == []


@FUZZ
@given(st.lists(any_values | json_text, max_size=4) | any_values)
def test_taint_updates_take_any_value(taints):
    with memory_client() as client:
        model = client.register(model_spec({"display_name": "m", "runtime_config": {"taints": ["a"]}}))
        updated = only_discovery_errors(client.update_model_taints, model.id(), taints)
        assert client.list(ds.Query.models()) == [updated or model]


@FUZZ
@given(st.data())
def test_specs_with_any_field_values_register_or_raise_a_discovery_error(data):
    """Every spec field a program can fill, with any Python value: a DiscoveryError at worst,
    and then nothing is stored."""
    value = any_values | json_values
    spec = data.draw(
        st.one_of(
            st.builds(
                ds.EndpointSpec,
                plain_names | value,
                plain_names | value,
                plain_names | value,
                request_transports | value,
                value,
                st.sampled_from(["json", "msgpack"]) | value,
            ),
            st.builds(ds.ModelSpec, plain_names | value, plain_names, plain_names, cards | value, names | value),
            st.builds(ds.EventChannelSpec, scopes | value, names | value, event_transports | value),
            st.builds(ds.EventSourceSpec, scopes | value, names | value, value, value),
        )
    )
    with memory_client() as client:
        stored = only_discovery_errors(client.register, spec)
        assert everything(client) == ([] if stored is None else [stored])
