"""Live views on every backend: a map kept current from a watch, with the reference's rules
for base-model views (LoRA cards never add, replace or remove a worker's entry).

Where a test must show that something did NOT change the view, it makes a later change of
another worker (a barrier) and waits for that: a watch delivers one store's changes in order."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import discovery_sync as ds
from testrigs.helpers import LogCatcher, caught_logs, endpoint_spec


def card_spec(config: int, suffix: str | None = None, endpoint: str = "generate") -> ds.ModelSpec:
    card: dict[str, Any] = {"display_name": suffix or "base-model", "source_path": "base-repo", "runtime_config": {}}
    card["config"] = config
    if suffix:
        card["lora"] = {"name": suffix}
    return ds.ModelSpec("ns", "comp", endpoint, card, suffix)


def config_of(card: dict[str, Any]) -> int:
    return int(card["config"])


def barrier(rig, view: ds.LiveView, worker: ds.Discovery) -> None:
    """Register a base card of ``worker`` and wait until ``view`` shows it."""
    worker.register(card_spec(7))
    view.wait_for(lambda m: m.get(worker.instance_id) == 7, rig.event_timeout)


def test_a_base_model_view_ignores_lora_cards_added_and_removed(rig):
    worker, other, reader = rig.client(), rig.client(), rig.client()
    with reader.live_view(ds.Query.models("ns", "comp", "generate"), config_of, base_models_only=True) as view:
        base = worker.register(card_spec(42))
        lora_a = worker.register(card_spec(100, "adapter-a"))
        worker.register(card_spec(101, "adapter-b"))
        view.wait_for(lambda m: m.get(worker.instance_id) == 42, rig.event_timeout)
        worker.unregister(lora_a)
        barrier(rig, view, other)
        assert view[worker.instance_id] == 42
        worker.unregister(base)
        view.wait_for(lambda m: worker.instance_id not in m, rig.event_timeout)
        assert dict(view) == {other.instance_id: 7}


def test_a_base_model_view_handles_lora_before_base_and_base_removed_first(rig):
    worker, other, reader = rig.client(), rig.client(), rig.client()
    with reader.live_view(ds.Query.models("ns"), config_of, base_models_only=True) as view:
        lora_a = worker.register(card_spec(100, "adapter-a"))
        barrier(rig, view, other)
        assert worker.instance_id not in view
        base = worker.register(card_spec(42))
        worker.register(card_spec(101, "adapter-b"))
        view.wait_for(lambda m: m.get(worker.instance_id) == 42, rig.event_timeout)
        worker.unregister(lora_a)
        worker.unregister(base)  # the LoRA card adapter-b stays
        view.wait_for(lambda m: worker.instance_id not in m, rig.event_timeout)
        assert dict(view) == {other.instance_id: 7}


def test_a_view_without_extract_holds_instances_and_follows_taint_updates(rig):
    worker = reader = rig.client()  # one host: a network mount's cache window is not the point here
    taints = reader.live_view(ds.Query.models("ns"), lambda card: card["runtime_config"].get("taints", []))
    whole = reader.live_view(ds.Query.models("ns"))
    with taints, whole:
        model = worker.register(card_spec(1))
        assert whole.wait_for(lambda m: worker.instance_id in m, rig.event_timeout)[worker.instance_id] == model
        worker.update_model_taints(model.id(), ["gpu=a100"])
        taints.wait_for(lambda m: m.get(worker.instance_id) == ["gpu=a100"], rig.event_timeout)
        updated = whole.wait_for(lambda m: m[worker.instance_id] != model, rig.event_timeout)[worker.instance_id]
        assert updated.card_json["runtime_config"]["taints"] == ["gpu=a100"]


def test_the_view_is_complete_when_it_returns_and_versions_grow_with_changes(rig):
    first, second, reader = rig.client(), rig.client(), rig.client()
    first.register(endpoint_spec(port=1))
    reader.list(ds.Query.endpoints("ns"))  # a reader that sees it (the file backend may lag a notification)
    with reader.live_view(ds.Query.endpoints("ns"), lambda endpoint: endpoint.transport.value) as view:
        assert dict(view) == {first.instance_id: "127.0.0.1:1"} and view.version == 0
        second.register(endpoint_spec(port=2))
        version = view.wait_changed(0, rig.event_timeout)
        assert version >= 1
        snapshot = view.wait_for(lambda m: len(m) >= 2, rig.event_timeout)  # "at least two workers"
        assert snapshot == {first.instance_id: "127.0.0.1:1", second.instance_id: "127.0.0.1:2"}
        with pytest.raises(TypeError):
            snapshot[1] = "x"  # type: ignore[index]
        assert sorted(view) == sorted(snapshot) and len(view) == 2
        first.shutdown()
        view.wait_for(lambda m: first.instance_id not in m, rig.event_timeout)
        with pytest.raises(ds.WatchTimeout):
            view.wait_changed(view.version, timeout=0.05)


def test_several_records_of_one_worker_share_its_key_unless_a_key_is_given(rig):
    worker = reader = rig.client()  # one host: a network mount's cache window is not the point here
    by_worker = reader.live_view(ds.Query.endpoints("ns"), lambda e: e.endpoint)
    by_record = reader.live_view(ds.Query.endpoints("ns"), lambda e: e.endpoint, key=lambda i: i.id())
    with by_worker, by_record:
        a = worker.register(endpoint_spec(endpoint="a"))
        by_record.wait_for(lambda m: len(m) == 1, rig.event_timeout)
        b = worker.register(endpoint_spec(endpoint="b"))
        assert by_record.wait_for(lambda m: len(m) == 2, rig.event_timeout) == {a.id(): "a", b.id(): "b"}
        by_worker.wait_for(lambda m: m.get(worker.instance_id) == "b", rig.event_timeout)
        worker.unregister(b)  # the worker's other record is still there: its value comes back
        by_worker.wait_for(lambda m: m.get(worker.instance_id) == "a", rig.event_timeout)
        worker.unregister(a)
        by_worker.wait_for(lambda m: not m, rig.event_timeout)


def test_callbacks_run_on_the_view_thread_and_a_failing_one_does_not_stop_it(rig):
    worker = reader = rig.client()
    seen: list[tuple[str, int]] = []
    changed = threading.Event()

    def record(snapshot, event) -> None:
        seen.append((threading.current_thread().name, len(snapshot)))
        changed.set()

    def broken(snapshot, event) -> None:
        raise RuntimeError("a broken callback")

    with caught_logs("discovery_sync") as logs, reader.live_view(ds.Query.endpoints(), on_change=broken) as view:
        view.add_callback(record)
        worker.register(endpoint_spec())
        assert changed.wait(rig.event_timeout)
        assert seen[0][0].startswith("discovery-sync-live-view-") and seen[0][1] == 1
        assert isinstance(logs, LogCatcher) and logs.wait_for("a callback of")
        worker.register(endpoint_spec(endpoint="other"))
        view.wait_for(lambda m: m.get(worker.instance_id) is not None, rig.event_timeout)


def test_closing_the_view_or_shutting_down_its_client_stops_its_thread(rig):
    """Every view of a client shares one thread (the view pump): it ends with the last view."""
    reader = rig.client()
    view = reader.live_view(ds.Query.endpoints())
    thread = view._pump.thread
    assert thread is not None and thread.name.startswith("discovery-sync-live-view-pump-")
    view.close()
    thread.join(rig.event_timeout)
    assert not thread.is_alive()
    with pytest.raises(ds.WatchClosed):
        view.get(1)
    second = rig.client()
    view = second.live_view(ds.Query.endpoints())
    thread = view._pump.thread
    assert thread is not None
    second.shutdown()
    thread.join(rig.event_timeout)
    assert not thread.is_alive()
    with pytest.raises(ds.WatchClosed):
        len(view)
    with pytest.raises(ds.ClientClosed):
        second.live_view(ds.Query.endpoints())
