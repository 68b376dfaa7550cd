"""A model card changed under one id leaves its name absent long enough for reference readers to
see the removal (issue 38, :mod:`discovery_sync.backends.file.card_change`); what they take in
place is written at once. tests/interop/test_frontend_interop.py runs the reference frontend."""

from __future__ import annotations

import os
import time

import pytest
from discovery_sync.backends.file.card_change import REMOVAL_HOLD, seen_in_place
from discovery_sync.backends.file.names import record_name

import discovery_sync as ds
from testrigs.helpers import initial_state, model_spec, next_event

LOGICAL_ID = 0x38


@pytest.fixture
def clients(store):
    made: list[ds.Discovery] = []

    def connect(**options) -> ds.Discovery:
        client = ds.connect(f"file://{store}", **options)
        made.append(client)
        return client

    yield connect
    for client in made:
        client.shutdown()


def unregister_and_register(client: ds.Discovery, old: ds.Model, new: ds.ModelSpec) -> tuple[ds.Model, float]:
    """Unregister ``old``, register ``new`` at once; the new model and the seconds both took."""
    started = time.monotonic()
    client.unregister(old)
    registered = client.register(new)
    return registered, time.monotonic() - started


def test_another_card_under_the_same_id_is_written_after_the_hold(clients):
    client = clients()
    watch = client.list_and_watch(ds.Query.models())
    initial_state(watch)
    old = client.register(model_spec("a"))
    assert next_event(watch) == ds.Added(old)
    new, took = unregister_and_register(client, old, model_spec("b"))
    assert took >= REMOVAL_HOLD
    assert [next_event(watch), next_event(watch)] == [ds.Removed(old.id()), ds.Added(new)]


def test_the_same_card_or_other_taints_are_written_at_once(clients):
    client = clients()
    old = client.register(model_spec("a", taints=["x"]))
    for spec in (model_spec("a", taints=["x"]), model_spec("a", taints=["y"])):
        old, took = unregister_and_register(client, old, spec)
        assert took < REMOVAL_HOLD


def test_a_successor_with_another_card_removes_the_predecessors_first(clients, store):
    observer = clients()
    watch = observer.list_and_watch(ds.Query.models())
    initial_state(watch)
    old = clients(logical_instance_id=LOGICAL_ID).register(model_spec("a"))
    assert next_event(watch) == ds.Added(old)
    started = time.monotonic()
    new = clients(logical_instance_id=LOGICAL_ID).register(model_spec("b"))
    assert time.monotonic() - started >= REMOVAL_HOLD
    assert [next_event(watch), next_event(watch)] == [ds.Removed(old.id()), ds.Added(new)]
    assert observer.get(new.id()) == new


def test_a_successor_with_new_taints_renames_over_the_predecessors_card(clients, store):
    old = clients(logical_instance_id=LOGICAL_ID).register(model_spec("a", taints=["x"]))
    inode = os.stat(store / "v1" / "mdc" / record_name(old.id())).st_ino
    observer = clients()
    watch = observer.list_and_watch(ds.Query.models())
    initial_state(watch)
    new = clients(logical_instance_id=LOGICAL_ID).register(model_spec("a", taints=["y"]))
    assert next_event(watch) == ds.ModelTaintsUpdated(new.id(), ("y",))  # never Removed
    assert os.stat(store / "v1" / "mdc" / record_name(new.id())).st_ino != inode


@pytest.mark.parametrize(
    ("before", "after", "in_place"),
    [
        ({"display_name": "a"}, {"display_name": "a"}, True),
        ({"display_name": "a", "runtime_config": {}}, {"display_name": "a", "runtime_config": {"taints": ["x"]}}, True),
        ({"display_name": "a", "runtime_config": {"taints": ["x"]}}, {"display_name": "a", "runtime_config": {}}, True),
        ({"display_name": "a"}, {"display_name": "a", "runtime_config": {"taints": ["x"]}}, False),
        ({"display_name": "a", "runtime_config": {}}, {"display_name": "b", "runtime_config": {}}, False),
        ({"display_name": "a", "runtime_config": {"k": 1}}, {"display_name": "a", "runtime_config": {"k": 2}}, False),
    ],
)
def test_reference_readers_take_in_place_only_a_taint_update(before, after, in_place):
    """As ``validate_model_taint_update`` (lib/runtime/src/discovery/mod.rs): both cards need a
    ``runtime_config`` object, and only its ``taints`` may differ."""

    def as_model(card):
        return ds.Model("ns", "backend", "generate", 1, card)

    assert seen_in_place(as_model(before), as_model(after)) is in_place
    assert seen_in_place(None, as_model(after)) is False
