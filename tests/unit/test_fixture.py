"""The stored v1.2 Kubernetes document in tests/fixtures must still be readable (docs/design.md §2)."""

from pathlib import Path

import orjson
import pytest

from discovery_sync import (
    Endpoint,
    EventChannel,
    EventScope,
    Model,
    NatsTransport,
    Transport,
    instance_from_dict,
    instance_from_json,
)

FIXTURE = "legacy_v1_2_worker_metadata.json"
SECTIONS = {"endpoints": Endpoint, "model_cards": Model, "event_channels": EventChannel}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # where it comes from: tests/fixtures/README.md


def fixture_data() -> dict:
    return orjson.loads((FIXTURES / FIXTURE).read_bytes())["spec"]["data"]


def section(name: str) -> list:
    """The parsed instances of one section of ``spec.data``."""
    return [instance_from_dict(value) for value in fixture_data()[name].values()]


@pytest.mark.parametrize(("name", "cls"), SECTIONS.items())
def test_every_value_parses_as_its_kind(name, cls):
    values = fixture_data()[name]
    assert values
    for value in values.values():
        assert isinstance(instance_from_dict(value), cls)
        assert instance_from_json(orjson.dumps(value)) == instance_from_dict(value)


def test_endpoint():
    (instance,) = section("endpoints")
    assert instance.instance_id == 42
    assert instance.transport == Transport.nats_tcp("dynamo.backend.generate")
    assert instance.request_plane_codec is None
    assert instance.id().to_path() == "dynamo/backend/generate/2a"


def test_model_has_no_suffix():
    (instance,) = section("model_cards")
    assert instance.model_suffix is None
    assert instance.card_json == {"display_name": "Qwen/Qwen3-0.6B"}
    assert "model_suffix" not in instance.to_dict()
    assert instance.id().to_path() == "dynamo/backend/generate/2a"


def test_legacy_event_channels_get_scopes_and_nats_transports():
    channels = {channel.topic: channel for channel in section("event_channels")}
    assert set(channels) == {"kv-events", "kv_metrics"}

    kv_events, kv_metrics = channels["kv-events"], channels["kv_metrics"]
    assert kv_events.scope == EventScope.for_component("dynamo", "backend")
    assert kv_events.transport == NatsTransport("namespace.dynamo.component.backend")
    assert kv_metrics.scope == EventScope.for_namespace("dynamo")
    assert kv_metrics.scope.component is None
    assert kv_metrics.transport == NatsTransport("namespace.dynamo")
    assert all(channel.instance_id == 42 for channel in channels.values())


def test_legacy_event_channels_are_written_in_the_current_shape():
    written = sorted((channel.to_dict() for channel in section("event_channels")), key=lambda d: d["topic"])
    assert [d["scope"] for d in written] == [
        {"kind": "component", "namespace": "dynamo", "component": "backend"},
        {"kind": "namespace", "name": "dynamo"},
    ]
    assert all("namespace" not in d and "component" not in d for d in written)
