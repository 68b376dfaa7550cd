"""A store on a full disk (no space, no inodes), over quota or read-only: every failure is a
BackendUnavailable that says what is wrong and what to do, and nothing is left behind — no lock
marker that would make the next writer wait for the stale bound, no temp file in a bucket. The
disks are real: a tmpfs of the test's own, filled up (this suite runs as root, as CI does; a
mount that fails fails the test)."""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from discovery_sync.backends.file.owner_lock import owner_name
from discovery_sync.backends.file.softlock import MARKER_SIZE, SoftLocks, marker_bytes

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, model_spec

BUCKETS = ("instances", "mdc", "event_channels", "event_sources")
HELD_STALE = 0.4  # the holder rewrites its marker every 0.1 s


@pytest.fixture
def clients() -> Iterator[list[ds.Discovery]]:
    """Clients the test connected: shut down before the disk is unmounted."""
    made: list[ds.Discovery] = []
    yield made
    for client in made:
        client.shutdown()


def connect(clients: list[ds.Discovery], store: Path, lock: str) -> ds.Discovery:
    clients.append(ds.connect(f"file://{store}?lock={lock}"))
    return clients[-1]


def leftovers(store: Path, clients: list[ds.Discovery]) -> list[str]:
    """Lock markers and temp files anywhere in the store (not the owner files of live ``clients``)."""
    live = {owner_name(client.instance_id) for client in clients}
    found = [f".locks/{name}" for name in os.listdir(store / ".locks") if name not in live]
    for bucket in BUCKETS:
        found += [f"{bucket}/{name}" for name in os.listdir(store / "v1" / bucket) if name.startswith(".")]
    return found


@pytest.mark.parametrize("lock", ["soft", "hard"])
@pytest.mark.parametrize("full", ["space", "inodes"])
def test_registering_on_a_full_disk_fails_clearly_and_leaves_nothing_behind(disk, clients, thread_log, lock, full):
    first = connect(clients, disk.store, lock)
    disk.fill(full)
    with pytest.raises(ds.BackendUnavailable, match=r"is full \(.*No space left on device.*df -h.*df -i"):
        first.register(model_spec())
    with pytest.raises(ds.BackendUnavailable, match="is full"):
        first.register(endpoint_spec())  # no lock taken: the record write itself fails
    assert leftovers(disk.store, clients) == []
    assert first.owned() == ()

    disk.free()
    second = connect(clients, disk.store, lock)
    started = time.monotonic()
    model = second.register(model_spec())
    assert time.monotonic() - started < 5  # no marker left to wait out for lock_stale (10 s)
    assert first.list(ds.Query.models()) == [model]
    assert first.register(endpoint_spec()) in first.list(ds.Query.endpoints())  # the first client works again
    assert thread_log.matching("soft lock") == []
    assert leftovers(disk.store, clients) == []


@pytest.mark.parametrize("lock", ["soft", "hard"])
def test_registering_on_a_read_only_store_says_so(disk, clients, lock):
    if lock == "hard":
        disk.keep_locks_apart()  # a live writer's owner file, open for writing, would refuse the remount
    client = connect(clients, disk.store, lock)
    disk.read_only(True)
    try:
        with pytest.raises(ds.BackendUnavailable, match=r"read-only \(.*Read-only file system.*read-write"):
            client.register(model_spec())
    finally:
        disk.read_only(False)
    assert leftovers(disk.store, clients) == []
    client.register(model_spec())


def test_an_exhausted_quota_says_so():
    # a real quota needs quota tools and a filesystem set up for it; the message is ours alone
    from discovery_sync.backends.file.oserrors import storage_error

    exc = storage_error(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "cannot write /store/v1/mdc/x")
    assert isinstance(exc, ds.BackendUnavailable)
    assert str(exc).startswith("cannot write /store/v1/mdc/x: the disk quota")
    assert "Disk quota exceeded" in str(exc) and "raise the quota" in str(exc)


