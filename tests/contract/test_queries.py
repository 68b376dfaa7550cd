"""Every query scope selects exactly its records, in list and in list_and_watch."""

from __future__ import annotations

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, ids, initial_state, model_spec

LAYOUT = [
    ("ns", "backend", "generate"),
    ("ns", "backend", "embed"),
    ("ns", "prefill", "generate"),
    ("other", "backend", "generate"),
]


@pytest.fixture
def populated(rig):
    writer = rig.client()
    endpoints = [writer.register(endpoint_spec(*where)) for where in LAYOUT]
    models = [writer.register(model_spec("m", *where)) for where in LAYOUT]
    return rig.client(), endpoints, models


SCOPES = [
    ({}, LAYOUT),
    ({"namespace": "ns"}, LAYOUT[:3]),
    ({"namespace": "ns", "component": "backend"}, LAYOUT[:2]),
    ({"namespace": "ns", "component": "backend", "endpoint": "generate"}, LAYOUT[:1]),
    ({"namespace": "ns", "component": "back"}, []),  # a prefix of a name is not a match
    ({"namespace": "missing"}, []),
]


@pytest.mark.parametrize(("scope", "expected"), SCOPES)
def test_endpoint_and_model_scopes(populated, scope, expected):
    reader, endpoints, models = populated
    for query, records in ((ds.Query.endpoints(**scope), endpoints), (ds.Query.models(**scope), models)):
        wanted = {r.id() for r in records if (r.namespace, r.component, r.endpoint) in expected}
        assert ids(reader.list(query)) == wanted
        with reader.list_and_watch(query) as watch:
            added, resync = initial_state(watch)
            assert {e.instance.id() for e in added} == wanted == ids(resync.instances)


def test_event_channel_queries_match_scope_exactly_and_topic(rig):
    writer, reader = rig.client(), rig.client()
    namespace = ds.EventScope.for_namespace("ns")
    component = ds.EventScope.for_component("ns", "backend")
    endpoint = ds.EventScope.for_endpoint(ds.EndpointId("ns", "backend", "generate"))
    transport = ds.ZmqTransport("tcp://127.0.0.1:5557")
    channels = {
        (scope, topic): writer.register(ds.EventChannelSpec(scope, topic, transport))
        for scope in (namespace, component, endpoint)
        for topic in ("kv-events", "kv.metrics")
    }
    assert ids(reader.list(ds.Query.event_channels())) == ids(channels.values())
    for scope in (namespace, component, endpoint):
        wanted = {c.id() for (s, _), c in channels.items() if s == scope}
        assert ids(reader.list(ds.Query.event_channels(scope))) == wanted
        exact = ds.Query.event_channels(scope, "kv.metrics")
        assert ids(reader.list(exact)) == {channels[(scope, "kv.metrics")].id()}
    by_topic = {c.id() for (_, t), c in channels.items() if t == "kv-events"}
    assert ids(reader.list(ds.Query.event_channels(topic="kv-events"))) == by_topic
    listed = reader.list(ds.Query.event_channels(component, "kv-events"))
    assert listed == [channels[(component, "kv-events")]]
    assert listed[0].transport.address() == "tcp://127.0.0.1:5557"
    with reader.list_and_watch(ds.Query.event_channels(namespace)) as watch:
        _, resync = initial_state(watch)
        assert ids(resync.instances) == {c.id() for (s, _), c in channels.items() if s == namespace}


def test_kinds_never_mix(rig):
    writer = rig.client()
    writer.register(endpoint_spec())
    writer.register(ds.EventSourceSpec(ds.EventScope.for_namespace("ns"), "kv-events", 7, {"role": "x"}))
    assert writer.list(ds.Query.models()) == []
    assert writer.list(ds.Query.event_channels()) == []
    assert [s.publisher_id for s in writer.list(ds.Query.event_sources())] == [7]
