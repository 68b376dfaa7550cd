"""Read-only file clients (``read_only=true``) against real directories: they never change the
store, a missing store is an empty one to them, and they see it once a writer creates it."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file import FileDiscovery

import discovery_sync as ds
from testrigs.helpers import assert_quiet, caught_logs, endpoint_spec, initial_state, model_spec, next_event
from tests.file.junk import hand_written, our_threads

TTL = 1.0  # the shortest the store accepts: dead records are judged within seconds
RESCAN = 0.1
LOGGER = "discovery_sync.backends.file"
OBSERVERS = ["inotify", "polling"]
# a change that only the rescan's missed-change path would deliver comes after the notice grace
# (1 s, see missed.NOTICE_GRACE) and one more rescan, followed by a Resync: quiet this long means
# it came as an event
NO_RESYNC_PERIOD = 1.5


def url(root: Path, observer: str = "inotify", **extra: object) -> str:
    options = {"observer": observer, "ttl": TTL, "rescan_interval": RESCAN, "poll_interval": 0.1, **extra}
    options.setdefault("uniform_ttl", "true")  # records that never beat die after TTL
    return f"file://{root}?" + "&".join(f"{key}={value}" for key, value in options.items())


@pytest.fixture
def connected() -> Iterator[Callable[[str], ds.Discovery]]:
    """Connects clients and shuts down whichever the test left open."""
    clients: list[ds.Discovery] = []

    def connect(address: str, **options: object) -> ds.Discovery:
        client = ds.connect(address, **options)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.shutdown()


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path below ``root`` (and root) with its inode and mtime: a directory's mtime moves
    with every entry created or removed in it, a file's with every write or touch."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(directory) / name
            st = os.lstat(path)
            found[str(path.resolve() if name == "." else path)] = (st.st_ino, st.st_mtime_ns)
    return found


def exercise(reader: ds.Discovery, *, gc: bool = True) -> dict:
    """Everything a read-only client does: list, get, watch, check, diagnose, dry-run gc, shut down.
    Returns the diagnose report."""
    assert reader.read_only
    assert reader.list(ds.Query.endpoints()) == []
    assert reader.list(ds.Query.models()) == []
    assert reader.get(ds.EndpointInstanceId("ns", "backend", "generate", 1)) is None
    assert reader.get(ds.EventChannelInstanceId(ds.EventScope("ns"), "kv", 1)) is None
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert next_event(watch) == ds.Resync(())  # at once: there is nothing
        assert_quiet(watch, 3 * RESCAN)  # rescans of a missing store fail nothing
    reader.check_connection()
    report = reader.diagnose()
    if gc:
        assert reader.collect_garbage(dry_run=True) == []
    reader.shutdown()
    return report


@pytest.mark.parametrize("observer", OBSERVERS)
def test_a_missing_store_is_empty_and_stays_missing(tmp_path, connected, observer):
    root = tmp_path / "parent" / "store"
    report = exercise(connected(url(root, observer, read_only="true")))
    assert not root.exists() and not root.parent.exists()
    assert report["read_only"] is True and "instance_id" not in report
    [problem] = report["problems"]
    assert f"the file store {root} does not exist yet" in problem
    assert "DYN_FILE_KV" in problem


def test_a_store_root_without_buckets_gets_no_bucket(tmp_path, connected):
    root = tmp_path / "store"
    root.mkdir()
    before = tree(root)
    report = exercise(connected(url(root), read_only=True))
    assert os.listdir(root) == []
    assert tree(root) == before
    [problem] = report["problems"]
    assert "exists but holds no bucket" in problem


def test_some_buckets_missing_is_no_problem_for_a_reader(tmp_path, connected):
    root = tmp_path / "store"
    (root / "v1" / "instances").mkdir(parents=True)
    record, _ = hand_written(root, "here", 3)
    reader = connected(url(root), read_only=True)
    assert reader.list(ds.Query.endpoints()) == [record]
    assert reader.get(record.id()) == record
    assert reader.list(ds.Query.models()) == []
    assert reader.diagnose()["problems"] == []
    assert sorted(os.listdir(root / "v1")) == ["instances"]


def test_a_reader_changes_nothing_in_a_store_that_exists(tmp_path, connected):
    root = tmp_path / "store"
    connected(url(root)).shutdown()  # a writer made the store and left
    records = [hand_written(root, name, i)[0] for i, name in enumerate(["a", "b", "c"], start=1)]
    (root / "v1" / "instances" / ".tmp_00000000000000aa").write_bytes(b"{half")  # a leftover
    before = tree(root)
    reader = connected(url(root, read_only="yes"))
    assert reader.list(ds.Query.endpoints()) == records
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert initial_state(watch)[1].instances == tuple(records)
    assert reader.status()["heartbeat"] is None
    assert reader.status()["connected"]
    reader.diagnose()
    reader.shutdown()
    assert tree(root) == before  # no file written, touched, locked or deleted, no directory made


def test_a_reader_runs_no_heartbeat(tmp_path, connected):
    before = {t.name for t in our_threads()}
    connected(url(tmp_path / "store"), read_only=True)
    started = {t.name for t in our_threads()} - before
    assert "discovery-sync-file-rescan" in started
    assert "discovery-sync-file-heartbeat" not in started


def test_read_only_is_an_option_like_the_others(tmp_path):
    with pytest.raises(ds.ValidationError, match="read_only='maybe' is not valid"):
        ds.connect(url(tmp_path / "store", read_only="maybe"))
    with pytest.raises(ds.ValidationError, match="read_only=2 is not valid"):
        FileDiscovery(tmp_path / "store", read_only=2)  # type: ignore[arg-type]
    client = FileDiscovery(tmp_path / "store", read_only=True)
    try:
        assert client.read_only
        with pytest.raises(ds.ValidationError, match="read-only"):
            client.register(endpoint_spec())
    finally:
        client.shutdown()
    assert not (tmp_path / "store").exists()
    writer = ds.connect(url(tmp_path / "store", read_only="false"))
    try:
        assert not writer.read_only
        assert (tmp_path / "store" / ".locks").is_dir()  # writers create the store as before
    finally:
        writer.shutdown()


def drain_until(watch: ds.Watch, wanted: ds.DiscoveryEvent) -> list[ds.DiscoveryEvent]:
    """The events up to ``wanted`` (included)."""
    seen = []
    while not seen or seen[-1] != wanted:
        seen.append(next_event(watch))
    return seen


def quiet_but_resyncs(watch: ds.Watch, period: float, state: tuple = ()) -> None:
    """For ``period`` seconds nothing arrives but Resyncs of ``state`` (and the watch has not failed)."""
    deadline = time.monotonic() + period
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = watch.get(timeout=left)
        except ds.WatchTimeout:
            return
        assert event == ds.Resync(state), event


@pytest.mark.parametrize("observer", OBSERVERS)
def test_a_watch_on_a_missing_store_sees_the_writers_that_come(tmp_path, connected, observer):
    root = tmp_path / "store"
    reader = connected(url(root, observer), read_only=True)
    with reader.list_and_watch(ds.Query.endpoints()) as endpoints, reader.list_and_watch(ds.Query.models()) as models:
        assert next_event(endpoints) == ds.Resync(())
        assert next_event(models) == ds.Resync(())
        writer = connected(url(root, observer))
        endpoint = writer.register(endpoint_spec())  # very likely before the reader saw the bucket
        assert next_event(endpoints) == ds.Added(endpoint)  # an event, not a missed change and a Resync
        assert_quiet(endpoints, NO_RESYNC_PERIOD)
        model = writer.register(model_spec())
        assert next_event(models) == ds.Added(model)
        writer.unregister(endpoint)
        assert next_event(endpoints) == ds.Removed(endpoint.id())
        assert_quiet(endpoints, NO_RESYNC_PERIOD)
        assert reader.list(ds.Query.models()) == [model]
        assert reader.get(model.id()) == model
        writer.shutdown()
        assert next_event(models) == ds.Removed(model.id())


@pytest.mark.parametrize("observer", OBSERVERS)
def test_a_store_that_goes_away_under_a_reader_is_empty_and_may_come_back(tmp_path, connected, observer):
    root = tmp_path / "store"
    connected(url(root)).shutdown()
    record, _ = hand_written(root, "gone", 5)
    reader = connected(url(root, observer), read_only=True)
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert initial_state(watch)[1].instances == (record,)
        shutil.rmtree(root)
        drain_until(watch, ds.Removed(record.id()))
        assert reader.list(ds.Query.endpoints()) == []
        assert reader.get(record.id()) is None
        # a rescan that found the bucket gone first reports it as a missed change: a Resync follows
        quiet_but_resyncs(watch, NO_RESYNC_PERIOD)  # the watch has not failed, and nothing is recreated
        assert not root.exists()
        writer = connected(url(root))
        endpoint = writer.register(endpoint_spec())
        assert drain_until(watch, ds.Added(endpoint))[-1] == ds.Added(endpoint)
        assert reader.list(ds.Query.endpoints()) == [endpoint]


def dead_record(root: Path) -> tuple[ds.Endpoint, Path]:
    """A record whose writer is gone: an mtime from long ago (dead once a reader watched it for a TTL)."""
    (root / "v1" / "instances").mkdir(parents=True)
    record, path = hand_written(root, "orphan", 9)
    old = time.time() - 3600
    os.utime(path, (old, old))
    return record, path


def test_a_reader_reports_dead_records_removed_and_leaves_them(tmp_path, connected, steps):
    root = tmp_path / "store"
    record, path = dead_record(root)
    key = "v1/instances/ns/backend/orphan/9"
    reader = connected(url(root), read_only=True, clock=steps.clock)
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert initial_state(watch)[1].instances == (record,)
        seen_at = steps.clock.monotonic()
        event, removed_at = steps.until_event(watch, step=RESCAN, limit=TTL + 5)
        assert event == ds.Removed(record.id())
        assert removed_at - seen_at >= TTL  # judged on the reader's clock, not by the old mtime
        steps.run(5 * RESCAN, step=RESCAN)  # a few more rescans: still reported once, still there
        assert_quiet(watch, 0)
        assert path.exists()
        assert reader.list(ds.Query.endpoints()) == []
        calls: list[tuple[float, float]] = []

        def dry_run() -> object:  # it waits on the clock: on a thread of its own while the clock moves
            return reader.collect_garbage(dry_run=True, progress=lambda *call: calls.append(call))

        assert steps.call("test-dry-run", dry_run, step=RESCAN, limit=TTL + 5) == [key]
        assert path.exists()
        assert len(calls) >= 3
        elapsed = [done for done, _ in calls]
        assert elapsed == sorted(elapsed)
        assert {total for _, total in calls} == {calls[-1][1]}
        assert calls[-1][0] == calls[-1][1] >= reader.dead_after  # type: ignore[attr-defined]
        writer = connected(url(root), clock=steps.clock)
        assert steps.call("test-gc", writer.collect_garbage, step=RESCAN, limit=TTL + 5) == [key]
        assert not path.exists()
        steps.run(3 * RESCAN, step=RESCAN)
        assert_quiet(watch, 0.1)  # its removal was already reported (the notification of it comes in real time)


def test_a_writers_dry_run_removes_nothing(tmp_path, connected, caplog):
    root = tmp_path / "store"
    record, path = dead_record(root)
    key = "v1/instances/ns/backend/orphan/9"
    writer = connected(url(root))
    caplog.set_level(logging.INFO, logger=LOGGER)  # removals are logged at INFO
    with writer.list_and_watch(ds.Query.endpoints()) as watch, caught_logs(LOGGER, logging.INFO) as logs:
        initial_state(watch)
        present = []  # through the whole wait, longer than dead_after: its rescans delete nothing either
        garbage = writer.collect_garbage(dry_run=True, progress=lambda *_: present.append(path.exists()))
        assert garbage == [key] and garbage.not_removed == {}
        assert len(present) >= 3 and all(present)
        assert next_event(watch) == ds.Removed(record.id())  # dead all the same
        # once the dry run is over, its rescans sweep as always
        assert logs.wait_for("orphan%2F9: no heartbeat")
        assert not path.exists()
