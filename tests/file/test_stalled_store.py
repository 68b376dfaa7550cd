"""A store that stalls a client anywhere, not only in a scan, makes it judge nobody dead.

On a frozen network mount every call that needs the server waits: a rescan's look at the
filesystem (``statvfs`` for "mounted read-only?") as much as its scans. When the server answers
again, the scans that follow are quick, yet what they read is as old as the freeze: the writers
were frozen too and have not beaten since. So a stall seen anywhere restarts the clocks of every
bucket of the client (they share one mount), and a record gets a full TTL from then.

The frozen server itself is tests/netfs (real sshfs, timing-dependent); here the stall is injected
on a manual clock at the one place a real freeze blocks, and the rescans run on the test's thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from discovery_sync.backends.file import survey as survey_module

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from tests.file.junk import hand_written

FREEZE = 30.0


def _model_record(store: Path, instance_id: int) -> tuple[ds.Model, Path]:
    record = ds.Model("ns", "backend", "generate", instance_id, {"display_name": "llama"})
    path = store / "v1" / "mdc" / f"ns%2Fbackend%2Fgenerate%2F{instance_id:x}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(ds.instance_to_json(record))
    return record, path


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def reader(tmp_path: Path, clock: ManualClock) -> Iterator[ds.Discovery]:
    """A writing client without records (it judges, and deletes the dead), whose rescans the
    test runs itself."""
    client = ds.connect(f"file://{tmp_path / 'store'}?ttl=6", clock=clock)
    client._rescans.thread.stop()  # type: ignore[attr-defined]
    yield client
    client.shutdown()


def _watching(client: ds.Discovery, *records: ds.DiscoveryInstance) -> list[ds.Watch]:
    """A watch of each kind, holding ``records`` (the views now follow their buckets)."""
    watches = [client.list_and_watch(ds.Query.endpoints()), client.list_and_watch(ds.Query.models())]
    held: set[ds.DiscoveryInstance] = set()
    for watch in watches:
        while not isinstance(event := watch.get(timeout=5), ds.Resync):
            assert isinstance(event, ds.Added)
            held.add(event.instance)
    assert held == set(records)
    return watches


def _quiet(watches: list[ds.Watch]) -> bool:
    for watch in watches:
        try:
            event = watch.get(timeout=0)
        except ds.WatchTimeout:
            continue
        raise AssertionError(f"a watch heard {event}")
    return True


def _rescan(client: ds.Discovery) -> None:
    client._rescans.rescan()  # type: ignore[attr-defined]


def _stalling(clock: ManualClock, action: Callable[..., object]) -> Callable[..., object]:
    def frozen_mount(*args: object) -> object:  # the call waits FREEZE seconds for the server
        clock.advance(FREEZE)
        return action(*args)

    return frozen_mount


def _stored(client: ds.Discovery, *records: ds.DiscoveryInstance) -> bool:
    return all(client.get(record.id()) == record for record in records)


def _swept_within(client: ds.Discovery, clock: ManualClock, seconds: float, *paths: Path) -> bool:
    """Rescan every 5 s of the clock until ``paths`` are gone (the records are still dead: no
    heartbeat ever comes); False when they outlive ``seconds``."""
    end = clock.monotonic() + seconds
    while clock.monotonic() < end:
        clock.advance(5.0)
        _rescan(client)
        if not any(path.exists() for path in paths):
            return True
    return False


def test_a_rescan_stalled_before_its_scans_judges_nobody_dead(tmp_path, clock, reader):
    store = tmp_path / "store"
    endpoint, path = hand_written(store, "generate", 1)  # its writer froze with the server
    watches = _watching(reader, endpoint)
    sight = reader._rescans._sight  # type: ignore[attr-defined]
    judge = sight.judge
    sight.judge = _stalling(clock, judge)  # judge()'s statvfs on the frozen mount
    _rescan(reader)
    sight.judge = judge
    assert path.exists() and _stored(reader, endpoint) and _quiet(watches)  # a full TTL from now
    clock.advance(5.0)  # under the TTL of 6 s since the stall ended
    _rescan(reader)
    assert path.exists() and _stored(reader, endpoint) and _quiet(watches)
    assert _swept_within(reader, clock, 30.0, path)  # no heartbeat ever comes: dead all the same
    assert reader.get(endpoint.id()) is None


def test_a_stall_in_one_bucket_restarts_the_clocks_of_every_bucket(tmp_path, clock, reader):
    store = tmp_path / "store"
    endpoint, endpoint_path = hand_written(store, "generate", 1)
    model, model_path = _model_record(store, 2)
    watches = _watching(reader, endpoint, model)
    views = reader._views  # type: ignore[attr-defined]
    endpoints = views[ds.RecordKind.ENDPOINT]
    scan = endpoints._scan_directory
    endpoints._scan_directory = _stalling(clock, scan)  # instances is scanned first and stalls
    _rescan(reader)
    endpoints._scan_directory = scan
    # the models bucket, scanned quickly right after, is as old as the stall too
    assert model_path.exists() and endpoint_path.exists() and _stored(reader, endpoint, model) and _quiet(watches)
    clock.advance(5.0)
    _rescan(reader)
    assert _stored(reader, endpoint, model) and _quiet(watches)
    assert _swept_within(reader, clock, 30.0, endpoint_path, model_path)


def _crawling(clock: ManualClock, view: Any, per_file: float, files: int) -> Callable[..., object]:
    """``view``'s scans take ``per_file`` seconds of the clock a file (``files`` at its first
    scan, then as many as it holds): a healthy store that is slow, as much as its size says."""
    action = view._scan_directory
    scanned = []

    def big_store(*args: object) -> object:
        clock.advance(per_file * (len(view) if scanned else files))
        scanned.append(True)
        return action(*args)

    return big_store


def test_a_big_healthy_store_whose_scans_take_seconds_is_not_taken_for_a_frozen_one(tmp_path, clock, reader):
    """Issue 37: a fixed 2 s bound took every scan of a 50k-record store for a stall, so every
    clock restarted at each rescan and liveness judging stopped: a dead writer's records stayed
    for ever, and the client was SUSPENDED. Here each scan takes 1 ms a file on the clock (3 s
    for 3,000 files: slow, and as slow as its size says), and the dead writer's records go."""
    files = 3000
    store = tmp_path / "store"
    written = [hand_written(store, f"e{i}", i + 1) for i in range(files)]
    states: list[ds.ConnectionState] = []
    reader.add_state_listener(lambda change: states.append(change.state))
    endpoints = reader._views[ds.RecordKind.ENDPOINT]  # type: ignore[attr-defined]
    endpoints._scan_directory = _crawling(clock, endpoints, 0.001, files)  # from its first scan
    _watching(reader, *(record for record, _ in written))
    assert _swept_within(reader, clock, 60.0, *(path for _, path in written))
    assert states == []  # never SUSPENDED: its rescans made progress as usual for their size


