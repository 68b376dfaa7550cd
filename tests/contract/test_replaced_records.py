"""A record replaced under the same id (unregister, then register another value): every reader
of every client shows the new value at each quiet moment, and a watch sees ``Removed`` then
``Added`` (a model card changed in more than its taints, an event channel or source), or
``Added`` alone (an endpoint, the reference's replace)."""

from __future__ import annotations

import discovery_sync as ds
from testrigs.helpers import assert_quiet, fold, initial_state, model_spec, next_event

SWAPS = 20  # on the sshfs rig 1: each swap may wait out mount B's 21 s attribute cache
SCOPE = ds.EventScope.for_component("ns", "backend")


def _display_name(card: dict) -> str:  # a live view of models extracts from the card
    return str(card["display_name"])


def _fold_until(watch: ds.Watch, state: dict, expected: dict, timeout: float) -> list[ds.DiscoveryEvent]:
    """Fold events into ``state`` until it is ``expected``; return the events taken."""
    taken: list[ds.DiscoveryEvent] = []
    while state != expected:
        event = next_event(watch, timeout)
        taken.append(event)
        fold(state, event)
    return taken


def test_a_model_card_swapped_under_one_id_is_what_every_reader_shows(rig, thread_log):
    owner, reader = rig.client(), rig.client()
    current = owner.register(model_spec("model-0"))
    assert reader.list(ds.Query.models("ns")) == [current]  # the reader knows (and caches) the old card
    with (
        reader.list_and_watch(ds.Query.models("ns")) as watch,
        reader.live_view(ds.Query.models("ns"), _display_name) as view,
    ):
        _, resync = initial_state(watch, rig.event_timeout)
        state = fold({}, resync)
        swaps = 1 if rig.name == "file-sshfs" else SWAPS
        for swap in range(1, swaps + 1):
            owner.unregister(current)
            previous, current = current, owner.register(model_spec(f"model-{swap}"))
            assert current.id() == previous.id()
            taken = _fold_until(watch, state, {current.id(): current}, rig.event_timeout)
            changes = [event for event in taken if not isinstance(event, ds.Resync)]
            # the delete and the create, seen apart or as one change: Removed, then the new card
            assert changes == [ds.Removed(current.id()), ds.Added(current)], (swap, taken)
            assert reader.list(ds.Query.models("ns")) == [current], swap
            assert reader.get(current.id()) == current, swap
            wanted = {current.instance_id: f"model-{swap}"}
            view.wait_for(lambda values, wanted=wanted: dict(values) == wanted, rig.event_timeout)
        assert_quiet(watch, rig.quiet_period)
        assert reader.list(ds.Query.models()) == [current]
        assert dict(view.snapshot()) == {current.instance_id: f"model-{swaps}"}
    assert not thread_log.matching("model card"), thread_log.messages


def test_a_taint_change_alone_stays_a_taint_update(rig):
    owner, reader = rig.client(), rig.client()
    model = owner.register(model_spec("model-0", taints=["a"]))
    with reader.list_and_watch(ds.Query.models("ns")) as watch:
        initial_state(watch, rig.event_timeout)
        owner.unregister(model)
        retainted = owner.register(model_spec("model-0", taints=["b"]))
        events = [next_event(watch, rig.event_timeout)]
        if isinstance(events[0], ds.Removed):  # the delete seen on its own: then the card comes back
            events.append(next_event(watch, rig.event_timeout))
            assert events == [ds.Removed(model.id()), ds.Added(retainted)]
        else:
            assert events == [ds.ModelTaintsUpdated(model.id(), ("b",))]
        assert reader.list(ds.Query.models("ns")) == [retainted]


def test_an_event_channel_replaced_under_one_id_is_removed_then_added(rig):
    owner, reader = rig.client(), rig.client()
    scope = SCOPE
    first = owner.register(ds.EventChannelSpec(scope, "kv", ds.NatsTransport("namespace.ns.a")))
    with reader.list_and_watch(ds.Query.event_channels(scope)) as watch:
        _, resync = initial_state(watch, rig.event_timeout)
        state = fold({}, resync)
        owner.unregister(first)
        second = owner.register(ds.EventChannelSpec(scope, "kv", ds.NatsTransport("namespace.ns.b")))
        assert second.id() == first.id()
        taken = _fold_until(watch, state, {second.id(): second}, rig.event_timeout)
        assert [e for e in taken if not isinstance(e, ds.Resync)] == [ds.Removed(first.id()), ds.Added(second)]
        assert reader.list(ds.Query.event_channels(scope)) == [second]
        assert reader.get(second.id()) == second
