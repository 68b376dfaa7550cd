"""A local store that refuses heartbeats (remounted read-only) or is full: no client removes
another's live record or reports it Removed, and each watch ends in the true state
(docs/design.md §6, "A store that stalls"). Real disks (``tests/file/disks.py``), real clients.

A client whose own heartbeat fails cannot tell a stale store from one it cannot write: it
judges nobody meanwhile, and gives every record a full TTL once it can write again."""

from __future__ import annotations

import time

import discovery_sync as ds
from testrigs.helpers import caught_logs, endpoint_spec, fold, initial_state
from tests.file.disks import SmallDisk

TTL = 1.0  # heartbeats every 0.33 s: a store that refuses them for 3 s kills every record by the clock
OUTAGE = 3 * TTL
OPTIONS = f"ttl={TTL:g}&rescan_interval=0.2"


def _watch_through(watches: list[ds.Watch], seconds: float) -> list[list[ds.DiscoveryEvent]]:
    """Every event of each of ``watches`` for ``seconds`` (a blocking wait on the first, then the others)."""
    events: list[list[ds.DiscoveryEvent]] = [[] for _ in watches]
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for index, watch in enumerate(watches):
            try:
                events[index].append(watch.get(timeout=min(left, 0.1) if index == 0 else 0))
            except ds.WatchTimeout:
                continue
    return events


def _clients(disk: SmallDisk, count: int) -> list[ds.Discovery]:
    return [ds.connect(f"file://{disk.store}?{OPTIONS}") for _ in range(count)]


def test_a_read_only_remount_makes_no_client_remove_or_report_removed_a_live_record(disk):
    disk.keep_locks_apart()  # the holders' owner files, open for writing, would refuse the remount
    holders = _clients(disk, 2)
    watcher = _clients(disk, 1)[0]  # owns nothing: only the mount tells it it cannot write
    clients = [*holders, watcher]
    try:
        records = {h.register(endpoint_spec(endpoint=f"e{i}")) for i, h in enumerate(holders)}
        expected = {r.id(): r for r in records}
        watches = [client.list_and_watch(ds.Query.endpoints()) for client in clients]
        states = [fold({}, initial_state(watch)[1]) for watch in watches]
        with caught_logs("discovery_sync.backends.file") as logs:
            disk.read_only(True)
            try:
                during = _watch_through(watches, OUTAGE)
                listed_during = [{r.id() for r in client.list(ds.Query.endpoints())} for client in clients]
            finally:
                disk.read_only(False)
            after = _watch_through(watches, 3 * TTL)
        assert listed_during == [set(expected)] * len(clients)
        assert logs.matching("no record is judged dead meanwhile")
        for state, seen in zip(states, [d + a for d, a in zip(during, after, strict=True)], strict=True):
            assert [e for e in seen if isinstance(e, ds.Removed)] == []
            for event in seen:
                fold(state, event)
            assert state == expected
        assert {r.id() for r in watcher.list(ds.Query.endpoints())} == set(expected)
        assert len(list((disk.store / "v1" / "instances").iterdir())) == len(expected)
    finally:
        for client in clients:
            client.shutdown()


def test_a_full_disk_makes_no_client_remove_or_report_removed_a_live_record(disk):
    holders = _clients(disk, 2)
    watcher = _clients(disk, 1)[0]
    clients = [*holders, watcher]
    try:
        records = {h.register(endpoint_spec(endpoint=f"e{i}")) for i, h in enumerate(holders)}
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            disk.fill("space")
            [events] = _watch_through([watch], OUTAGE)
            assert [e for e in events if isinstance(e, ds.Removed)] == []
            assert set(watcher.list(ds.Query.endpoints())) == records
            disk.free()
            assert _watch_through([watch], TTL) == [[]]
    finally:
        for client in clients:
            client.shutdown()
