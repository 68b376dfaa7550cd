"""Every background thread of a file-store client survives an exception of any kind: it is
logged with the thread's name, retried or handed to the consumers, and never reaches
``threading.excepthook``. Faults are injected into our own code (or one observer object),
because a store that makes ``os.utime`` raise a RuntimeError cannot be produced for real."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from discovery_sync.backends.file import liveness as file_liveness
from discovery_sync.backends.file.layout import StoreLayout
from discovery_sync.backends.file.softlock import SoftLocks
from discovery_sync.backends.file.sweep import Sweeper

import discovery_sync as ds
from testrigs.helpers import LogCatcher, endpoint_spec, initial_state, next_event

WAIT = 10.0
TTL = 2.0
RESCAN = 0.2


class Fault:
    """Raises ``error`` while armed; ``hit`` is set once it has been raised ``times`` times."""

    def __init__(self, real: Callable[..., Any], error: BaseException, times: int = 2) -> None:
        self.real = real
        self.error = error
        self.times = times
        self.calls = 0
        self.armed = True
        self.hit = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.armed:
            return self.real(*args, **kwargs)
        self.calls += 1
        if self.calls >= self.times:
            self.hit.set()
        raise self.error

    @property
    def method(self) -> Callable[..., Any]:
        """The fault as a function, to put on a class in place of a method."""

        def method(*args: Any, **kwargs: Any) -> Any:
            return self(*args, **kwargs)

        return method


def url(store: Path, **options: object) -> str:
    query = {"ttl": TTL, "rescan_interval": RESCAN, **options}
    return f"file://{store}?" + "&".join(f"{k}={v}" for k, v in query.items())


def wait_status(client: ds.Discovery, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The client's status once ``predicate`` holds (status has no change notification)."""
    pause = threading.Event()
    for _ in range(int(WAIT / 0.05)):
        status = client.status()
        if predicate(status):
            return status
        pause.wait(0.05)
    raise AssertionError(f"status never matched: {client.status()}")


def test_heartbeat_survives_an_unexpected_error_and_recovers(store, monkeypatch, escaped, thread_log: LogCatcher):
    with ds.connect(url(store)) as owner, ds.connect(url(store)) as reader:
        endpoint = owner.register(endpoint_spec())
        fault = Fault(file_liveness.touch_record, RuntimeError("injected heartbeat fault"))
        monkeypatch.setattr(file_liveness, "touch_record", fault)
        assert fault.hit.wait(WAIT)
        status = wait_status(owner, lambda s: s["heartbeat"]["failures"] >= 2)
        assert status["connected"] is False and status["heartbeat"]["alive"] is True
        assert "injected heartbeat fault" in status["heartbeat"]["last_error"]
        assert thread_log.wait_for("thread discovery-sync-file-heartbeat: the heartbeat")
        fault.armed = False
        status = wait_status(owner, lambda s: s["heartbeat"]["failures"] == 0)
        assert status["connected"] is True
        # the record is alive for other clients again (written back if a rescan swept it meanwhile)
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            _, resync = initial_state(watch)
            state = {i.id() for i in resync.instances}
            while endpoint.id() not in state:
                event = next_event(watch, timeout=WAIT)
                if isinstance(event, ds.Added):
                    state.add(event.instance.id())
    assert escaped == []


def test_an_unexpected_rescan_error_fails_the_watches_and_the_thread_goes_on(store, monkeypatch, escaped):
    with ds.connect(url(store)) as client:
        watch = client.list_and_watch(ds.Query.endpoints())
        initial_state(watch)
        fault = Fault(Sweeper.sweep, RuntimeError("injected rescan fault"), times=1)
        monkeypatch.setattr(Sweeper, "sweep", fault.method)
        with pytest.raises(ds.WatchFailed) as failed:
            while True:
                watch.get(timeout=WAIT)
        assert "injected rescan fault" in repr(failed.value.__cause__ or failed.value)
        fault.armed = False
        wait_status(client, lambda s: s["rescan"]["failures"] == 0 and s["rescan"]["alive"])
        with client.list_and_watch(ds.Query.endpoints()) as again:  # a repaired store serves new watches
            initial_state(again)
            endpoint = client.register(endpoint_spec())
            assert next_event(again) == ds.Added(endpoint)
    assert escaped == []


def test_a_crashed_observer_thread_is_restarted_and_the_watch_goes_on(store, escaped, thread_log: LogCatcher):
    watcher = ds.connect(url(store, observer="polling", poll_interval=0.1))
    with watcher, ds.connect(url(store)) as writer, watcher.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        emitters = watcher._notifier._observer.emitters
        emitter = next(e for e in emitters if e.watch.path.endswith("instances"))
        fault = Fault(emitter.queue_events, RuntimeError("injected observer fault"), times=1)
        emitter.queue_events = fault  # this one emitter object only, not watchdog's class
        assert fault.hit.wait(WAIT)
        assert thread_log.wait_for("injected observer fault")
        assert thread_log.wait_for("restarting it")
        endpoint = writer.register(endpoint_spec())
        event = next_event(watch, timeout=WAIT)
        while isinstance(event, ds.Resync):  # the restart resynchronises
            event = next_event(watch, timeout=WAIT)
        assert event == ds.Added(endpoint)
        assert watcher.status()["observer_alive"] is True
    assert escaped == []


def test_the_soft_lock_refresher_survives_an_unexpected_error(store, monkeypatch, escaped, thread_log: LogCatcher):
    fault = Fault(SoftLocks._refresh, RuntimeError("injected refresh fault"))
    monkeypatch.setattr(SoftLocks, "_refresh", fault.method)
    with ds.connect(url(store, lock="soft", lock_stale=0.4)) as client:
        locks = client._locks._soft_locks
        with locks.hold(store / ".locks" / "probe"):
            assert fault.hit.wait(WAIT)
            fault.armed = False
            assert thread_log.wait_for("thread discovery-sync-file-lock-refresh")
            assert locks._refresher.is_alive()
    assert escaped == []


def test_pruning_the_heartbeats_names_while_a_call_adds_one_never_fails(tmp_path):
    """Issue 37: with 50k records a heartbeat crashed in ``OwnedNames.prune`` ("dictionary changed
    size during iteration"): it pruned while an API call (a register, the removals of a
    shutdown) encoded a new name. Here the call comes in the middle of the prune, every time."""
    layout = StoreLayout(tmp_path)
    names = file_liveness.OwnedNames(layout)
    ids = [ds.EndpointInstanceId("ns", "backend", "generate", i) for i in range(40)]
    for instance_id in ids:
        names(instance_id)
    added = iter(range(1000, 2000))

    class Racing(dict[Any, Any]):
        def __contains__(self, key: object) -> bool:
            names(ds.EndpointInstanceId("ns", "backend", "generate", next(added)))  # another thread's call
            return super().__contains__(key)

    names.prune(Racing({ids[0]: None}))
    assert names(ids[0]) == layout.file_name(ids[0])