@pytest.mark.parametrize("full", ["space", "inodes"])
def test_a_held_marker_stays_fresh_and_whole_on_a_full_disk(disk, full):
    lock_dir = disk.path / "locks"
    lock_dir.mkdir()
    marker = lock_dir / "bucket.lock"
    holder, waiter = SoftLocks(10, HELD_STALE), SoftLocks(10, HELD_STALE)
    dir_fd = os.open(lock_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        held = holder.acquire(marker, dir_fd)
        disk.fill(full)
        changes = [(time.monotonic(), marker.read_bytes())]
        end = changes[0][0] + 2.5 * HELD_STALE
        while (now := time.monotonic()) < end:  # watched as a waiter on another host would
            content = marker.read_bytes()
            if content != changes[-1][1]:
                changes.append((now, content))
            time.sleep(0.01)
        for _, content in changes:  # never empty, cut short or another holder's
            assert len(content) == MARKER_SIZE
            assert orjson.loads(content)["token"] == held.token
        unchanged = [later - earlier for earlier, later in itertools.pairwise([t for t, _ in changes] + [end])]
        assert max(unchanged) < HELD_STALE  # no waiter would take it for a dead holder's

        with pytest.raises(OSError) as refused:  # a waiter cannot even write its own marker:
            waiter.acquire(marker, dir_fd)  # it fails at once, breaks nothing, leaves nothing
        assert refused.value.errno == errno.ENOSPC
        with holder._held_lock:  # no refresh of the holder under way (its own file lives for microseconds)
            assert os.listdir(lock_dir) == ["bucket.lock"]
        assert orjson.loads(marker.read_bytes())["token"] == held.token
        holder.release(held)  # unlinking needs no space
        assert os.listdir(lock_dir) == []
    finally:
        holder.close()
        waiter.close()
        os.close(dir_fd)


def test_a_release_the_store_refuses_is_logged_not_raised(disk, thread_log):
    lock_dir = disk.path / "locks"
    lock_dir.mkdir()
    marker = lock_dir / "bucket.lock"
    locks = SoftLocks(10, 10.0)
    try:
        held = locks.acquire(marker)
        disk.read_only(True)
        try:
            locks.release(held)  # what ran under the lock is done: the caller is not told it failed
        finally:
            disk.read_only(False)
    finally:
        locks.close()
    assert thread_log.matching("cannot remove the soft lock") == [
        f"cannot remove the soft lock {marker} on release: the filesystem holding the store is read-only "
        "(Read-only file system, errno EROFS); remount it read-write and retry, or connect with read_only=true "
        "to only read the store; other writers wait for it to go stale (10 s) and then break it"
    ]
    assert os.listdir(lock_dir) == ["bucket.lock"]  # whole, so waiters break it once stale


def test_an_empty_marker_of_another_tool_is_still_broken_once_stale(tmp_path, thread_log):
    marker = tmp_path / "bucket.lock"
    marker.touch()  # created, never written: as older clients left one on a full disk
    locks = SoftLocks(5, HELD_STALE)
    try:
        started = time.monotonic()
        held = locks.acquire(marker)
        assert time.monotonic() - started >= HELD_STALE
        assert marker.read_bytes() == marker_bytes(held.token, 0, held.acquired)
        locks.release(held)
    finally:
        locks.close()
    assert locks.broken == 1
    assert thread_log.matching("an unknown holder (unreadable marker)")


def test_markers_linked_into_place_exclude_each_other(tmp_path):
    lock_dir = tmp_path
    marker = lock_dir / "bucket.lock"
    inside = 0
    most = 0
    guard = threading.Lock()
    locks = [SoftLocks(10, 5.0) for _ in range(4)]

    def contend(soft: SoftLocks) -> None:
        nonlocal inside, most
        for _ in range(25):
            with soft.hold(marker):
                with guard:
                    inside += 1
                    most = max(most, inside)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=contend, args=(soft,), name="test-contender") for soft in locks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for soft in locks:
        soft.close()
    assert most == 1 and os.listdir(lock_dir) == []
