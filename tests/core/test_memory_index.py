"""The memory backend's index: list() and a watch's start read only the records a query can match
(the endpoint's, or the event topic's), yet return exactly what filtering every record would."""

from __future__ import annotations

import itertools

from discovery_sync.backends.memory import named_registry
from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from tests.fuzz.strategies import FUZZ

NAMES = ("a", "b")
SCOPES = (ds.EventScope.for_namespace("a"), ds.EventScope.for_component("a", "b"))
_registry_names = itertools.count()


def _spec(kind: str, first: str, second: str, third: str) -> ds.DiscoverySpec:
    if kind == "endpoint":
        return ds.EndpointSpec(first, second, third, ds.Transport.tcp("127.0.0.1:1"))
    if kind == "model":
        return ds.ModelSpec(first, second, third, {"display_name": "m"}, model_suffix=None)
    scope = SCOPES[NAMES.index(first)]
    if kind == "event_channel":
        return ds.EventChannelSpec(scope, third, ds.ZmqTransport("tcp://127.0.0.1:1"))
    return ds.EventSourceSpec(scope, third, NAMES.index(second) + 1)


def _queries() -> list[ds.Query]:
    queries = [ds.Query.endpoints(), ds.Query.models(), ds.Query.event_channels(), ds.Query.event_sources()]
    for names in itertools.product(NAMES, repeat=3):
        queries += [ds.Query.endpoints(*names), ds.Query.models(*names), ds.Query.endpoints(*names[:2])]
    for scope, topic in itertools.product(SCOPES, NAMES):
        queries += [ds.Query.event_channels(scope, topic), ds.Query.event_sources(scope, topic)]
        queries += [ds.Query.event_channels(scope), ds.Query.event_sources(topic=topic)]
    return queries


Step = tuple[str, str, str, str, bool]
operations = st.lists(
    st.tuples(
        st.sampled_from(["endpoint", "model", "event_channel", "event_source"]),
        st.sampled_from(NAMES),
        st.sampled_from(NAMES),
        st.sampled_from(NAMES),
        st.booleans(),  # register (True) or unregister what this spec registered
    ),
    max_size=30,
)


@FUZZ
@given(operations)
def test_indexed_lists_and_watches_match_a_filter_over_every_record(steps: list[Step]) -> None:
    name = f"index-{next(_registry_names)}"
    registered: dict[tuple[str, str, str, str], ds.DiscoveryInstance] = {}
    with ds.connect(f"memory://{name}") as client:
        for kind, first, second, third, add in steps:
            # an event channel's identity has no second name
            key = (kind, first, "a" if kind == "event_channel" else second, third)
            if add and key not in registered:
                registered[key] = client.register(_spec(*key))
            elif not add and key in registered:
                client.unregister(registered.pop(key))
        everything = list(registered.values())
        for query in _queries():
            expected = sorted((i for i in everything if query.matches(i)), key=lambda i: i.id().to_path())
            assert client.list(query) == expected, query
            with client.list_and_watch(query) as watch:
                first_event = watch.get(timeout=5)
                while not isinstance(first_event, ds.Resync):
                    first_event = watch.get(timeout=5)
                assert list(first_event.instances) == expected, query
        for instance in everything:
            client.unregister(instance)
    registry = named_registry(name)
    assert len(registry) == 0
    assert not registry._by_group, "an emptied endpoint or topic stays in the index"
