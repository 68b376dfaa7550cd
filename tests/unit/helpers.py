"""Builders shared by the unit tests: small valid records whose fields can be overridden."""

from __future__ import annotations

from typing import Any

import discovery_sync as ds

NS, COMP, EP = "ns", "comp", "ep"
NAMESPACE_SCOPE = ds.EventScope.for_namespace(NS)
COMPONENT_SCOPE = ds.EventScope.for_component(NS, COMP)
ENDPOINT_SCOPE = ds.EventScope.for_endpoint(ds.EndpointId(NS, COMP, EP))
SCOPES = (NAMESPACE_SCOPE, COMPONENT_SCOPE, ENDPOINT_SCOPE)


def endpoint(
    instance_id: int = 0x2A,
    *,
    namespace: str = NS,
    component: str = COMP,
    name: str = EP,
    transport: ds.Transport | None = None,
    **fields: Any,
) -> ds.Endpoint:
    transport = transport or ds.Transport.tcp("127.0.0.1:9000")
    return ds.Endpoint(namespace, component, name, instance_id, transport, **fields)


def card(
    display_name: str = "Qwen/Qwen3-0.6B",
    *,
    taints: list[str] | None = None,
    runtime_config: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A model card; ``taints`` / ``runtime_config`` fill ``card["runtime_config"]``."""
    result: dict[str, Any] = {"display_name": display_name, **fields}
    config = dict(runtime_config or {})
    if taints is not None:
        config["taints"] = list(taints)
    if runtime_config is not None or taints is not None:
        result["runtime_config"] = config
    return result


def model(
    instance_id: int = 0x2A,
    *,
    card_json: dict[str, Any] | None = None,
    suffix: str | None = None,
    namespace: str = NS,
    component: str = COMP,
    name: str = EP,
) -> ds.Model:
    return ds.Model(namespace, component, name, instance_id, card_json if card_json is not None else card(), suffix)


def event_channel(
    instance_id: int = 0x2A,
    *,
    scope: ds.EventScope = COMPONENT_SCOPE,
    topic: str = "kv-events",
    transport: ds.EventTransport | None = None,
) -> ds.EventChannel:
    return ds.EventChannel(scope, topic, instance_id, transport or ds.NatsTransport("namespace.ns.component.comp"))


def event_source(
    publisher_id: int = 0x2A,
    *,
    scope: ds.EventScope = COMPONENT_SCOPE,
    topic: str = "kv-events",
    metadata: dict[str, Any] | None = None,
) -> ds.EventSource:
    return ds.EventSource(scope, topic, publisher_id, metadata if metadata is not None else {"worker": "w0"})


def json_round_trip(instance: ds.DiscoveryInstance) -> ds.DiscoveryInstance:
    """Serialise ``instance`` to its stored bytes and parse them back."""
    return ds.instance_from_json(ds.instance_to_json(instance))
