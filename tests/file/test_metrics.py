"""What the file backend adds to client.metrics() (issue 29): heartbeats and rescans timed,
records swept, on a manual clock so that every count is exact."""

from __future__ import annotations

from pathlib import Path

import pytest
from discovery_sync.backends.file import liveness as file_liveness

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from testrigs.helpers import LogCatcher, endpoint_spec, initial_state
from testrigs.waiting import wait_until
from tests.file.clocked import Steps
from tests.file.junk import hand_written


def test_rescans_are_counted_and_timed_by_scan(store: Path) -> None:
    clock = ManualClock()  # never advanced: the rescan thread never runs, only the test's rescans count
    with ds.connect(f"file://{store}?ttl=5", clock=clock) as client:
        assert {scan: d["count"] for scan, d in client.metrics()["rescans"].items()} == {
            "deep": 0,
            "full": 0,
            "listing": 0,
        }
        client.rescan()
        client.rescan()
        client.rescan(scan="listing")
        rescans = client.metrics()["rescans"]
        assert {scan: d["count"] for scan, d in rescans.items()} == {"deep": 2, "full": 0, "listing": 1}
        deep = rescans["deep"]
        assert deep["sum"] > 0 and deep["max"] <= deep["sum"]
        assert deep["buckets"][-1] == (float("inf"), 2)


def test_each_heartbeat_is_timed_and_a_reader_has_none(store: Path, steps: Steps) -> None:
    url = f"file://{store}?ttl=3&uniform_ttl=true"
    with ds.connect(url, clock=steps.clock) as client, ds.connect(url, read_only=True) as reader:
        client.register(endpoint_spec())
        assert client.metrics()["heartbeat"]["count"] == 0  # type: ignore[index]
        steps.run(3.0, step=0.5)  # three heartbeat intervals of one second
        assert client.metrics()["heartbeat"]["count"] == 3  # type: ignore[index]
        assert reader.metrics()["heartbeat"] is None


def test_records_swept_by_collect_garbage_are_counted_by_kind(store: Path, steps: Steps) -> None:
    with ds.connect(f"file://{store}?ttl=5&uniform_ttl=true", clock=steps.clock) as client:
        client.register(endpoint_spec())
        hand_written(store, "orphanone", 9)
        hand_written(store, "orphantwo", 10)
        assert client.metrics()["records_swept"] == {"endpoint": 0, "model": 0, "event_channel": 0, "event_source": 0}
        found = steps.call("test-gc", client.collect_garbage, step=0.5, limit=30)
        assert len(found) == 2
        assert client.metrics()["records_swept"]["endpoint"] == 2
        assert client.metrics()["records_owned"] == 1


def test_a_heartbeat_thread_ended_by_an_error_is_a_crash(
    store: Path, steps: Steps, monkeypatch: pytest.MonkeyPatch, escaped: list[object]
) -> None:
    def stop(*args: object) -> None:
        raise SystemExit("injected: ends the heartbeat thread")  # a BaseException: not retried

    with ds.connect(f"file://{store}?ttl=3&uniform_ttl=true", clock=steps.clock) as client:
        watch = client.list_and_watch(ds.Query.endpoints())
        initial_state(watch)
        client.register(endpoint_spec())
        monkeypatch.setattr(file_liveness, "touch_record", stop)
        steps.run(1.0, step=0.5)  # one heartbeat interval
        with pytest.raises(ds.WatchFailed):  # what a crashed heartbeat does to the watches
            while True:
                watch.get(timeout=10)
        assert client.metrics()["thread_crashes"] == 1
    assert escaped == []


def test_a_restarted_observer_is_counted(store: Path, escaped: list[object], thread_log: LogCatcher) -> None:
    url = f"file://{store}?ttl=2&rescan_interval=0.2&observer=polling&poll_interval=0.1"
    with ds.connect(url) as watcher, watcher.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        assert watcher.metrics()["thread_restarts"] == 0
        emitters = watcher._notifier._observer.emitters  # type: ignore[attr-defined]
        emitter = next(e for e in emitters if e.watch.path.endswith("instances"))

        def fault(*args: object, **kwargs: object) -> None:
            raise RuntimeError("injected observer fault")

        emitter.queue_events = fault  # this one emitter object only, not watchdog's class
        assert thread_log.wait_for("restarting it")
        wait_until(lambda: watcher.metrics()["thread_restarts"] == 1, "the restart counted")
    assert escaped == []
