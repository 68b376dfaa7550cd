"""Metrics on every backend (issue 29), read the way Prometheus reads them: the registry's text
output, parsed by prometheus_client's own parser, against what the test did and received."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import discovery_sync as ds
import discovery_sync.metrics as metrics
from testrigs.helpers import endpoint_spec, initial_state
from testrigs.waiting import wait_until

KIND_OF = {ds.Added: "added", ds.Removed: "removed", ds.ModelTaintsUpdated: "model_taints_updated", ds.Resync: "resync"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(registry: CollectorRegistry, client: ds.Discovery) -> Samples:
    """The samples of ``client`` (by its worker_id) in the registry's output: (name, other labels) -> value."""
    worker_id = client.metrics()["worker_id"]
    samples: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode("utf-8")):
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("worker_id") == worker_id:
                assert labels.pop("backend") == client.backend_name
                samples[sample.name, frozenset(labels.items())] = sample.value
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    shown: list[ds.Discovery] = []

    def show(client: ds.Discovery) -> None:
        metrics.register(client, registry)
        shown.append(client)

    registry.show = show  # type: ignore[attr-defined]
    yield registry
    for client in shown:
        metrics.unregister(client, registry)


def _take(watch: ds.Watch, seen: Counter[str], timeout: float, until: type) -> ds.DiscoveryEvent:
    """Take events, counting each by kind, until one of type ``until``."""
    while True:
        event = watch.get(timeout=timeout)
        seen[KIND_OF[type(event)]] += 1
        if isinstance(event, until):
            return event


def test_the_scraped_figures_are_the_events_received_and_the_writes_made(rig, registry):
    writer, watcher = rig.client(), rig.client()
    registry.show(writer)
    registry.show(watcher)
    seen: Counter[str] = Counter()
    with watcher.list_and_watch(ds.Query.endpoints("ns")) as watch:
        initial, resync = initial_state(watch, rig.event_timeout)
        seen.update(KIND_OF[type(event)] for event in [*initial, resync])
        records = [writer.register(endpoint_spec(endpoint=f"e{i}", port=9100 + i)) for i in range(3)]
        for _ in records:
            _take(watch, seen, rig.event_timeout, ds.Added)
        writer.unregister(records[0])
        _take(watch, seen, rig.event_timeout, ds.Removed)
        with pytest.raises(ds.NotFoundError):
            writer.unregister(records[0])
        watched = _scrape(registry, watcher)
        for kind in metrics.EVENT_KINDS:
            assert _value(watched, "dynamo_discovery_watch_events_total", kind=kind) == seen[kind], kind
        assert _value(watched, "dynamo_discovery_open_watches") == 1
        assert _value(watched, "dynamo_discovery_lagging_watches") == 0
        assert _value(watched, "dynamo_discovery_owned_records") == 0
    written = _scrape(registry, writer)
    assert _value(written, "dynamo_discovery_owned_records") == 2
    assert _value(written, "dynamo_discovery_failed_writes_total", operation="unregister", error="NotFoundError") == 1
    assert _value(written, "dynamo_discovery_connection_state", state="connected") == 1
    assert _value(written, "dynamo_discovery_connection_state", state="suspended") == 0
    assert _value(_scrape(registry, watcher), "dynamo_discovery_open_watches") == 0
    assert _value(_scrape(registry, watcher), "dynamo_discovery_watch_events_total", kind="added") == seen["added"]


def test_liveness_rounds_are_measured_where_the_backend_has_them(rig, registry):
    client = rig.client()
    registry.show(client)
    client.register(endpoint_spec())  # an etcd client's lease (and keep-alive thread) starts here
    if rig.name in ("memory", "kube"):  # the others measure file heartbeats or etcd keep-alives
        assert client.metrics()["heartbeat"] is None
        assert not [name for name, _ in _scrape(registry, client) if name.startswith("dynamo_discovery_heartbeat")]
        return
    wait_until(lambda: _heartbeats(client) >= 2, "two liveness rounds", timeout=rig.event_timeout)
    scraped = _scrape(registry, client)
    count = _value(scraped, "dynamo_discovery_heartbeat_duration_seconds_count")
    assert count >= 2
    assert _value(scraped, "dynamo_discovery_heartbeat_duration_seconds_bucket", le="+Inf") == count
    assert _value(scraped, "dynamo_discovery_heartbeat_duration_seconds_sum") > 0


def _heartbeats(client: ds.Discovery) -> int:
    heartbeat = client.metrics()["heartbeat"]
    return 0 if heartbeat is None else heartbeat["count"]


def test_two_clients_share_a_registry_and_leave_it(rig):
    registry = CollectorRegistry()
    first, second = rig.client(), rig.client()
    first.register(endpoint_spec())
    for client in (first, second, first):  # the second registration of a client changes nothing
        metrics.register(client, registry)
    assert _value(_scrape(registry, first), "dynamo_discovery_owned_records") == 1
    assert _value(_scrape(registry, second), "dynamo_discovery_owned_records") == 0
    metrics.unregister(first, registry)
    assert _scrape(registry, first) == {}
    metrics.unregister(second, registry)
    assert generate_latest(registry) == b""
