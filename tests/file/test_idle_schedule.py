"""The rescan schedule of a file-store client on inotify (issue 18: idle cost), and what it keeps.

With inotify, rescans between two full scans compare only the directory listing (names and
inodes), full scans (every ``dead_after / 2`` by default) stat every file for liveness, and only
every ``DEEP_EVERY``-th full scan re-reads files whose mtime alone moved. Lost notifications are
simulated by making the client ignore them (``FileDiscovery._notified`` replaced before the
client starts). Time is a manual clock the tests move (``steps``, :mod:`tests.file.clocked`);
file mtimes are the kernel's, set by the tests where they stand for a heartbeat.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file import missed
from discovery_sync.backends.file import rescan as file_rescan
from discovery_sync.backends.file import view as file_view
from discovery_sync.backends.file.names import record_name
from discovery_sync.backends.file.view import FULL, LISTING, BucketView

import discovery_sync as ds
from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.identity import RecordKind
from discovery_sync.testing import ManualClock
from testrigs.helpers import assert_quiet, endpoint_spec, initial_state, next_event
from tests.file.junk import hand_written

NS = 1_000_000_000


def connect(store: Path, clock: Clock = SYSTEM, **options: object) -> ds.Discovery:
    return ds.connect(f"file://{store}?" + "&".join(f"{k}={v}" for k, v in options.items()), clock=clock)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the files views read (open and read their bytes)."""
    names: list[str] = []
    real = file_view.read_regular

    def counting(dir_fd: int | None, name: str, limit: int) -> object:
        names.append(name)
        return real(dir_fd, name, limit)

    monkeypatch.setattr(file_view, "read_regular", counting)
    yield names


def test_the_default_schedule_scans_fully_as_often_as_liveness_needs(store):
    with connect(store) as local, connect(store, observer="polling") as polled, connect(store, ttl=30) as long:
        assert (local.rescan_interval, local.full_scan_interval, local.dead_after) == (2.0, 5.0, 10.0)
        # the polling observer (network filesystems): every rescan is a full one, as before
        assert (polled.rescan_interval, polled.full_scan_interval) == (2.0, 2.0)
        assert (long.rescan_interval, long.full_scan_interval) == (2.0, 15.0)
        # never slower than a heartbeat: every full scan sees a live record's mtime move
        for client in (local, long):
            assert client.heartbeat_interval < client.full_scan_interval < client.dead_after


def test_a_record_nobody_touches_is_removed_within_dead_after_and_one_full_scan(store, steps):
    # ttl 2: rescans every 2/3 s, full scans every second (a record that never beat: one TTL for all)
    with connect(store, steps.clock, ttl=2, uniform_ttl="true") as client:
        record, path = hand_written(store, "orphan", 9)
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            assert initial_state(watch)[1].instances == (record,)
            seen_at = steps.clock.monotonic()
            event, removed_at = steps.until_event(watch, step=0.05, limit=10)
            assert event == ds.Removed(record.id())
            waited = removed_at - seen_at  # of the clock, to the step it came in
        assert client.full_scan_interval == 1.0
        assert 2.0 - client.rescan_interval <= waited <= 2.0 + 2 * client.full_scan_interval + 1.0
        assert not path.exists()


def test_a_record_touched_in_place_is_never_declared_dead(store, steps):
    with connect(store, steps.clock, ttl=2) as client:
        record, path = hand_written(store, "touched", 11)
        mtime_ns = path.stat().st_mtime_ns
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            for _ in range(4 * 4):  # four TTLs
                mtime_ns += NS // 2  # a heartbeat: only the mtime moves, no notification (no IN_ATTRIB)
                os.utime(path, ns=(mtime_ns, mtime_ns))
                steps.advance(2.0 / 4)
                assert_quiet(watch, 0)
        assert client.list(ds.Query.endpoints()) == [record]
        assert path.exists()