def _removing_slowly(clock: ManualClock, client: ds.Discovery, seconds: float, monkeypatch: Any) -> list[str]:
    """Every removal of a dead record takes ``seconds`` of the clock (a slow, healthy store), and
    the client's link judges its connection after each one; the states it reported meanwhile."""
    from discovery_sync.backends.file import sweep

    remove = sweep.remove_record
    states: list[str] = []
    client.add_state_listener(lambda change: states.append(f"{change.state}: {change.reason}"))

    def slow_removal(dir_fd: int, name: str) -> bool:
        clock.advance(seconds)
        removed = remove(dir_fd, name)
        client._link.judge()  # type: ignore[attr-defined]  # as the link thread would, at any moment
        return removed

    monkeypatch.setattr(sweep, "remove_record", slow_removal)  # our own code's call, not a library's
    return states


def test_a_rescan_whose_sweep_keeps_removing_for_seconds_is_not_a_stall(tmp_path, clock, reader, monkeypatch):
    """Issue 37: a killed writer's 10k records took a rescan's sweep seconds, and every client
    took that for a frozen store (SUSPENDED). Each removal is an answer of the store: 300
    removals of 20 ms each (6 s) are slow, not stalled."""
    store = tmp_path / "store"
    written = [hand_written(store, f"e{i}", i + 1) for i in range(300)]
    _watching(reader, *(record for record, _ in written))
    states = _removing_slowly(clock, reader, 0.02, monkeypatch)
    assert _swept_within(reader, clock, 60.0, *(path for _, path in written))
    assert states == []


def test_a_rescan_waiting_for_another_threads_sweep_is_not_stalled(tmp_path, clock, reader):
    """A rescan blocked on a view that another thread sweeps (the owners thread removing a killed
    writer's records) waits for this client, not for the store: every answer the other thread
    gets restarts its bound."""
    rescans = reader._rescans  # type: ignore[attr-defined]
    view = reader._views[ds.RecordKind.ENDPOINT]  # type: ignore[attr-defined]
    entered, release = threading.Event(), threading.Event()
    scan = view._scan_directory

    def blocked(*args: object) -> object:
        entered.set()
        release.wait(10)
        return scan(*args)

    view._scan_directory = blocked
    rescanning = threading.Thread(target=rescans.rescan, name="test-rescan")
    rescanning.start()
    try:
        assert entered.wait(10)
        began = rescans.scanning_since
        for _ in range(5):
            clock.advance(1.5)  # 7.5 s in all: far past any bound
            view.progress()  # the other thread's removal got an answer
            reader._link.judge()  # type: ignore[attr-defined]
            assert reader.state is ds.ConnectionState.CONNECTED
        assert rescans.scanning_since == clock.monotonic() > began
        clock.advance(rescans.stall_after + 1)  # and now no answer comes
        reader._link.judge()  # type: ignore[attr-defined]
        assert reader.state is ds.ConnectionState.SUSPENDED
    finally:
        release.set()
        rescanning.join(10)
        view._scan_directory = scan


def test_a_deep_scan_whose_listing_answers_slowly_for_longer_than_the_bound_is_not_a_stall(
    tmp_path, clock, reader, monkeypatch
):
    """Issue 37: a deep scan of a 50k-record store on a loaded machine was reported stalled: its
    listing (a stat of every file) answered all along but told nobody until it ended. Here it
    takes 1 ms of the clock an entry: 3 s for 3,000 files, over the 2 s bound of usual scans."""
    files = 3000
    store = tmp_path / "store"
    written = [hand_written(store, f"e{i}", i + 1) for i in range(files)]
    _watching(reader, *(record for record, _ in written))
    _rescan(reader)  # a usual deep scan: instant on the clock, so the bound is its least, 2 s
    link = reader._link  # type: ignore[attr-defined]
    verdicts: list[str | None] = []
    quick_listing = survey_module.listing

    @contextlib.contextmanager
    def slow_listing(dir_fd: int) -> Iterator[Iterator[Any]]:
        with quick_listing(dir_fd) as entries:

            def crawl() -> Iterator[Any]:
                for entry in entries:
                    clock.advance(0.001)
                    verdicts.append(link._scan_stalled(clock.monotonic()))
                    yield entry

            yield crawl()

    monkeypatch.setattr(survey_module, "listing", slow_listing)  # our own code's call, not a library's
    _rescan(reader)
    assert len(verdicts) >= files
    assert set(verdicts) == {None}
