"""What the CLI parses from its users (``spec_from_dict``, ``Query.from_dict``) and the
constructors a program calls: a valid value or a ValidationError, whatever the input."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

import discovery_sync as ds
from tests.fuzz.strategies import (
    FUZZ,
    VALID_RECORDS,
    any_values,
    instances,
    json_values,
    mutated_records,
    names,
    only_discovery_errors,
    plain_names,
    scopes,
)

#: the kinds whose spec is the record without instance_id (event sources keep publisher_id)
TAKES_CLIENT_ID = ("Endpoint", "Model", "EventChannel")


def spec_dict(instance: ds.DiscoveryInstance) -> dict[str, Any]:
    """The CLI's spec of ``instance``: its record without ``instance_id`` where the client fills it in."""
    data = orjson.loads(ds.instance_to_json(instance))
    if data["type"] in TAKES_CLIENT_ID:
        del data["instance_id"]
    return data


valid_spec_dicts = instances.map(spec_dict) | st.sampled_from(
    [spec_dict(ds.instance_from_dict(record)) for record in VALID_RECORDS]
)


# -- spec_from_dict -----------------------------------------------------------------------------------
@FUZZ
@given(instances)
def test_spec_from_dict_of_a_record_gives_its_spec_back(instance):
    spec = ds.spec_from_dict(spec_dict(instance))
    assert spec.to_instance(instance.instance_id) == instance


@FUZZ
@given(mutated_records(valid_spec_dicts) | json_values | any_values)
def test_spec_from_dict_of_anything(data):
    spec = only_discovery_errors(ds.spec_from_dict, data)
    if spec is not None:
        assert ds.spec_from_dict(spec_dict(spec.to_instance(7))) == spec


# -- Query.from_dict ----------------------------------------------------------------------------------
QUERY_KINDS = ["endpoints", "models", "event_channels", "event_sources"]
query_fields = st.fixed_dictionaries(
    {"kind": st.sampled_from([*QUERY_KINDS, "endpoint", "", "Endpoints"])},
    optional={
        "namespace": plain_names | any_values,
        "component": plain_names | any_values,
        "endpoint": plain_names | any_values,
        "scope": scopes.map(lambda scope: scope.to_dict()) | json_values,
        "topic": names | any_values,
        "extra": json_values,
    },
)


@FUZZ
@given(query_fields | json_values | any_values)
def test_query_from_dict_of_anything(data):
    query = only_discovery_errors(ds.Query.from_dict, data)
    if query is not None:
        assert query.kind_name == data["kind"]
        assert query.key_prefix().startswith(query.kind.bucket + "/")
        str(query)
        hash(query)


@FUZZ
@given(st.sampled_from([None, *QUERY_KINDS]), plain_names, plain_names, plain_names, scopes, names)
def test_valid_queries_parse_to_what_they_say(kind, namespace, component, endpoint, scope, topic):
    if kind in ("endpoints", "models"):
        data = {"kind": kind, "namespace": namespace, "component": component, "endpoint": endpoint}
    else:
        data = {"kind": kind or "event_sources", "scope": scope.to_dict(), "topic": topic}
    query = ds.Query.from_dict(data)
    for key, value in data.items():
        if key != "kind":
            assert getattr(query, key) == (ds.EventScope.from_dict(value) if key == "scope" else value)


# -- constructors a program calls ---------------------------------------------------------------------
@FUZZ
@given(st.data())
def test_public_constructors_take_any_values(data):
    builders = [
        (ds.EndpointId, 3),
        (ds.EventScope, 3),
        (ds.EndpointId.parse, 1),
        (ds.Transport, 2),
        (ds.NatsTransport, 1),
        (ds.ZmqTransport, 1),
        (ds.ZmqBrokerTransport, 2),
        (ds.EndpointInstanceId, 4),
        (ds.ModelCardInstanceId, 5),
        (ds.EventChannelInstanceId, 3),
        (ds.EventSourceInstanceId, 3),
        (ds.Endpoint, 7),
        (ds.Model, 6),
        (ds.EventChannel, 4),
        (ds.EventSource, 4),
        (ds.Query.endpoints, 3),
        (ds.Query.models, 3),
        (ds.Query.event_channels, 2),
        (ds.Query.event_sources, 2),
    ]
    build, arity = data.draw(st.sampled_from(builders))
    built = only_discovery_errors(build, *(data.draw(any_values | scopes) for _ in range(arity)))
    if built is not None:
        repr(built)
