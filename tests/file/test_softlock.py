"""Soft locks: marker files that say who holds them, stay fresh while held, and are broken only
after a holder stopped refreshing them for the stale bound (judged on the waiter's clock)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from discovery_sync.backends.file.mounts import cache_window, choose_modes, mount_of
from discovery_sync.backends.file.softlock import MARKER_SIZE, MAX_REFUSALS, RETRY_MAX, SoftLocks, marker_bytes

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from testrigs.helpers import in_thread

STALE = 1.0


def start_holder(marker: Path, stale: float = STALE, cwd: Path | None = None) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.lock_holder", str(marker), str(stale)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd or Path(__file__).resolve().parents[2],
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.fixture
def locks():
    made: list[SoftLocks] = []

    def make(timeout: float = 10.0, stale: float = STALE) -> SoftLocks:
        made.append(SoftLocks(timeout, stale))
        return made[-1]

    yield make
    for lock in made:
        lock.close()


def test_the_marker_says_who_holds_it_and_goes_with_the_release(tmp_path, locks):
    marker = tmp_path / "bucket.lock"
    soft = locks()
    with soft.hold(marker):
        content = marker.read_bytes()
        assert len(content) == MARKER_SIZE
        data = orjson.loads(content)
        assert data["pid"] == os.getpid() and data["host"] and data["token"] and data["refreshes"] == 0
        assert abs(data["acquired"] - time.time()) < 5
    assert not marker.exists()


def test_a_held_lock_times_out_a_waiter_with_the_holder_named(tmp_path, locks):
    marker = tmp_path / "bucket.lock"
    holder = start_holder(marker, stale=30)
    try:
        with pytest.raises(ds.LockTimeout, match=rf"held by host \S+ pid {holder.pid}"):
            locks(timeout=0.3, stale=30).acquire(marker)
    finally:
        holder.kill()
        holder.wait()


def test_a_live_holder_is_never_overruled_however_long_it_holds(tmp_path):
    # holder and waiter on one manual clock: the holder refreshes every STALE/4 of it, the waiter
    # polls every RETRY_MAX at most (the killed holder below is a process on the real clock)
    clock = ManualClock()
    holder, waiter = SoftLocks(10.0, STALE, clock=clock), SoftLocks(30, STALE, clock=clock)
    marker = tmp_path / "bucket.lock"
    try:
        held = holder.acquire(marker)
        thread, outcome = in_thread("test-lock-waiter", lambda: waiter.release(waiter.acquire(marker)))
        clock.enroll(thread)  # advance() lets it reach its wait before it moves
        for _ in range(4 * 10):  # four stale bounds: refreshed all along
            clock.advance(STALE / 10)
            assert outcome == []
        assert orjson.loads(marker.read_bytes())["refreshes"] == 4 * 4
        holder.release(held)
        clock.advance(RETRY_MAX)
        thread.join(10)
        assert outcome == [None]
        assert waiter.broken == 0
    finally:
        holder.close()
        waiter.close()


def test_a_killed_holders_lock_is_broken_after_the_stale_bound_never_before(tmp_path, locks, caplog):
    marker = tmp_path / "bucket.lock"
    holder = start_holder(marker)
    holder.kill()
    holder.wait()
    killed = time.monotonic()
    waiter = locks(timeout=30)
    with caplog.at_level(logging.WARNING, logger="discovery_sync.backends.file"):
        held = waiter.acquire(marker)
    waited = time.monotonic() - killed
    assert waited >= STALE
    assert waiter.broken == 1
    assert any(
        f"pid {holder.pid}" in r.getMessage() and "broke the soft lock" in r.getMessage() for r in caplog.records
    )
    assert orjson.loads(marker.read_bytes())["pid"] == os.getpid()
    waiter.release(held)
    assert not marker.exists()


def test_a_marker_that_changed_while_being_broken_is_put_back(tmp_path, locks):
    marker = tmp_path / "bucket.lock"
    fresh = marker_bytes("someone-else", 3, time.time())
    marker.write_bytes(fresh)
    breaker = locks()
    breaker._break(marker, None, marker_bytes("someone-else", 2, time.time()))  # judged stale at refresh 2
    assert marker.read_bytes() == fresh and breaker.broken == 0
    assert sorted(os.listdir(tmp_path)) == ["bucket.lock"]  # nothing left aside


def test_a_release_after_the_lock_was_broken_leaves_the_new_holders_marker(tmp_path, locks, caplog):
    marker = tmp_path / "bucket.lock"
    slow = locks(stale=30)
    held = slow.acquire(marker)
    marker.write_bytes(marker_bytes("the-breaker", 0, time.time()))  # broken and taken by another host
    with caplog.at_level(logging.WARNING, logger="discovery_sync.backends.file"):
        slow.release(held)
    assert orjson.loads(marker.read_bytes())["token"] == "the-breaker"
    assert any("was broken while this process held it" in r.getMessage() for r in caplog.records)


class RefusingLocks(SoftLocks):
    """Soft locks whose first ``refusals`` creates are refused with EPERM and no marker, as sshfs
    answers an O_EXCL race lost to a holder that released the lock before the loser looked
    (injected: the race cannot be made on demand)."""

    def __init__(self, refusals: int) -> None:
        super().__init__(timeout=5, stale_after=STALE)
        self.refusals = refusals

    def _try_create(self, marker, dir_fd, token, acquired):  # type: ignore[no-untyped-def]
        if self.refusals > 0:
            self.refusals -= 1
            raise PermissionError(1, "Operation not permitted")
        return super()._try_create(marker, dir_fd, token, acquired)


def test_a_create_refused_once_by_a_lost_race_is_tried_again(tmp_path):
    locks = RefusingLocks(refusals=2)
    try:
        with locks.hold(tmp_path / "bucket.lock"):
            assert (tmp_path / "bucket.lock").exists()
    finally:
        locks.close()


def test_a_create_refused_every_time_is_a_permission_error(tmp_path):
    locks = RefusingLocks(refusals=1000)
    try:
        with pytest.raises(PermissionError):
            locks.acquire(tmp_path / "bucket.lock")
        assert locks.refusals == 1000 - MAX_REFUSALS  # not tried until the timeout
    finally:
        locks.close()


def test_the_refresher_is_one_named_daemon_thread_stopped_by_close(tmp_path):
    soft = SoftLocks(10, STALE)
    with soft.hold(tmp_path / "a.lock"), soft.hold(tmp_path / "b.lock"):
        names = [t.name for t in threading.enumerate() if t.name == "discovery-sync-file-lock-refresh"]
        assert names == ["discovery-sync-file-lock-refresh"]
        thread = next(t for t in threading.enumerate() if t.name == names[0])
        assert thread.daemon
        time.sleep(STALE)  # let it refresh: the counter moves
        assert orjson.loads((tmp_path / "a.lock").read_bytes())["refreshes"] >= 1
    soft.close()
    thread.join(5)
    assert not thread.is_alive()


def test_a_store_with_soft_locks_breaks_a_dead_holder_and_cleans_up(tmp_path):
    store = tmp_path / "store"
    client = ds.connect(f"file://{store}?lock=soft&lock_stale={STALE}")
    try:
        holder = start_holder(store / ".locks" / "v1%2Fmdc.lock")
        holder.kill()
        holder.wait()
        model = client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
        assert client.list(ds.Query.models()) == [model]
        assert os.listdir(store / ".locks") == []
        assert client.lock_mode == "soft"
    finally:
        client.shutdown()
    assert "discovery-sync-file-lock-refresh" not in [t.name for t in threading.enumerate()]


def test_bad_lock_options_are_validation_errors(tmp_path):
    with pytest.raises(ds.ValidationError, match="lock_stale"):
        ds.connect(f"file://{tmp_path}?lock=soft&lock_stale=0")
    with pytest.raises(ds.ValidationError, match="lock_stale"):
        ds.connect(f"file://{tmp_path}?lock_stale=soon")
    with pytest.raises(ds.ValidationError, match="mode"):
        ds.connect(f"file://{tmp_path}?mode=remote")


def test_a_local_filesystem_keeps_inotify_and_hard_locks(tmp_path):
    mount = mount_of(tmp_path)
    assert not mount["network"]
    assert choose_modes(tmp_path, None, None, mount) == ("inotify", "hard")
    assert choose_modes(tmp_path, "polling", None, mount) == ("polling", "hard")
    with ds.connect(f"file://{tmp_path}") as client:
        assert (client.observer_kind, client.lock_mode) == ("inotify", "hard")
    with ds.connect(f"file://{tmp_path}?mode=shared") as client:
        assert (client.observer_kind, client.lock_mode) == ("polling", "soft")


@pytest.mark.parametrize(
    ("fs", "options", "window"),
    [
        ("ext4", ["rw"], 0.0),
        ("nfs4", ["rw", "noac"], 0.0),
        ("nfs", ["rw", "actimeo=5"], 5.0),
        ("nfs4", ["rw", "acregmax=10", "acdirmax=20"], 30.0),  # acdirmin keeps its default, 30
        ("nfs4", ["rw"], 60.0),
        ("cifs", ["rw"], 1.0),
        ("cifs", ["actimeo=0"], 0.0),
        ("fuse.sshfs", ["dir_cache=no", "attr_timeout=0", "entry_timeout=0"], 0.0),
        ("fuse.sshfs", [], 21.0),  # sshfs's cache 20 s, then the kernel's 1 s
        ("fuse.sshfs", ["dcache_timeout=2", "attr_timeout=0", "entry_timeout=0"], 2.0),
        ("fuse.sshfs", ["dcache_timeout=5", "attr_timeout=2"], 7.0),
        ("fuse.unknownfs", [], 0.0),
        ("lustre", [], None),
    ],
)
def test_cache_windows_of_common_mounts(fs, options, window):
    from discovery_sync.backends.file.mounts import NETWORK_FILESYSTEMS

    mount = {"type": fs, "options": options, "network": fs in NETWORK_FILESYSTEMS}
    assert cache_window(mount) == window
