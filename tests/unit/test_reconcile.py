"""Change classification and snapshot diffs (docs/design.md §4 "Change classification")."""

import pytest

from discovery_sync import Added, ModelTaintsUpdated, NatsTransport, Removed, Transport
from discovery_sync.reconcile import Change, apply, classify, diff
from tests.unit.helpers import card, endpoint, event_channel, event_source, model


def view(*instances):
    return {instance.id(): instance for instance in instances}


def tainted(*taints, **card_fields):
    return model(card_json=card(taints=list(taints), **card_fields))


ALL_KINDS = [endpoint, model, event_channel, event_source]


@pytest.mark.parametrize("build", ALL_KINDS, ids=lambda b: b.__name__)
def test_new_id_is_added(build):
    assert classify(None, build()) is Change.ADDED
    assert diff({}, view(build())) == ([Added(build())], view(build()))


@pytest.mark.parametrize("build", ALL_KINDS, ids=lambda b: b.__name__)
def test_same_value_is_nothing(build):
    assert classify(build(), build()) is Change.NONE
    assert diff(view(build()), view(build())) == ([], view(build()))


@pytest.mark.parametrize(
    ("old", "new"),
    [(["b", "a"], ["a", "b"]), (["a", "a", "b"], ["b", "a"]), ([], None)],
    ids=["reordered", "duplicated", "empty-vs-absent"],
)
def test_taints_equal_as_sets_are_nothing(old, new):
    before = tainted(*old)
    after = model(card_json=card(taints=new)) if new is not None else model(card_json=card(runtime_config={}))
    assert classify(before, after) is Change.NONE
    assert diff(view(before), view(after)) == ([], view(before))


def test_taints_only_change_is_model_taints_updated_with_sorted_taints():
    before, after = tainted("a"), tainted("c", "b", "a", "b")
    assert classify(before, after) is Change.TAINTS
    events, result = diff(view(before), view(after))
    assert events == [ModelTaintsUpdated(after.id(), ("a", "b", "c"))]
    assert result == view(after)


@pytest.mark.parametrize(
    "after",
    [
        tainted("a", display_name="Llama"),
        tainted("a", source_path="/m"),
        model(card_json=card(taints=["a"], runtime_config={"max_tokens": 8})),
        model(card_json=card(taints=["b"], runtime_config={"max_tokens": 8})),
    ],
    ids=["display-name", "new-field", "runtime-config", "runtime-config-and-taints"],
)
def test_other_model_changes_replace_the_card_as_removed_then_added(after):
    before = tainted("a")
    assert classify(before, after) is Change.REPLACED
    events, result = diff(view(before), view(after))
    assert events == [Removed(before.id()), Added(after)]
    assert result[before.id()] is after


def test_a_model_whose_new_taints_cannot_be_read_keeps_its_last_valid_card():
    before, after = tainted("a"), model(card_json=card(runtime_config={"taints": "a"}))
    valid, events, change = apply(before, after)
    assert (valid, events, change) == (before, (), Change.REJECTED)
    assert diff(view(before), view(after)) == ([], view(before))


def test_endpoint_change_is_added_and_replaces():
    before, after = endpoint(), endpoint(transport=Transport.tcp("127.0.0.1:9001"), request_plane_codec="msgpack")
    assert classify(before, after) is Change.ADDED
    assert diff(view(before), view(after)) == ([Added(after)], view(after))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (event_channel(), event_channel(transport=NatsTransport("elsewhere"))),
        (event_source(), event_source(metadata={"worker": "w1"})),
    ],
    ids=["event-channel", "event-source"],
)
def test_event_record_same_id_changes_are_removed_then_added(before, after):
    assert classify(before, after) is Change.REPLACED
    events, result = diff(view(before), view(after))
    assert events == [Removed(before.id()), Added(after)]
    assert result[before.id()] is after


def test_removed_ids_are_removed():
    gone = [endpoint(1), model(2), event_channel(3), event_source(4)]
    kept = endpoint(5)
    events, result = diff(view(*gone, kept), view(kept))
    assert len(events) == len(gone)
    assert set(events) == {Removed(i.id()) for i in gone}
    assert result == view(kept)


def test_diff_of_a_mixed_snapshot():
    same, gone, new = endpoint(1), endpoint(2), endpoint(3)
    before, after = tainted("a"), tainted("b")
    events, result = diff(view(same, gone, before), view(same, after, new))
    assert len(events) == 3
    assert set(events) == {ModelTaintsUpdated(after.id(), ("b",)), Added(new), Removed(gone.id())}
    assert result == view(same, after, new)
