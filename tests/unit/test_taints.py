"""Model-card taints (docs/design.md §4 update_model_taints) and model conflict / replay rules (§4 register)."""

import copy

import pytest

from discovery_sync import TOPOLOGY_TAINT_PREFIX, ConflictError, ValidationError
from discovery_sync.model_cards import check_replay, find_conflict
from discovery_sync.taints import check_caller_taints, normalized_card, taints_of, topology_taints, with_taints
from tests.unit.helpers import card, model

ZONE = f"{TOPOLOGY_TAINT_PREFIX}zone=z1"


def topology_card(domains, **kw):
    return card(runtime_config={"topology_domains": domains}, **kw)


# -- taints_of ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("card_json", "expected"),
    [
        (card(), ()),
        (card(runtime_config={}), ()),
        (card(runtime_config={"taints": None}), ()),
        (card(taints=[]), ()),
        (card(taints=["b", "a", "b"]), ("a", "b")),
    ],
)
def test_taints_of(card_json, expected):
    assert taints_of(card_json) == expected


@pytest.mark.parametrize("taints", ["gpu", ["gpu", 1], [None], {"gpu": True}])
def test_taints_of_refuses_what_is_not_a_string_array(taints):
    with pytest.raises(ValidationError):
        taints_of(card(runtime_config={"taints": taints}))


# -- topology taints -------------------------------------------------------------------------------
def test_topology_taints_are_trimmed_domain_value_pairs():
    card_json = topology_card({" zone ": " us-east-1a ", "rack": "r1"})
    assert topology_taints(card_json) == {"dynamo.topology/zone=us-east-1a", "dynamo.topology/rack=r1"}


@pytest.mark.parametrize("card_json", [card(), card(runtime_config={}), topology_card(None), topology_card({})])
def test_no_topology_domains_means_no_topology_taints(card_json):
    assert topology_taints(card_json) == frozenset()


def test_topology_domain_values_must_be_strings():
    with pytest.raises(ValidationError):
        topology_taints(topology_card({"zone": 1}))


# -- caller taints -----------------------------------------------------------------------------------
def test_check_caller_taints_accepts_a_collection_of_strings():
    assert check_caller_taints(["gpu=a100", "spot", "gpu=a100"]) == {"gpu=a100", "spot"}
    assert check_caller_taints(()) == frozenset()


@pytest.mark.parametrize(
    "taints",
    [
        [ZONE],
        ["ok", f"{TOPOLOGY_TAINT_PREFIX}anything"],
        ["ok", 5],
        [None],
        [b"gpu"],
        [""],
        "gpu=a100",
        b"gpu",
        5,
        None,
    ],
)
def test_check_caller_taints_refuses(taints):
    with pytest.raises(ValidationError):
        check_caller_taints(taints)


# -- with_taints / normalized_card ---------------------------------------------------------------------
def test_with_taints_sorts_and_deduplicates_and_replaces_the_old_ones():
    original = card(taints=["old"])
    updated = with_taints(original, ["b", "a", "b"])
    assert updated["runtime_config"]["taints"] == ["a", "b"]


def test_with_taints_keeps_topology_taints():
    original = card(runtime_config={"topology_domains": {"zone": "z1"}, "taints": [ZONE, "old"]})
    assert with_taints(original, ["gpu"])["runtime_config"]["taints"] == [ZONE, "gpu"]
    assert with_taints(original, [])["runtime_config"]["taints"] == [ZONE]


def test_with_taints_does_not_modify_its_input():
    original = card(taints=["old"], runtime_config={"max_tokens": 8})
    snapshot = copy.deepcopy(original)
    updated = with_taints(original, ["new"])
    assert original == snapshot
    assert updated["runtime_config"]["max_tokens"] == 8
    assert updated["display_name"] == original["display_name"]


def test_a_card_without_runtime_config_gets_one_holding_the_taints_as_the_reference_writes_it():
    """Issue 38: README's own example card has no runtime_config, and update_model_taints raised.
    The reference reads an absent runtime_config as its default (serde default: no taints)."""
    original = card()
    assert "runtime_config" not in original
    assert with_taints(original, ["gpu", "a"])["runtime_config"] == {"taints": ["a", "gpu"]}
    assert "runtime_config" not in original


@pytest.mark.parametrize("runtime_config", [None, "fast", ["taints"], 3])
def test_with_taints_refuses_a_runtime_config_that_is_not_an_object(runtime_config):
    with pytest.raises(ValidationError, match=r"runtime_config is .*not an object"):
        with_taints({**card(), "runtime_config": runtime_config}, ["gpu"])


def test_with_taints_refuses_reserved_caller_taints():
    with pytest.raises(ValidationError):
        with_taints(topology_card({"zone": "z1"}), [ZONE])


def test_normalized_card_adds_topology_taints():
    normalized = normalized_card(topology_card({"zone": " z1 "}))
    assert normalized["runtime_config"]["taints"] == [ZONE]


