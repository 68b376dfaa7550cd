"""Registration lifecycle, event sources and channels, shutdown, bad input."""

from __future__ import annotations

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, ids, initial_state, model_spec, next_event

SCOPE = ds.EventScope.for_component("ns", "backend")


def test_registered_records_carry_the_client_instance_id(rig):
    client = rig.client()
    endpoint = client.register(endpoint_spec())
    channel = client.register(ds.EventChannelSpec(SCOPE, "kv-events", ds.NatsTransport("namespace.ns")))
    assert endpoint.instance_id == channel.instance_id == client.instance_id
    assert 0 <= client.instance_id < 2**64
    assert rig.client().instance_id != client.instance_id
    assert set(client.owned()) == {endpoint, channel}


def test_create_if_absent_keeps_the_stored_endpoint(rig):
    client = rig.client()
    stored = client.register(endpoint_spec(port=1))
    assert client.register(endpoint_spec(port=2)) == stored
    assert client.list(ds.Query.endpoints()) == [stored]


def test_event_sources_are_immutable(rig):
    first, second = rig.client(), rig.client()
    spec = ds.EventSourceSpec(SCOPE, "kv-events", 2**53 - 1, {"worker": "a"})
    stored = first.register(spec)
    assert second.register(spec) == stored  # the same descriptor again is fine
    with pytest.raises(ds.ConflictError, match="cannot change its descriptor"):
        second.register(ds.EventSourceSpec(SCOPE, "kv-events", 2**53 - 1, {"worker": "b"}))
    assert first.list(ds.Query.event_sources()) == [stored]
    another = second.register(ds.EventSourceSpec(SCOPE, "kv-events", 5, {"worker": "b"}))
    assert ids(first.list(ds.Query.event_sources(SCOPE, "kv-events"))) == {stored.id(), another.id()}


def test_unregister_needs_ownership(rig):
    owner, other = rig.client(), rig.client()
    endpoint = owner.register(endpoint_spec())
    with pytest.raises(ds.NotFoundError):
        other.unregister(endpoint)
    owner.unregister(endpoint.id())
    with pytest.raises(ds.NotFoundError):
        owner.unregister(endpoint)
    assert other.list(ds.Query.endpoints()) == []


def test_shutdown_removes_owned_records_at_once_and_closes_watches(rig):
    owner, watcher = rig.client(), rig.client()
    keep = watcher.register(endpoint_spec(endpoint="watcher"))
    records = [owner.register(endpoint_spec()), owner.register(model_spec())]
    with watcher.list_and_watch(ds.Query.endpoints()) as endpoints, watcher.list_and_watch(ds.Query.models()) as models:
        initial_state(endpoints)
        initial_state(models)
        own_watch = owner.list_and_watch(ds.Query.endpoints())
        owner.shutdown()
        owner.shutdown()  # idempotent
        assert next_event(endpoints, rig.event_timeout) == ds.Removed(records[0].id())
        assert next_event(models, rig.event_timeout) == ds.Removed(records[1].id())
        assert watcher.list(ds.Query.endpoints()) == [keep]
        assert watcher.list(ds.Query.models()) == []
    assert own_watch.closed
    with pytest.raises(ds.WatchClosed):
        own_watch.get(timeout=1)
    with pytest.raises(ds.ClientClosed):
        owner.register(endpoint_spec())
    with pytest.raises(ds.ClientClosed):
        owner.list(ds.Query.endpoints())


def test_check_connection(rig):
    client = rig.client()
    client.check_connection()
    assert client.list(ds.Query.endpoints()) == []


@pytest.mark.parametrize(
    "bad",
    [
        lambda: endpoint_spec(namespace=""),
        lambda: endpoint_spec(component="a/b"),
        lambda: endpoint_spec(endpoint="x" * 300),
        lambda: ds.EventSourceSpec(SCOPE, "kv", 2**64, {}),
        lambda: ds.EventSourceSpec(SCOPE, "kv", -1, {}),
        lambda: ds.ModelSpec("ns", "backend", "generate", ["not", "an", "object"]),
        lambda: ds.ModelSpec("ns", "backend", "generate", {"display_name": 7}),
        lambda: ds.EventChannelSpec(SCOPE, "", ds.NatsTransport("x")),
    ],
)
def test_bad_input_raises_our_error_and_leaves_the_store_unchanged(rig, bad):
    client = rig.client()
    stored = client.register(endpoint_spec())
    with pytest.raises(ds.ValidationError):
        client.register(bad())
    assert client.list(ds.Query.endpoints()) == [stored]
    assert client.list(ds.Query.models()) == []
    assert client.list(ds.Query.event_sources()) == []


def test_bad_calls_raise_our_errors(rig):
    client = rig.client()
    with pytest.raises(ds.ValidationError, match="Query"):
        client.list("endpoints")
    with pytest.raises(ds.ValidationError, match="unknown query kind"):
        ds.Query.from_dict({"kind": "pods"})
    with pytest.raises(ds.ValidationError, match="register"):
        client.register({"type": "Endpoint"})
    with pytest.raises(ds.ValidationError):
        client.list_and_watch(None)


def test_status_says_the_common_things_on_every_backend(rig):
    client = rig.client()
    assert client.status()["records"] == 0
    client.register(endpoint_spec())
    status = client.status()
    assert status["backend"] == client.backend_name and status["backend"]
    assert (status["read_only"], status["closed"], status["records"], status["replaced"]) == (False, False, 1, None)
    assert status["logical_instance_id"] is None
    client.shutdown()
    assert client.status()["closed"] is True and client.status()["records"] == 0
