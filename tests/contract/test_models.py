"""Model-card rules: one model per endpoint, replays, taints."""

from __future__ import annotations

import pytest

import discovery_sync as ds
from testrigs.helpers import assert_quiet, ids, initial_state, model_spec, next_event, race_conflicting_models


def test_a_different_model_on_the_same_endpoint_is_refused(rig):
    first, second = rig.client(), rig.client()
    stored = first.register(model_spec("model-a"))
    with pytest.raises(ds.ConflictError, match="model-a"):
        second.register(model_spec("model-b"))
    assert first.list(ds.Query.models()) == [stored]
    # the same model from another instance is welcome, and so is another endpoint
    same = second.register(model_spec("model-a"))
    other_endpoint = second.register(model_spec("model-b", endpoint="other"))
    assert ids(first.list(ds.Query.models())) == {stored.id(), same.id(), other_endpoint.id()}


def test_lora_adapters_share_an_endpoint_with_their_base_model(rig):
    client = rig.client()
    base = client.register(model_spec("llama", source_path="/models/llama"))
    lora = client.register(model_spec("llama-sql", suffix="sql", source_path="/models/llama", lora={"name": "sql"}))
    assert lora.id().model_suffix == "sql"
    with pytest.raises(ds.ConflictError):
        client.register(model_spec("mistral-sql", suffix="m", source_path="/models/mistral", lora={"name": "m"}))
    assert ids(client.list(ds.Query.models())) == {base.id(), lora.id()}


def test_racing_conflicting_registrations_have_exactly_one_winner(rig):
    winners = race_conflicting_models([rig.client() for _ in range(6)])
    assert len(winners) == 1, winners


def test_replay_accepts_taint_differences_and_keeps_the_stored_taints(rig):
    client = rig.client()
    stored = client.register(model_spec(taints=["a"]))
    replay = client.register(model_spec(taints=["b", "c"]))
    assert replay == stored
    assert client.list(ds.Query.models())[0].card_json["runtime_config"]["taints"] == ["a"]
    with pytest.raises(ds.ConflictError, match=r"only runtime_config\.taints"):
        client.register(model_spec(taints=["a"], context_length=4096))
    assert client.list(ds.Query.models()) == [stored]


def test_taint_updates_are_sorted_keep_topology_and_reach_watchers(rig):
    owner, watcher = rig.client(), rig.client()
    model = owner.register(model_spec(topology={"zone": " us-east-1a ", "rack": "r1"}))
    assert model.card_json["runtime_config"]["taints"] == ["dynamo.topology/rack=r1", "dynamo.topology/zone=us-east-1a"]
    with watcher.list_and_watch(ds.Query.models("ns")) as watch:
        initial_state(watch)
        updated = owner.update_model_taints(model.id(), {"z=1", "a=2"})
        expected = ("a=2", "dynamo.topology/rack=r1", "dynamo.topology/zone=us-east-1a", "z=1")
        assert tuple(updated.card_json["runtime_config"]["taints"]) == expected
        assert next_event(watch, rig.event_timeout) == ds.ModelTaintsUpdated(model.id(), expected)
        # the same set again writes nothing and emits nothing
        assert owner.update_model_taints(model.id(), ["z=1", "a=2"]) == updated
        assert_quiet(watch, rig.quiet_period)
        assert watcher.list(ds.Query.models())[0] == updated


def test_taint_update_rules(rig):
    owner, other = rig.client(), rig.client()
    model = owner.register(model_spec())
    lora = owner.register(model_spec(suffix="adapter", lora={"name": "adapter"}))
    with pytest.raises(ds.ValidationError, match="reserved prefix"):
        owner.update_model_taints(model.id(), ["dynamo.topology/zone=x"])
    with pytest.raises(ds.ValidationError, match="base model"):
        owner.update_model_taints(lora.id(), ["a"])
    with pytest.raises(ds.ValidationError, match="owns instance"):
        other.update_model_taints(model.id(), ["a"])
    with pytest.raises(ds.ValidationError):
        owner.update_model_taints(model.id(), "a")  # a bare string is not a collection of taints
    with pytest.raises(ds.NotFoundError):
        owner.update_model_taints(ds.ModelCardInstanceId("ns", "backend", "nothing", owner.instance_id), ["a"])
    assert owner.list(ds.Query.models(endpoint=None)) == sorted([model, lora], key=lambda m: m.id().to_path())


def test_reserved_taints_in_a_card_must_match_its_topology(rig):
    client = rig.client()
    with pytest.raises(ds.ValidationError, match="topology_domains"):
        client.register(model_spec(taints=["dynamo.topology/zone=a"], topology={"zone": "b"}))
    assert client.list(ds.Query.models()) == []


def test_unregistered_models_free_their_endpoint(rig):
    first, second = rig.client(), rig.client()
    model = first.register(model_spec("model-a"))
    first.unregister(model)
    replacement = second.register(model_spec("model-b"))
    with second.list_and_watch(ds.Query.models()) as watch:
        _, resync = initial_state(watch)
        assert resync.instances == (replacement,)


def test_a_card_registered_without_runtime_config_takes_taints_as_the_reference_writes_them(rig):
    """Issue 38: README's own example card ({"display_name": ...} alone) could not take taints.
    The reference reads an absent runtime_config as its default (no taints): the update gives the
    card a runtime_config holding the taints, and every reader sees them."""
    owner, watcher = rig.client(), rig.client()
    model = owner.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "llama"}))
    assert "runtime_config" not in model.card_json
    with watcher.list_and_watch(ds.Query.models("ns")) as watch:
        initial_state(watch)
        updated = owner.update_model_taints(model.id(), {"gpu=a100"})
        assert updated.card_json == {"display_name": "llama", "runtime_config": {"taints": ["gpu=a100"]}}
        assert next_event(watch, rig.event_timeout) == ds.ModelTaintsUpdated(model.id(), ("gpu=a100",))
    assert watcher.list(ds.Query.models())[0] == updated
