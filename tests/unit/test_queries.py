"""Queries: constructors, matching and store-key prefixes (docs/design.md §2 "Queries", §3)."""

import pytest

from discovery_sync import EventScope, Query, RecordKind, ValidationError
from tests.unit.helpers import (
    COMPONENT_SCOPE,
    ENDPOINT_SCOPE,
    NAMESPACE_SCOPE,
    SCOPES,
    endpoint,
    event_channel,
    event_source,
    model,
)

# Records at different coordinates: the same instance id everywhere, so only the coordinates differ.
COORDINATES = {
    "ns/comp/ep": ("ns", "comp", "ep"),
    "ns/comp/other": ("ns", "comp", "other"),
    "ns/comp2/ep": ("ns", "comp2", "ep"),
    "ns2/comp/ep": ("ns2", "comp", "ep"),
}


def key_of(instance) -> str:
    return f"{instance.kind.bucket}/{instance.id().to_path()}"


def matching(query, records: dict) -> set[str]:
    return {label for label, record in records.items() if query.matches(record)}


def at(build, coordinates):
    namespace, component, name = coordinates
    return build(namespace=namespace, component=component, name=name)


EVENT_KINDS = [(Query.event_channels, event_channel), (Query.event_sources, event_source)]

SCOPED_QUERIES = [
    pytest.param((), {"ns/comp/ep", "ns/comp/other", "ns/comp2/ep", "ns2/comp/ep"}, id="all"),
    pytest.param(("ns",), {"ns/comp/ep", "ns/comp/other", "ns/comp2/ep"}, id="namespace"),
    pytest.param(("ns", "comp"), {"ns/comp/ep", "ns/comp/other"}, id="component"),
    pytest.param(("ns", "comp", "ep"), {"ns/comp/ep"}, id="endpoint"),
]


@pytest.mark.parametrize(("make_query", "build"), [(Query.endpoints, endpoint), (Query.models, model)])
@pytest.mark.parametrize(("args", "expected"), SCOPED_QUERIES)
def test_endpoint_and_model_queries_match_by_scope(make_query, build, args, expected):
    records = {label: at(build, coords) for label, coords in COORDINATES.items()}
    query = make_query(*args)
    assert matching(query, records) == expected


@pytest.mark.parametrize(("make_query", "build"), [(Query.endpoints, endpoint), (Query.models, model)])
@pytest.mark.parametrize(("args", "expected"), SCOPED_QUERIES)
def test_key_prefix_selects_exactly_the_matching_keys(make_query, build, args, expected):
    records = {label: at(build, coords) for label, coords in COORDINATES.items()}
    prefix = make_query(*args).key_prefix()
    assert {label for label, record in records.items() if key_of(record).startswith(prefix)} == expected


def test_constructors_fill_the_fields():
    assert Query.endpoints() == Query(RecordKind.ENDPOINT)
    assert Query.models("ns", "comp", "ep") == Query(RecordKind.MODEL, "ns", "comp", "ep")
    assert Query.event_channels(COMPONENT_SCOPE, "kv") == Query(
        RecordKind.EVENT_CHANNEL, scope=COMPONENT_SCOPE, topic="kv"
    )
    assert Query.event_sources().kind is RecordKind.EVENT_SOURCE


@pytest.mark.parametrize(
    "make",
    [
        lambda: Query.endpoints(component="comp"),
        lambda: Query.endpoints("ns", endpoint="ep"),
        lambda: Query.models(None, None, "ep"),
        lambda: Query.endpoints("a/b"),
        lambda: Query.models("ns", ""),
        lambda: Query.endpoints(5),
        lambda: Query.event_channels(topic=""),
        lambda: Query.event_sources(scope="ns"),
        lambda: Query(RecordKind.ENDPOINT, topic="kv"),
        lambda: Query(RecordKind.EVENT_CHANNEL, namespace="ns"),
        lambda: Query("endpoints"),
    ],
)
def test_invalid_queries_are_refused(make):
    with pytest.raises(ValidationError):
        make()


@pytest.mark.parametrize("make_query", [Query.endpoints, Query.models])
def test_queries_never_match_another_kind(make_query):
    query = make_query("ns", "comp", "ep")
    others = [endpoint(), model(), event_channel(), event_source()]
    assert [record.kind for record in others if query.matches(record)] == [query.kind]


def test_event_queries_do_not_match_each_others_kind():
    assert not Query.event_channels().matches(event_source())
    assert not Query.event_sources().matches(event_channel())
    assert not Query.event_channels(NAMESPACE_SCOPE).matches(endpoint())


