"""The startup contract of list_and_watch, on every backend."""

from __future__ import annotations

import discovery_sync as ds
from testrigs.helpers import assert_quiet, endpoint_spec, ids, initial_state, model_spec, next_event


def test_empty_watch_yields_one_empty_resync_then_nothing(rig):
    watcher = rig.client()
    with watcher.list_and_watch(ds.Query.endpoints()) as watch:
        assert next_event(watch, rig.event_timeout) == ds.Resync(())
        assert_quiet(watch, rig.quiet_period)


def test_populated_watch_yields_added_then_resync_of_the_prior_state(rig):
    writer, watcher = rig.client(), rig.client()
    first = writer.register(endpoint_spec(endpoint="a"))
    second = writer.register(endpoint_spec(endpoint="b"))
    with watcher.list_and_watch(ds.Query.endpoints("ns")) as watch:
        added, resync = initial_state(watch)
        assert [type(e) for e in added] == [ds.Added, ds.Added]
        assert {e.instance for e in added} == {first, second}
        assert set(resync.instances) == {first, second}
        assert_quiet(watch, rig.quiet_period)


def test_changes_right_after_the_watch_is_established_arrive_after_the_resync(rig):
    writer, watcher = rig.client(), rig.client()
    model = writer.register(model_spec())
    stale = writer.register(endpoint_spec(endpoint="stale"))
    with watcher.list_and_watch(ds.Query.models()) as models, watcher.list_and_watch(ds.Query.endpoints()) as endpoints:
        # made immediately after list_and_watch returned: none may be lost or come before the Resync
        fresh = writer.register(endpoint_spec(endpoint="fresh"))
        writer.update_model_taints(model.id(), ["gpu=a100"])
        writer.unregister(stale)
        added, resync = initial_state(models)
        assert [e.instance for e in added] == [model]
        assert resync.instances == (model,)
        assert next_event(models, rig.event_timeout) == ds.ModelTaintsUpdated(model.id(), ("gpu=a100",))
        added, resync = initial_state(endpoints)
        assert resync.instances == (stale,)
        # two keys changed: each change arrives, in an order the store may choose
        changes = {next_event(endpoints, rig.event_timeout) for _ in range(2)}
        assert changes == {ds.Added(fresh), ds.Removed(stale.id())}
        writer.unregister(model)
        assert next_event(models, rig.event_timeout) == ds.Removed(model.id())


def test_watch_reports_every_change_of_other_clients(rig):
    writer, watcher = rig.client(), rig.client()
    with watcher.list_and_watch(ds.Query.endpoints()) as watch:
        assert next_event(watch, rig.event_timeout) == ds.Resync(())
        registered = [writer.register(endpoint_spec(endpoint=f"ep{i}")) for i in range(5)]
        # the file store has no global order across files (a poll sees a batch at once)
        assert {next_event(watch, rig.event_timeout) for _ in registered} == {ds.Added(e) for e in registered}
        for endpoint in registered:
            writer.unregister(endpoint)
        assert {next_event(watch, rig.event_timeout) for _ in registered} == {ds.Removed(e.id()) for e in registered}
        assert_quiet(watch, rig.quiet_period)


def test_two_watches_of_one_client_are_independent(rig):
    writer, watcher = rig.client(), rig.client()
    models = watcher.list_and_watch(ds.Query.models())
    endpoints = watcher.list_and_watch(ds.Query.endpoints())
    assert next_event(models, rig.event_timeout) == ds.Resync(())
    assert next_event(endpoints, rig.event_timeout) == ds.Resync(())
    endpoint = writer.register(endpoint_spec())
    assert next_event(endpoints, rig.event_timeout) == ds.Added(endpoint)
    models.close()
    assert models.closed
    model = writer.register(model_spec())
    assert ids(watcher.list(ds.Query.models())) == {model.id()}
    assert_quiet(endpoints, rig.quiet_period)
    endpoints.close()