def test_normalized_card_merges_and_sorts():
    normalized = normalized_card(card(runtime_config={"topology_domains": {"zone": "z1"}}, taints=["z", "a", "z"]))
    assert normalized["runtime_config"]["taints"] == ["a", ZONE, "z"]


def test_normalized_card_refuses_stray_reserved_taints():
    with pytest.raises(ValidationError):
        normalized_card(card(runtime_config={"topology_domains": {"zone": "z1"}}, taints=["dynamo.topology/zone=z2"]))


def test_normalized_card_without_runtime_config_is_unchanged():
    original = card(source_path="/m")
    assert normalized_card(original) == original


# -- find_conflict ----------------------------------------------------------------------------------
def served(display_name, *, instance_id=1, source_path=None, suffix=None, name="ep", **card_fields):
    """A model card serving ``display_name`` (from ``source_path`` when given) on endpoint ``name``."""
    if source_path is not None:
        card_fields["source_path"] = source_path
    return model(instance_id, card_json=card(display_name, **card_fields), suffix=suffix, name=name)


# The two ways a card is a LoRA adapter: a model_suffix, or a non-null "lora" field.
LORA = [pytest.param({"suffix": "my-lora"}, id="suffix"), pytest.param({"lora": {"max_rank": 8}}, id="lora-field")]


def test_base_models_with_the_same_display_name_do_not_conflict():
    assert find_conflict(served("Qwen", source_path="/a"), [served("Qwen", instance_id=2, source_path="/b")]) is None


def test_base_models_with_different_display_names_conflict():
    other = served("Llama", instance_id=2, source_path="/same")
    assert find_conflict(served("Qwen", source_path="/same"), [other]) == other


@pytest.mark.parametrize("lora", LORA)
def test_lora_compares_source_path(lora):
    same_base = served("Qwen", instance_id=2, source_path="/models/qwen")
    other_base = served("Qwen", instance_id=2, source_path="/models/llama")
    assert find_conflict(served("my-adapter", source_path="/models/qwen", **lora), [same_base]) is None
    assert find_conflict(served("Qwen", source_path="/models/qwen", **lora), [other_base]) == other_base


@pytest.mark.parametrize("lora", LORA)
def test_lora_falls_back_to_display_name(lora):
    assert find_conflict(served("Qwen", **lora), [served("Qwen", instance_id=2)]) is None
    other = served("Llama", instance_id=2)
    assert find_conflict(served("Qwen", **lora), [other]) == other


@pytest.mark.parametrize("lora", LORA)
def test_stored_lora_makes_a_base_candidate_compare_source_path(lora):
    stored = served("adapter", instance_id=2, source_path="/m", **lora)
    assert find_conflict(served("Qwen", source_path="/m"), [stored]) is None


def test_null_lora_field_is_a_base_model():
    other = served("Llama", instance_id=2, source_path="/same")
    assert find_conflict(served("Qwen", source_path="/same", lora=None), [other]) == other


def test_an_empty_suffix_still_counts_as_lora_in_conflict_checks():
    # The reference's rule is `model_suffix.is_some() || lora`: Some("") is a LoRA there, although
    # the identity path (and so is_base) ignores an empty suffix. We follow the reference.
    candidate = served("Qwen", source_path="/same", suffix="")
    assert candidate.id().is_base
    other = served("Llama", instance_id=2, source_path="/same")
    assert find_conflict(candidate, [other]) is None  # same base identity (source_path)
    assert find_conflict(candidate, [served("Llama", instance_id=3, source_path="/other")]) is not None


def test_find_conflict_ignores_the_same_id_and_other_endpoints():
    same_id = served("Llama")
    elsewhere = served("Llama", instance_id=2, name="other-ep")
    assert find_conflict(served("Qwen"), [same_id, elsewhere]) is None


def test_find_conflict_skips_malformed_stored_cards():
    assert find_conflict(served("Qwen"), [model(2, card_json={"display_name": 5})]) is None


def test_find_conflict_needs_a_display_name_on_the_candidate():
    with pytest.raises(ValidationError):
        find_conflict(model(1, card_json={}), [served("Qwen", instance_id=2)])


# -- check_replay -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "replay",
    [card(taints=["a"]), card(taints=["b", "a"]), card(taints=[]), card(runtime_config={})],
    ids=["same", "other-taints", "no-taints", "taints-absent"],
)
def test_replay_may_differ_in_taints_only(replay):
    check_replay(model(card_json=card(taints=["a"])), model(card_json=replay))


@pytest.mark.parametrize(
    "replay",
    [
        card("Llama", taints=["a"]),
        card(taints=["a"], source_path="/m"),
        card(taints=["a"], runtime_config={"max_tokens": 8}),
    ],
    ids=["display-name", "new-field", "runtime-config"],
)
def test_replay_with_other_differences_is_refused(replay):
    with pytest.raises(ConflictError):
        check_replay(model(card_json=card(taints=["a"])), model(card_json=replay))