@pytest.mark.parametrize(("make_query", "build"), EVENT_KINDS)
def test_event_scopes_are_exact(make_query, build):
    records = {scope.kind: build(scope=scope) for scope in SCOPES}
    for scope in SCOPES:
        assert matching(make_query(scope), records) == {scope.kind}
    assert matching(make_query(), records) == {"namespace", "component", "endpoint"}


@pytest.mark.parametrize(("make_query", "build"), EVENT_KINDS)
def test_event_queries_filter_by_topic(make_query, build):
    records = {
        "comp/kv": build(scope=COMPONENT_SCOPE, topic="kv"),
        "comp/metrics": build(scope=COMPONENT_SCOPE, topic="metrics"),
        "ns/kv": build(scope=NAMESPACE_SCOPE, topic="kv"),
    }
    assert matching(make_query(topic="kv"), records) == {"comp/kv", "ns/kv"}
    assert matching(make_query(COMPONENT_SCOPE, "kv"), records) == {"comp/kv"}
    assert matching(make_query(NAMESPACE_SCOPE, "metrics"), records) == set()
    assert matching(make_query(EventScope.for_namespace("other")), records) == set()


@pytest.mark.parametrize(
    ("query", "prefix"),
    [
        (Query.endpoints(), "v1/instances/"),
        (Query.endpoints("ns"), "v1/instances/ns/"),
        (Query.endpoints("ns", "comp"), "v1/instances/ns/comp/"),
        (Query.endpoints("ns", "comp", "ep"), "v1/instances/ns/comp/ep/"),
        (Query.models(), "v1/mdc/"),
        (Query.models("ns", "comp", "ep"), "v1/mdc/ns/comp/ep/"),
        (Query.event_channels(), "v1/event_channels/"),
        (Query.event_sources(), "v1/event_sources/"),
        (Query.event_channels(topic="kv"), "v1/event_channels/"),
        (Query.event_channels(NAMESPACE_SCOPE), "v1/event_channels/namespace/ns/topic/"),
        (
            Query.event_channels(COMPONENT_SCOPE, "kv-events"),
            "v1/event_channels/namespace/ns/component/comp/topic/kv-events/",
        ),
        (
            Query.event_sources(ENDPOINT_SCOPE, "a.b"),
            "v1/event_sources/namespace/ns/component/comp/endpoint/ep/topic/a%2Eb/",
        ),
    ],
    ids=str,
)
def test_key_prefix_values(query, prefix):
    assert query.key_prefix() == prefix


def test_key_prefix_ends_at_a_path_boundary():
    prefix = Query.endpoints("ns", "comp").key_prefix()
    assert key_of(endpoint(component="comp")).startswith(prefix)
    assert not key_of(endpoint(component="comp2")).startswith(prefix)


@pytest.mark.parametrize(("make_query", "build"), EVENT_KINDS)
def test_event_key_prefix_holds_the_scoped_records_only(make_query, build):
    records = {(scope.kind, topic): build(scope=scope, topic=topic) for scope in SCOPES for topic in ("kv", "kv2")}
    for scope in SCOPES:
        for topic in (None, "kv"):
            query = make_query(scope, topic)
            under_prefix = {label for label, r in records.items() if key_of(r).startswith(query.key_prefix())}
            assert under_prefix == matching(query, records)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "endpoints"}, Query.endpoints()),
        ({"kind": "models", "namespace": "ns", "component": "comp"}, Query.models("ns", "comp")),
        (
            {"kind": "event_channels", "scope": {"kind": "component", "namespace": "ns", "component": "comp"}},
            Query.event_channels(COMPONENT_SCOPE),
        ),
        ({"kind": "event_sources", "topic": "kv"}, Query.event_sources(topic="kv")),
    ],
)
def test_from_dict(data, expected):
    assert Query.from_dict(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"kind": "nodes"},
        {"kind": "endpoint"},
        {"kind": 5},
        ["endpoints"],
        "endpoints",
        {"kind": "endpoints", "colour": "blue"},
        {"kind": "endpoints", "component": "comp"},
        {"kind": "models", "namespace": "ns", "endpoint": "ep"},
        {"kind": "endpoints", "namespace": 5},
        {"kind": "endpoints", "topic": "kv"},
        {"kind": "event_channels", "namespace": "ns"},
        {"kind": "event_sources", "scope": {"kind": "galaxy"}},
        {"kind": "event_sources", "scope": "ns"},
    ],
)
def test_from_dict_refuses_bad_queries(data):
    with pytest.raises(ValidationError):
        Query.from_dict(data)
