"""The file backend against files put in the store by hand, as other writers would."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file import locks, missed
from discovery_sync.backends.file import view as file_view
from discovery_sync.backends.file.owner_lock import owner_name
from discovery_sync.backends.file.view import BucketView

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from testrigs.helpers import assert_quiet, endpoint_spec, initial_state, next_event
from tests.file.clocked import Steps
from tests.file.junk import hand_written

TTL = 2.0
RESCAN = 0.2


def client_url(store: Path) -> str:
    return f"file://{store}?ttl={TTL}&rescan_interval={RESCAN}&uniform_ttl=true"


@pytest.fixture
def client(store: Path) -> Iterator[ds.Discovery]:
    client = ds.connect(client_url(store))
    try:
        yield client
    finally:
        client.shutdown()


@pytest.fixture
def clocked(store: Path, steps: Steps) -> Iterator[ds.Discovery]:
    """``client``, on the manual clock ``steps`` moves."""
    client = ds.connect(client_url(store), clock=steps.clock)
    try:
        yield client
    finally:
        client.shutdown()


def test_corrupt_files_are_skipped_with_one_warning_and_the_watch_goes_on(store, client, warnings):
    good, _ = hand_written(store, "good", 1)
    torn, truncated = hand_written(store, "truncated", 2)
    with client.list_and_watch(ds.Query.endpoints()) as watch:
        assert set(initial_state(watch)[1].instances) == {good, torn}
        os.truncate(truncated, 10)  # a torn write by a non-atomic writer
        garbage = store / "v1" / "instances" / "ns%2Fbackend%2Fgarbage%2F3"
        garbage.write_bytes(b"\x00\xffnot json at all")
        assert len(warnings.wait_for("truncated")) == 1
        assert len(warnings.wait_for("garbage")) == 1
        later = client.register(endpoint_spec(endpoint="later"))
        assert next_event(watch) == ds.Added(later)  # the watch goes on
        # the torn record keeps its last valid value; garbage never becomes a record
        assert set(client.list(ds.Query.endpoints())) == {good, torn, later}
        client.rescan()
        client.rescan()
        assert len(warnings.wait_for("garbage", timeout=0)) == 1  # one warning per path and version
        assert_quiet(watch, 3 * RESCAN)


def test_a_rescan_delivers_changes_notifications_missed_then_resyncs(store, steps):
    # a polling observer that never polls: only the periodic rescan can see changes
    client = ds.connect(
        f"file://{store}?observer=polling&poll_interval=3600&rescan_interval={RESCAN}&ttl=5", clock=steps.clock
    )
    grace = missed.notice_grace("polling", 3600)  # three polls, at most 3 s

    def found(watch: ds.Watch) -> ds.DiscoveryEvent:
        """The next event, which the rescans held back for the grace, then found still there."""
        changed_at = steps.clock.monotonic()
        event, at = steps.until_event(watch, step=RESCAN / 2, limit=10)
        assert grace <= at - changed_at <= grace + 4 * RESCAN
        return event

    try:
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            assert next_event(watch) == ds.Resync(())
            record, path = hand_written(store, "unseen", 7)
            assert found(watch) == ds.Added(record)
            assert next_event(watch) == ds.Resync((record,))
            path.unlink()
            assert found(watch) == ds.Removed(record.id())
            assert next_event(watch) == ds.Resync(())
            steps.run(4 * RESCAN, step=RESCAN)
            assert_quiet(watch, 0)
    finally:
        client.shutdown()


def test_a_notification_slower_than_a_rescan_is_not_taken_for_a_missed_change(store, client):
    # polls five rescans apart: rescans see every change first, the poll delivers it later. The
    # grace is then 3 s (3 polls, the most it gets): a poll that came 1.2 s late on a loaded machine
    # outran the 1.8 s grace of poll_interval=0.6 (seen twice, in runs beside other suites)
    slow = ds.connect(f"file://{store}?observer=polling&poll_interval=1.0&rescan_interval={RESCAN}&ttl=5")
    try:
        with slow.list_and_watch(ds.Query.endpoints()) as watch:
            assert next_event(watch) == ds.Resync(())
            for round_ in range(3):
                registered = [client.register(endpoint_spec(endpoint=f"r{round_}-{i}")) for i in range(3)]
                assert {next_event(watch) for _ in registered} == {ds.Added(e) for e in registered}
                for endpoint in registered:
                    client.unregister(endpoint)
                assert {next_event(watch) for _ in registered} == {ds.Removed(e.id()) for e in registered}
            assert_quiet(watch, 4 * RESCAN)  # no Resync: nothing was missed
    finally:
        slow.shutdown()


@pytest.mark.usefixtures("deaf")
def test_a_file_removed_between_a_rescans_listing_and_its_read_waits_for_its_notification(store, monkeypatch):
    # notifications are lost and rescans run only when called: a deep rescan stats the file (its
    # mtime moved: a heartbeat), and its writer removes it before the rescan reads it
    clock = ManualClock()
    client = ds.connect(f"file://{store}?ttl=30&rescan_interval=3600", clock=clock)
    record, path = hand_written(store, "late", 7)
    real_read = file_view.read_regular

    def removed_first(dir_fd: int | None, name: str, limit: int) -> object:
        if name == path.name:
            path.unlink(missing_ok=True)
        return real_read(dir_fd, name, limit)

    try:
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            assert initial_state(watch)[1].instances == (record,)
            later = time.time() + 1
            os.utime(path, (later, later))
            monkeypatch.setattr(file_view, "read_regular", removed_first)
            client.rescan()
            assert not path.exists()
            # like any change a rescan finds, a notification may still deliver it: not missed yet
            assert_quiet(watch, 0)
            monkeypatch.setattr(file_view, "read_regular", real_read)
            clock.advance(missed.NOTICE_GRACE - 0.1)
            client.rescan()  # not due yet
            assert_quiet(watch, 0)
            clock.advance(0.1)
            client.rescan()  # due
            assert_quiet(watch, 0)
            client.rescan()
            assert next_event(watch) == ds.Removed(record.id())
            assert next_event(watch) == ds.Resync(())
    finally:
        client.shutdown()


def test_records_without_heartbeat_are_removed_after_ttl_on_the_readers_clock(store, client):
    record, path = hand_written(store, "orphan", 9)
    old = time.time() - 3600
    os.utime(path, (old, old))  # an mtime from long ago is not death on first sight
    with client.list_and_watch(ds.Query.endpoints()) as watch:
        assert initial_state(watch)[1].instances == (record,)
        seen_at = time.monotonic()
        assert next_event(watch, timeout=TTL + 5) == ds.Removed(record.id())
        assert time.monotonic() - seen_at >= TTL - RESCAN
    assert not path.exists()


@pytest.mark.parametrize("skew", [-60.0, 60.0])
def test_a_skewed_writer_stays_alive_while_its_mtime_moves(store, clocked, steps, skew):
    record, path = hand_written(store, "skewed", 11)
    with clocked.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        stamp = time.time() + skew  # a host whose clock is a minute off
        for _ in range(3 * 4):  # three TTLs
            stamp += TTL / 4  # its heartbeat
            os.utime(path, (stamp, stamp))
            steps.advance(TTL / 4)
            assert_quiet(watch, 0)
    assert clocked.list(ds.Query.endpoints()) == [record]


def test_an_owner_rewrites_a_record_swept_while_it_was_alive(store, clocked, steps, warnings):
    endpoint = clocked.register(endpoint_spec())
    path = store / "v1" / "instances" / f"ns%2Fbackend%2Fgenerate%2F{clocked.instance_id:x}"
    path.unlink()  # as a sweeper with a wrong clock would
    unlinked_at, step = steps.clock.monotonic(), 0.05
    written_at = steps.until(lambda: warnings.matching("wrote it again"), step=step, limit=TTL + 5)
    assert written_at - unlinked_at <= clocked.heartbeat_interval + step  # by its next heartbeat
    assert ds.instance_from_json(path.read_bytes()) == endpoint


def test_names_too_long_for_the_filesystem_are_refused(store, client):
    with pytest.raises(ds.ValidationError, match="too long"):
        client.register(ds.EventChannelSpec(ds.EventScope("ns"), "é" * 40, ds.NatsTransport("x")))
    assert os.listdir(store / "v1" / "event_channels") == []


def test_temp_files_stay_out_of_the_records(store, client):
    bucket = store / "v1" / "mdc"
    (bucket / ".tmp_0123456789abcdef").write_bytes(b"{half")
    client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
    assert [m.card_json for m in client.list(ds.Query.models())] == [{"display_name": "m"}]
    assert sorted(os.listdir(bucket)) == [".tmp_0123456789abcdef", f"ns%2Fbackend%2Fgenerate%2F{client.instance_id:x}"]


def test_leftover_temp_and_hidden_files_are_swept_once_still_for_the_ttl(store, client):
    """A writer killed mid-write leaves its temp file, a network filesystem the copy of a file
    deleted while open (``.fuse_hidden*``, ``.nfs*``): swept by the liveness rule of records."""
    bucket = store / "v1" / "instances"
    leftovers = [bucket / ".tmp_00000000000000aa", bucket / ".fuse_hidden0000001a00000002", bucket / ".nfs00000001"]
    for path in leftovers:
        path.write_bytes(b"{}")
    other = bucket / ".keep-me"  # not ours to judge
    other.write_bytes(b"")
    record, path = hand_written(store, "alive", 5)
    client.rescan()
    client.rescan()
    assert all(p.exists() for p in leftovers)  # not on first sight: judged on the reader's clock
    with client.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        stop = time.monotonic() + TTL + 3 * RESCAN
        while time.monotonic() < stop:  # keep the record alive while the leftovers go
            os.utime(path)
            assert_quiet(watch, TTL / 4)
        client.rescan()  # the leftovers were first seen more than a TTL ago
    assert sorted(os.listdir(bucket)) == [".keep-me", path.name]
    assert client.list(ds.Query.endpoints()) == [record]


def test_unreadable_content_is_reported_once_it_has_stood_for_the_cache_window(store, warnings):
    """Within a network mount's cache window a replaced file can be read cut to its cached size:
    what cannot be parsed is reported only when it is still there one window later."""
    from discovery_sync.backends.file.directory import StoreDirectory

    clock = ManualClock(start=100.0)
    events: list[ds.DiscoveryEvent] = []
    bucket = StoreDirectory(store, "v1/instances")
    bucket.open(create=True)
    view = BucketView(ds.RecordKind.ENDPOINT, bucket, 10.0, settle=5.0, clock=clock)

    def refresh() -> None:
        events.extend(event for event, _ in view.scan_deep())

    record, path = hand_written(store, "replaced", 4)
    refresh()
    assert events == [ds.Added(record)]
    path.write_bytes(ds.instance_to_json(record)[:20])  # as a read cut to a stale size sees it
    refresh()
    view.warn_pending()
    clock.advance(4.9)
    view.warn_pending()
    assert warnings.messages == []
    newer = ds.Endpoint("ns", "backend", "replaced", 4, ds.Transport.tcp("127.0.0.1:2"))
    path.write_bytes(ds.instance_to_json(newer))  # the whole content, once the cache expired
    refresh()
    clock.advance(10)
    view.warn_pending()
    assert warnings.messages == []  # the cut read never stood for the window
    assert events == [ds.Added(record), ds.Added(newer)]  # a replaced endpoint
    path.write_bytes(b"{not json")  # really unreadable
    refresh()
    view.warn_pending()
    assert warnings.messages == []
    clock.advance(5)
    view.warn_pending()
    view.warn_pending()
    assert len(warnings.messages) == 1 and "replaced" in warnings.messages[0]
    assert view.valid() == [newer]  # the last valid value stays


def test_model_registration_locks_the_bucket_directory_like_reference_workers(store):
    client = ds.connect(f"file://{store}?lock_timeout=0.3")
    try:
        holder = os.open(store / "v1" / "mdc", os.O_RDONLY)  # what a reference worker does before a change
        fcntl.flock(holder, fcntl.LOCK_EX)
        try:
            with pytest.raises(ds.LockTimeout, match="v1/mdc"):
                client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
            assert os.listdir(store / "v1" / "mdc") == []
            client.register(endpoint_spec())  # plain creates are atomic links and need no lock
        finally:
            os.close(holder)
        client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
        assert os.listdir(store / ".locks") == [owner_name(client.instance_id)]  # hard locks leave none behind
    finally:
        client.shutdown()


def test_a_hard_lock_timeout_names_the_process_holding_the_bucket(store):
    client = ds.connect(f"file://{store}?lock_timeout=0.3")
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.lock_holder", "--flock", str(store / "v1" / "mdc")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        name = Path(f"/proc/{holder.pid}/comm").read_text().strip()
        with pytest.raises(ds.LockTimeout, match=rf"held by pid {holder.pid} \({re.escape(name)}\)"):
            client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
    finally:
        holder.kill()
        holder.wait()
        client.shutdown()


def test_a_hard_lock_timeout_says_plainly_when_the_holder_is_unknown(store, monkeypatch):
    monkeypatch.setattr(locks, "PROC_LOCKS", store / "no-proc-locks")
    client = ds.connect(f"file://{store}?lock_timeout=0.1")
    holder = os.open(store / "v1" / "mdc", os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(ds.LockTimeout, match="its holder is unknown: /proc/locks is unreadable"):
            client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
    finally:
        os.close(holder)
        client.shutdown()


def test_proc_locks_lines_are_matched_by_device_and_inode_and_waiters_are_left_out():
    device = os.makedev(0xFE, 0)
    text = (
        "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5497251 0 EOF\n"
        "1: -> FLOCK  ADVISORY  WRITE 999 fe:00:5497251 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 77 fe:01:5497251 0 EOF\n"
        "3: POSIX  ADVISORY  WRITE 55 fe:00:5497251 0 EOF\n"
        "4: FLOCK  ADVISORY  WRITE 0 fe:00:5497251 0 EOF\n"
    )
    assert locks.flock_holders(text, device, 5497251) == [1234, 0]
    assert locks.flock_holders(text, device, 5497252) == []


def test_a_lagging_consumer_gets_the_missed_changes_and_a_resync(store, client):
    with client.list_and_watch(ds.Query.endpoints(), queue_size=4) as watch:
        assert next_event(watch) == ds.Resync(())
        registered = [client.register(endpoint_spec(endpoint=f"e{i}")) for i in range(20)]
        for record in registered[:5]:
            client.unregister(record)
        expected = {r.id(): r for r in registered[5:]}
        # list() reads the store in this thread and feeds the watch as it goes: by its return the
        # watch has been handed all 15 changes without its consumer taking any
        assert {e.id() for e in client.list(ds.Query.endpoints())} == expected.keys()
        events = []
        while not events or not isinstance(events[-1], ds.Resync):
            events.append(next_event(watch))
        resync = events[-1]
        assert {i.id(): i for i in resync.instances} == expected
        # the queued events, then the difference to what the consumer missed, then the Resync
        state: dict = {}
        for event in events[:-1]:
            if isinstance(event, ds.Added):
                state[event.instance.id()] = event.instance
            else:
                state.pop(event.id)
        assert state == expected
        assert_quiet(watch, 3 * RESCAN)


def test_a_store_that_vanishes_fails_the_watch_loudly_and_threads_stop(store):
    client = ds.connect(f"file://{store}?ttl=3&rescan_interval={RESCAN}")
    watch = client.list_and_watch(ds.Query.endpoints())
    assert next_event(watch) == ds.Resync(())
    shutil.rmtree(store)
    with pytest.raises(ds.WatchFailed, match="cannot watch the file store") as failure:
        next_event(watch)
    assert isinstance(failure.value.__cause__, ds.BackendUnavailable)
    client.shutdown()
    leftovers = [t.name for t in threading.enumerate() if t.name.startswith("discovery-sync") or "Inotify" in repr(t)]
    assert leftovers == []


def test_every_background_thread_is_named_daemonic_and_stopped_by_shutdown(store):
    before = set(threading.enumerate())
    client = ds.connect(f"file://{store}")
    watch = client.list_and_watch(ds.Query.endpoints())
    started = set(threading.enumerate()) - before
    assert started, "the client runs its heartbeat, rescan and observer threads"
    assert all(t.name.startswith("discovery-sync-file-") and t.daemon for t in started), started
    client.shutdown()
    assert watch.closed
    for thread in started:
        thread.join(5)
    assert not [t for t in started if t.is_alive()]
