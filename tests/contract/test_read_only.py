"""Read-only clients (``read_only=True``): they read and watch like any client and never write."""

from __future__ import annotations

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, initial_state, model_spec, next_event

SCOPE = ds.EventScope.for_component("ns", "backend")


def test_a_read_only_client_lists_gets_and_watches_what_others_register(rig):
    writer, reader = rig.client(), rig.reader()
    assert reader.read_only and not writer.read_only
    endpoint = writer.register(endpoint_spec())
    assert reader.list(ds.Query.endpoints()) == [endpoint]
    assert reader.get(endpoint.id()) == endpoint
    assert reader.get(ds.id_from_key(f"{endpoint.kind.bucket}/{endpoint.id().to_path()}")) == endpoint
    with reader.list_and_watch(ds.Query.models()) as watch:
        initial_state(watch)
        model = writer.register(model_spec())
        assert next_event(watch, timeout=rig.event_timeout) == ds.Added(model)
        writer.unregister(model)
        assert next_event(watch, timeout=rig.event_timeout) == ds.Removed(model.id())
    assert reader.get(model.id()) is None


def test_a_read_only_client_refuses_every_write_and_writes_nothing(rig):
    writer, reader = rig.client(), rig.reader()
    endpoint = writer.register(endpoint_spec())
    writes = [
        lambda: reader.register(endpoint_spec(endpoint="other")),
        lambda: reader.register(ds.EventChannelSpec(SCOPE, "kv-events", ds.NatsTransport("namespace.ns"))),
        lambda: reader.unregister(endpoint),
        lambda: reader.update_model_taints(
            ds.ModelCardInstanceId("ns", "backend", "generate", reader.instance_id), ["a"]
        ),
        lambda: reader.lease_endpoint(endpoint_spec(endpoint="leased")),
        lambda: reader.collect_garbage(),
    ]
    for write in writes:
        with pytest.raises(ds.ValidationError, match="read-only"):
            write()
    assert reader.owned() == ()
    assert reader.collect_garbage(dry_run=True) == []
    reader.shutdown()
    assert writer.list(ds.Query.endpoints()) == [endpoint]
    assert writer.list(ds.Query.event_channels()) == []


def test_get_takes_an_instance_id_only(rig):
    client = rig.client()
    for wrong in ("v1/instances/ns/backend/generate/2a", 42, None):
        with pytest.raises(ds.ValidationError, match="get\\(\\) takes an instance id"):
            client.get(wrong)
    assert client.get(ds.EndpointInstanceId("ns", "backend", "generate", 0x2A)) is None