def test_a_registered_record_of_another_client_stays_alive(store, steps):
    with connect(store, steps.clock, ttl=2) as owner, connect(store, steps.clock, ttl=2) as reader:
        endpoint = owner.register(endpoint_spec())
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            assert initial_state(watch)[1].instances == (endpoint,)
            # the owner beats every 2/3 s; three TTLs past the longest a reader waits for a record
            # it has not seen beat yet (10 s: a record that never beats would be dead by then)
            assert reader.longest_dead_after == 10.0
            steps.run(reader.longest_dead_after + 3 * 2.0, step=0.1)
            assert_quiet(watch, 0)
        assert reader.list(ds.Query.endpoints()) == [endpoint]


@pytest.mark.usefixtures("deaf")
def test_missed_creates_deletes_and_replaces_are_repaired_between_full_scans(store, steps):
    # full scans every 15 s: only the listing scans (every 0.2 s) can find these in time
    rescan, started = 0.2, steps.clock.monotonic()
    with connect(store, steps.clock, ttl=30, rescan_interval=rescan) as client:
        assert client.full_scan_interval == 15.0

        def repaired(watch: ds.Watch) -> ds.DiscoveryEvent:
            """The next event: held back for the notice grace, then found by the next rescans."""
            changed_at = steps.clock.monotonic()
            event, at = steps.until_event(watch, step=rescan / 2, limit=client.full_scan_interval / 2)
            assert missed.NOTICE_GRACE <= at - changed_at <= missed.NOTICE_GRACE + 4 * rescan
            return event

        with client.list_and_watch(ds.Query.endpoints()) as watch:
            assert initial_state(watch)[1].instances == ()
            record, path = hand_written(store, "unseen", 7)
            assert repaired(watch) == ds.Added(record)
            assert next_event(watch) == ds.Resync((record,))
            # an atomic replace (a new inode) with other content
            moved = ds.Endpoint("ns", "backend", "unseen", 7, ds.Transport.tcp("127.0.0.1:2"))
            staged = store / "staged"
            staged.write_bytes(ds.instance_to_json(moved))
            os.replace(staged, path)
            assert repaired(watch) == ds.Added(moved)
            assert next_event(watch) == ds.Resync((moved,))
            path.unlink()
            assert repaired(watch) == ds.Removed(record.id())
            assert next_event(watch) == ds.Resync(())
            steps.run(1.0, step=rescan)
            assert_quiet(watch, 0)
        assert steps.clock.monotonic() - started < client.full_scan_interval  # all before a second full scan


@pytest.mark.usefixtures("deaf")
def test_a_missed_in_place_rewrite_is_repaired_by_a_deep_scan(store, reads):
    # the thread never runs (rescan_interval 3600): each scan is called here
    clock = ManualClock()
    with connect(store, clock, ttl=30, rescan_interval=3600) as client:
        record, path = hand_written(store, "inplace", 5)
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            assert initial_state(watch)[1].instances == (record,)
            # the same size, the same inode: only the mtime shows it (as a heartbeat would)
            changed = ds.Endpoint("ns", "backend", "inplace", 5, ds.Transport.tcp("127.0.0.1:9"))
            assert len(ds.instance_to_json(changed)) == path.stat().st_size
            inode = path.stat().st_ino
            with open(path, "r+b") as rewrite:
                rewrite.write(ds.instance_to_json(changed))
            assert path.stat().st_ino == inode
            reads.clear()
            for scan in (LISTING, FULL, FULL):
                client.rescan(scan=scan)
            assert reads == []  # taken for a heartbeat: not read
            assert_quiet(watch, 0.2)
            client.rescan()  # deep: read, held for the notice grace
            # what the rescan thread runs next: deep, whatever its schedule, as a change is pending;
            # none finds it due before the grace has passed
            clock.advance(missed.NOTICE_GRACE - 0.1)
            client._rescans.scheduled()
            client._rescans.scheduled()
            assert_quiet(watch, 0)
            # the first after the grace finds it due, the second publishes it
            clock.advance(0.1)
            client._rescans.scheduled()
            assert_quiet(watch, 0)
            client._rescans.scheduled()
            assert next_event(watch) == ds.Added(changed)
            assert next_event(watch) == ds.Resync((changed,))


