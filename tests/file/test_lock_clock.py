"""Store locks, soft locks and failover locks take their time from a clock: on a manual clock their
timeouts, staleness judgements, refreshes and marker stamps follow ``advance()``, with no real
waiting (a waiter polls on the clock, so it runs on a thread of its own while the test advances)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from discovery_sync.backends.file.directory import StoreDirectory
from discovery_sync.backends.file.failover import FileFailoverLock, marker_name
from discovery_sync.backends.file.locks import StoreLocks
from discovery_sync.backends.file.softlock import SoftLocks

from discovery_sync.errors import LockTimeout
from discovery_sync.testing import ManualClock
from testrigs.helpers import in_thread

WAIT = 10.0  # real seconds: only a failing test waits them out


def on_clock(clock: ManualClock, name: str, call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """``call`` on a thread the clock lets reach its wait before it moves."""
    thread, outcome = in_thread(name, call)
    clock.enroll(thread)
    return thread, outcome


def test_a_soft_lock_waiter_times_out_by_its_clock(tmp_path: Path) -> None:
    clock = ManualClock()
    holder, waiter = SoftLocks(60, 10.0, clock=clock), SoftLocks(2.0, 10.0, clock=clock)
    marker = tmp_path / "bucket.lock"
    try:
        with holder.hold(marker):
            thread, outcome = on_clock(clock, "test-soft-waiter", lambda: waiter.acquire(marker))
            clock.advance(1.9)
            assert outcome == []
            clock.advance(0.1)  # the last poll is at the deadline, then it gives up
            thread.join(WAIT)
            assert len(outcome) == 1 and isinstance(outcome[0], LockTimeout)
            assert "within 2 s" in str(outcome[0])
    finally:
        holder.close()
        waiter.close()


def test_a_soft_marker_is_broken_after_stale_after_of_the_waiters_clock_and_stamped_by_it(tmp_path: Path) -> None:
    clock = ManualClock()
    waiter = SoftLocks(60, 5.0, clock=clock)
    marker = tmp_path / "bucket.lock"
    marker.write_bytes(b"junk left by another tool")
    try:
        thread, outcome = on_clock(clock, "test-soft-breaker", lambda: waiter.acquire(marker))
        clock.advance(4.9)
        assert outcome == [] and marker.read_bytes() == b"junk left by another tool"
        clock.advance(0.2)
        thread.join(WAIT)
        assert len(outcome) == 1 and not isinstance(outcome[0], BaseException)
        assert waiter.broken == 1
        # stamped by the clock's wall time (5 s ahead of the real one by now), when it broke the marker
        acquired = orjson.loads(marker.read_bytes())["acquired"]
        assert clock.time() - 0.2 <= acquired <= clock.time() and acquired > time.time() + 4
        waiter.release(outcome[0])
    finally:
        waiter.close()


def test_a_held_soft_marker_is_refreshed_as_the_clock_moves(tmp_path: Path) -> None:
    clock = ManualClock()
    soft = SoftLocks(60, 4.0, clock=clock)  # refreshed every second
    marker = tmp_path / "bucket.lock"
    try:
        with soft.hold(marker):
            assert orjson.loads(marker.read_bytes())["refreshes"] == 0
            clock.advance(1.0)
            assert orjson.loads(marker.read_bytes())["refreshes"] == 1
            clock.advance(2.5)
            assert orjson.loads(marker.read_bytes())["refreshes"] == 3
    finally:
        soft.close()
    assert soft._refresher is not None
    soft._refresher.join(WAIT)
    assert not soft._refresher.is_alive()  # close() ended its wait on the clock


def test_a_hard_lock_waiter_times_out_by_its_clock(tmp_path: Path, lock_dir: StoreDirectory) -> None:
    clock = ManualClock()
    bucket = StoreDirectory(tmp_path, "instances")
    bucket.open(create=True)
    held = os.open(bucket.path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another open file description: it excludes ours
    locks = StoreLocks("hard", 0.5, clock=clock)

    def take() -> None:
        with locks.hold(bucket, lock_dir, "instances.lock"):
            pass

    try:
        thread, outcome = on_clock(clock, "test-hard-waiter", take)
        clock.advance(0.4)
        assert outcome == []
        clock.advance(0.1)
        thread.join(WAIT)
        assert len(outcome) == 1 and isinstance(outcome[0], LockTimeout)
        assert "within 0.5 s" in str(outcome[0]) and "this process" in str(outcome[0])
    finally:
        os.close(held)
        bucket.close()
        locks.close()


def test_a_failover_lock_times_out_refreshes_and_breaks_by_its_clock(tmp_path: Path, lock_dir: StoreDirectory) -> None:
    clock = ManualClock()
    first, second = (
        FileFailoverLock("primary", lock_dir, mode="soft", stale_after=4.0, store_root=tmp_path, clock=clock)
        for _ in range(2)
    )
    marker = lock_dir.path / marker_name("primary")
    try:
        assert first.acquire(timeout=0)
        thread, outcome = on_clock(clock, "test-failover-waiter", lambda: second.acquire(timeout=1.5))
        clock.advance(1.5)  # the holder refreshes every second: never stale
        thread.join(WAIT)
        assert outcome == [False] and first.held
        assert orjson.loads(marker.read_bytes())["refreshes"] == 1
        first.close()  # gone without a word: its marker stays, a stranger's now
        marker.write_bytes(b"junk")
        thread, outcome = on_clock(clock, "test-failover-breaker", second.acquire)
        clock.advance(3.9)
        assert outcome == []
        clock.advance(0.2)
        thread.join(WAIT)
        assert outcome == [True] and second.held
    finally:
        first.close()
        second.close()


def test_closing_a_failover_lock_ends_its_wait_on_a_manual_clock(tmp_path: Path, lock_dir: StoreDirectory) -> None:
    clock = ManualClock()
    first, second = (
        FileFailoverLock("primary", lock_dir, mode="hard", stale_after=30.0, store_root=tmp_path, clock=clock)
        for _ in range(2)
    )
    try:
        assert first.acquire(timeout=0)
        thread, outcome = on_clock(clock, "test-failover-closed", second.acquire)
        clock.settle()  # it polls on the clock, which does not move
        second.close()
        thread.join(WAIT)
        assert not thread.is_alive() and len(outcome) == 1 and "was closed" in str(outcome[0])
    finally:
        first.close()
        second.close()
