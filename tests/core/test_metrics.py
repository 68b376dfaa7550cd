"""client.metrics() on the memory backend: every figure checked against what the test did and saw
(issue 29); the Prometheus side on every backend is tests/contract/test_metrics.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import uuid
from collections import Counter

import pytest

import discovery_sync as ds
from discovery_sync.metrics import EVENT_KINDS, METRICS, Metrics
from discovery_sync.periodic import PeriodicThread
from testrigs.helpers import endpoint_spec, initial_state, model_spec

KIND_OF = {ds.Added: "added", ds.Removed: "removed", ds.ModelTaintsUpdated: "model_taints_updated", ds.Resync: "resync"}
WRITERS, ROUNDS = 4, 50


def _store() -> str:
    return f"memory://metrics-{uuid.uuid4().hex}"


def _write(client: ds.Discovery, writer: int) -> None:
    """Each round: an endpoint and a model on an endpoint of its own, a taint update, both removed."""
    for round_ in range(ROUNDS):
        name = f"w{writer}-{round_}"
        endpoint = client.register(endpoint_spec(endpoint=name, port=1000 + writer))
        model = client.register(model_spec(f"model-{name}", endpoint=name))
        client.update_model_taints(model.id(), [f"round={round_}"])
        client.unregister(model)
        client.unregister(endpoint)


def _consume(watch: ds.Watch, expected: int, seen: Counter[str]) -> None:
    """Take events until ``expected`` of them after the initial Resync came; count every one by kind."""
    initial, resync = initial_state(watch)
    seen.update(KIND_OF[type(event)] for event in [*initial, resync])
    for _ in range(expected):
        seen[KIND_OF[type(watch.get(timeout=30))]] += 1


def test_events_delivered_are_counted_exactly_by_kind_under_threads():
    """Four writers and four watches, each consumed by a thread of its own: the counts are the sum
    of what the consumers received, while the watches are open and once they are closed."""
    url = _store()
    with ds.connect(url) as writer_client, ds.connect(url) as watcher:
        watches = [watcher.list_and_watch(q) for q in (ds.Query.endpoints(), ds.Query.models()) * 2]
        per_watch = WRITERS * ROUNDS
        expected = {ds.RecordKind.ENDPOINT: 2 * per_watch, ds.RecordKind.MODEL: 3 * per_watch}
        seen = [Counter[str]() for _ in watches]
        threads = [
            threading.Thread(target=_consume, args=(w, expected[w.query.kind], s), name=f"consumer-{i}")
            for i, (w, s) in enumerate(zip(watches, seen, strict=True))
        ]
        threads += [
            threading.Thread(target=_write, args=(writer_client, i), name=f"writer-{i}") for i in range(WRITERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
            assert not thread.is_alive(), thread.name
        received = sum(seen, Counter[str]())
        assert received["model_taints_updated"] == 2 * per_watch  # the models' watches had them all
        wanted = {kind: received[kind] for kind in EVENT_KINDS}
        figures = watcher.metrics()
        assert figures["events_delivered"] == wanted
        assert figures["watches_open"] == 4
        assert figures["resyncs"] == 0  # only the initial ones, which do not count there
        for watch in watches:
            watch.close()
        figures = watcher.metrics()
        assert (figures["events_delivered"], figures["watches_open"]) == (wanted, 0)
        assert writer_client.metrics()["events_delivered"] == dict.fromkeys(EVENT_KINDS, 0)  # it watched nothing


def test_a_lagging_watch_its_queue_high_water_mark_and_its_resync():
    url = _store()
    with ds.connect(url) as writer, ds.connect(url) as watcher:
        watch = watcher.list_and_watch(ds.Query.endpoints(), queue_size=3)
        initial_state(watch)
        for port in range(10):
            writer.register(endpoint_spec(endpoint=f"e{port}", port=port + 1))
        figures = watcher.metrics()
        assert (figures["watches_lagging"], figures["watch_lags"]) == (1, 1)
        assert (figures["watch_queue_depth"], figures["watch_queue_depth_max"]) == (3, 3)
        events = [watch.get(timeout=5) for _ in range(3)]  # what was queued; then the missed ones and a Resync
        while not isinstance(events[-1], ds.Resync):
            events.append(watch.get(timeout=5))
        assert len(events) == 11  # 3 queued + 7 missed + the Resync
        figures = watcher.metrics()
        assert (figures["watches_lagging"], figures["watch_lags"], figures["resyncs"]) == (0, 1, 1)
        assert figures["watch_queue_depth"] == 0
        assert figures["events_delivered"] == {"added": 10, "removed": 0, "model_taints_updated": 0, "resync": 2}
        watch.close()
        assert watcher.metrics()["watch_queue_depth_max"] == 3  # kept once the watch is closed


def test_events_queued_but_not_taken_are_not_delivered_and_closing_drops_them():
    url = _store()
    with ds.connect(url) as writer, ds.connect(url) as watcher:
        watch = watcher.list_and_watch(ds.Query.endpoints())
        for port in range(3):
            writer.register(endpoint_spec(endpoint=f"e{port}", port=port + 1))
        assert watcher.metrics()["events_delivered"]["resync"] == 0  # the initial Resync is pending, not taken
        assert isinstance(watch.get(timeout=5), ds.Resync)
        assert isinstance(watch.get(timeout=5), ds.Added)
        figures = watcher.metrics()
        assert (figures["events_delivered"]["added"], figures["watch_queue_depth"]) == (1, 2)
        watch.close()
        figures = watcher.metrics()
        assert (figures["events_delivered"]["added"], figures["watches_open"]) == (1, 0)
        assert figures["watch_queue_depth_max"] == 3


def test_failed_writes_are_counted_by_operation_and_error_and_refused_arguments_are_not():
    url = _store()
    with ds.connect(url) as first, ds.connect(url) as second:
        first.register(model_spec("model-a"))
        with pytest.raises(ds.ConflictError):
            second.register(model_spec("model-b"))
        with pytest.raises(ds.NotFoundError):
            second.unregister(ds.EndpointInstanceId("ns", "backend", "generate", 7))
        with pytest.raises(ds.NotFoundError):
            second.update_model_taints(ds.ModelCardInstanceId("ns", "backend", "other", second.instance_id), ["a"])
        with pytest.raises(ds.ValidationError):
            second.register("not a spec")  # type: ignore[call-overload]
        with pytest.raises(ds.ValidationError):
            second.update_model_taints(ds.ModelCardInstanceId("ns", "backend", "generate", 1), ["a"])  # not its own
        assert second.metrics()["failed_writes"] == {
            "register": {"ConflictError": 1},
            "unregister": {"NotFoundError": 1},
            "update_model_taints": {"NotFoundError": 1},
        }
        assert first.metrics()["failed_writes"] == {}


def test_records_owned_and_state_changes():
    with ds.connect(_store()) as client:
        records = [client.register(endpoint_spec(endpoint=f"e{i}")) for i in range(3)]
        client.unregister(records[0])
        figures = client.metrics()
        assert figures["records_owned"] == 2
        assert figures["state"] == "connected"
        assert figures["state_changes"] == {"suspended": 0, "reconnected": 0, "lost": 0, "closed": 0}
    figures = client.metrics()  # after shutdown() too
    assert figures["records_owned"] == 0
    assert (figures["state"], figures["state_changes"]["closed"]) == ("closed", 1)


def test_every_key_of_the_mapping_is_in_the_table_and_the_memory_backend_measures_nothing_of_its_own():
    with ds.connect(_store()) as client:
        figures: Metrics = client.metrics()
        assert figures["backend"] == "memory"
        assert figures["worker_id"] == f"{client.instance_id:x}"
        assert (figures["heartbeat"], figures["rescans"], figures["records_swept"]) == (None, {}, {})
        assert (figures["thread_crashes"], figures["thread_restarts"]) == (0, 0)
    assert set(figures) - {"backend", "worker_id"} == {metric.key for metric in METRICS}
    names = [metric.name for metric in METRICS]
    assert len(set(names)) == len(names)
    assert all(name.startswith("dynamo_discovery_") for name in names)
    assert all(m.name.endswith("_total") == (m.kind == "counter") for m in METRICS)


def test_a_periodic_thread_times_its_job_and_counts_its_crash():
    ran, crashed = threading.Event(), threading.Event()

    def job() -> None:
        ran.set()
        raise SystemExit("stop")  # a BaseException: not retried, the thread ends through report_crash

    thread = PeriodicThread("metrics-test-periodic", 60, job, run_first=True, on_crash=lambda exc: crashed.set())
    thread.start()
    assert crashed.wait(10) and ran.is_set()
    thread.stop()
    assert thread.crashes == 1
    assert thread.durations.figures()["count"] == 1


BLOCK_PROMETHEUS = textwrap.dedent(
    """
    import sys

    class WithoutPrometheus:  # as if installed without the prometheus extra
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] == "prometheus_client":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, WithoutPrometheus())
    import discovery_sync as ds
    import discovery_sync.metrics

    with ds.connect("memory://") as client:
        print(client.metrics()["backend"])
        try:
            discovery_sync.metrics.register(client)
        except ds.ValidationError as exc:
            print(exc)
    """
)


def test_without_prometheus_client_metrics_work_and_register_says_which_extra_to_install():
    result = subprocess.run([sys.executable, "-c", BLOCK_PROMETHEUS], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    backend, message = result.stdout.splitlines()
    assert backend == "memory"
    assert "pip install 'discovery-sync[prometheus]'" in message