def test_full_scans_read_no_file_whose_mtime_alone_moved_and_deep_ones_read_each_once(store, reads):
    with connect(store, ttl=30, rescan_interval=3600) as client:
        paths = [hand_written(store, f"e{i}", i + 1)[1] for i in range(5)]
        assert len(client.list(ds.Query.endpoints())) == 5
        for path in paths:
            os.utime(path)
        reads.clear()
        client.rescan(scan=FULL)
        assert reads == []
        client.rescan()
        assert sorted(reads) == sorted(p.name for p in paths)  # verified once
        reads.clear()
        client.rescan()
        assert reads == []


def test_the_rescan_thread_re_reads_a_heartbeated_file_only_in_every_few_full_scans(store, reads, monkeypatch, steps):
    monkeypatch.setattr(file_rescan, "DEEP_EVERY", 3)
    # ttl 1: rescans every 1/3 s, full scans every 0.5 s, deep ones every 1.5 s
    with connect(store, steps.clock, ttl=1) as client:
        _, path = hand_written(store, "beating", 3)
        mtime_ns = path.stat().st_mtime_ns
        assert len(client.list(ds.Query.endpoints())) == 1

        def beat_for(seconds: float) -> None:
            nonlocal mtime_ns
            for _ in range(round(seconds / 0.1)):
                mtime_ns += NS // 10
                os.utime(path, ns=(mtime_ns, mtime_ns))
                steps.advance(0.1)

        beat_for(1.0)  # past the first (deep) scan
        reads.clear()
        beat_for(3.0)
        # every rescan re-read it before: 9 in 3 s; now only deep scans do (2, maybe 3)
        assert 1 <= len(reads) <= 3, reads
        assert client.list(ds.Query.endpoints())


@pytest.fixture
def stat_checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names whose stat a scan handed to the view (a file the scan took as unchanged, or as
    one of the client's own kept alive, is not among them)."""
    names: list[str] = []
    real = BucketView._update

    def counting(self: BucketView, dir_fd: int, name: str, st: os.stat_result | None, *args, **kwargs) -> None:
        if st is not None:
            names.append(name)
        real(self, dir_fd, name, st, *args, **kwargs)

    monkeypatch.setattr(BucketView, "_update", counting)
    yield names


def test_a_full_scan_takes_the_holders_own_files_as_alive_without_stating_them(store, stat_checked):
    # ttl 30: a beat every 10 s, a full scan every 15 s; the test runs both itself
    with connect(store, ttl=30) as holder:
        mine = [holder.register(endpoint_spec(endpoint=f"mine{i}", port=9000 + i)) for i in range(3)]
        my_names = {record_name(record.id()) for record in mine}
        other, other_path = hand_written(store, "other", 9)
        assert len(holder.list(ds.Query.endpoints())) == 4  # the view knows every file
        holder._liveness.beat()
        beaten_at = holder._liveness.beaten_at
        entries = holder._views[RecordKind.ENDPOINT]._entries
        stat_checked.clear()
        holder.rescan(scan=FULL)
        assert stat_checked == [other_path.name]  # its own files: the listing's inode was enough
        assert all(entries[name].seen_at == beaten_at for name in my_names)
        assert sorted(holder.list(ds.Query.endpoints()), key=lambda r: r.endpoint) == sorted(
            [*mine, other], key=lambda r: r.endpoint
        )

        # one of its files replaced by another writer: another inode, stat-ed (its write-back, once
        # the change has stood the notice grace, is test_hostile_store's)
        replaced = store / "v1" / "instances" / record_name(mine[0].id())
        stranger = replaced.with_name(".stranger")
        impostor = dataclasses.replace(mine[0], transport=ds.Transport.tcp("10.0.0.1:1"))
        stranger.write_bytes(ds.instance_to_json(impostor))
        os.replace(stranger, replaced)
        stat_checked.clear()
        holder.rescan(scan=FULL)
        assert sorted(stat_checked) == sorted([other_path.name, replaced.name])

        # a deep scan stats every file, its own included
        stat_checked.clear()
        holder.rescan()
        assert set(stat_checked) == my_names | {other_path.name}
