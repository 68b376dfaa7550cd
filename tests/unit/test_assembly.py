"""The readers' fast path (discovery_sync.assembly): a record whose values the classes' checks
accept at a glance is built without them; anything else goes through the class, whose checks
refuse it with a ValidationError or accept it as before."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

import discovery_sync as ds

ENDPOINT = {
    "type": "Endpoint",
    "component": "backend",
    "endpoint": "generate",
    "namespace": "ns",
    "instance_id": 7,
    "transport": {"tcp": "127.0.0.1:9/generate"},
}
MODEL = {
    "type": "Model",
    "namespace": "ns",
    "component": "backend",
    "endpoint": "generate",
    "instance_id": 7,
    "card_json": {"display_name": "m"},
}


def _the_same_through_init(instance: ds.DiscoveryInstance) -> None:
    rebuilt = dataclasses.replace(instance)  # __init__ and __post_init__, every check
    assert rebuilt == instance
    assert rebuilt.id() == instance.id()
    assert hash(rebuilt.id()) == hash(instance.id())
    assert repr(rebuilt) == repr(instance)
    assert pickle.loads(pickle.dumps(instance)) == instance
    assert pickle.loads(pickle.dumps(instance.id())) == instance.id()
    with pytest.raises(dataclasses.FrozenInstanceError):
        instance.namespace = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"request_plane_codec": "msgpack"},
        {"request_plane_codec": "json"},
        {"device_type": {"cuda": 0}},
        {"transport": {"http": "http://127.0.0.1:9/x"}},
        {"transport": {"newer_kind": {"any": ["json"]}}},  # an unknown tag keeps any value
        {"namespace": "ns-é"},  # not ASCII: the class's own checks accept it
        {"instance_id": 2**64 - 1},
        {"instance_id": 0},
        {"endpoint": "e" * 255},
    ],
)
def test_an_endpoint_read_is_the_one_its_class_builds(changes: dict[str, Any]) -> None:
    instance = ds.instance_from_dict({**ENDPOINT, **changes})
    assert isinstance(instance, ds.Endpoint)
    _the_same_through_init(instance)
    assert isinstance(instance.transport, ds.Transport)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"model_suffix": "lora-1"},
        {"model_suffix": ""},  # the path omits an empty suffix, so the identity does too
        {"card_json": {}},
        {"component": "ç"},
    ],
)
def test_a_model_card_read_is_the_one_its_class_builds(changes: dict[str, Any]) -> None:
    instance = ds.instance_from_dict({**MODEL, **changes})
    assert isinstance(instance, ds.Model)
    _the_same_through_init(instance)


@pytest.mark.parametrize(
    ("record", "changes", "message"),
    [
        (ENDPOINT, {"instance_id": True}, "instance_id must be an integer"),
        (ENDPOINT, {"instance_id": 2**64}, "out of range"),
        (ENDPOINT, {"instance_id": -1}, "out of range"),
        (ENDPOINT, {"instance_id": 1.0}, "instance_id must be an integer"),
        (ENDPOINT, {"namespace": "a/b"}, "must not contain '/'"),
        (ENDPOINT, {"component": ""}, "must not be empty"),
        (ENDPOINT, {"endpoint": "e" * 256}, "at most 255"),
        (ENDPOINT, {"endpoint": 5}, "endpoint must be a string"),
        (ENDPOINT, {"request_plane_codec": "yaml"}, "request_plane_codec 'yaml' is not valid"),
        (ENDPOINT, {"request_plane_codec": ["json"]}, "request_plane_codec"),
        (ENDPOINT, {"transport": {"tcp": 5}}, "tcp transport address must be a string"),
        (ENDPOINT, {"transport": {"": "x"}}, "transport kind must be a non-empty string"),
        (ENDPOINT, {"transport": {"tcp": "a", "http": "b"}}, "exactly one tag"),
        (MODEL, {"card_json": ["not", "an", "object"]}, "card_json must be a JSON object"),
        (MODEL, {"model_suffix": 3}, "model_suffix must be a string"),
        (MODEL, {"namespace": "a/b"}, "must not contain '/'"),
        (MODEL, {"instance_id": False}, "instance_id must be an integer"),
    ],
)
def test_what_the_checks_refuse_is_refused_on_the_fast_path_too(
    record: dict[str, Any], changes: dict[str, Any], message: str
) -> None:
    cls = ds.Endpoint if record is ENDPOINT else ds.Model
    with pytest.raises(ds.ValidationError, match=message):  # from_dict: no storability test first
        cls.from_dict({**record, **changes})
