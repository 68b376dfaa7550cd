"""discovery_sync.testing.ManualClock: time stands still until advanced; due waits run in order."""

from __future__ import annotations

import threading
import time

import pytest

from discovery_sync.clock import SYSTEM
from discovery_sync.errors import ValidationError
from discovery_sync.periodic import PeriodicThread
from discovery_sync.testing import ClockStuck, ManualClock


def test_time_stands_still_until_advanced() -> None:
    clock = ManualClock(start=50.0)
    wall = clock.time()
    assert clock.monotonic() == 50.0
    clock.advance(2.5)
    assert clock.monotonic() == 52.5
    assert clock.time() == pytest.approx(wall + 2.5)
    with pytest.raises(ValidationError, match="only goes forward"):
        clock.advance(-1)


def test_advance_runs_each_due_job_in_order_and_waits_for_it() -> None:
    clock = ManualClock()
    runs: list[tuple[str, float]] = []
    fast = PeriodicThread("test-fast", 1.0, lambda: runs.append(("fast", clock.monotonic())), clock=clock)
    slow = PeriodicThread("test-slow", 2.5, lambda: runs.append(("slow", clock.monotonic())), clock=clock)
    fast.start()
    slow.start()
    try:
        clock.advance(0.5)
        assert runs == []
        clock.advance(2.5)  # to 1003.0: fast at 1001, 1002, 1003; slow at 1002.5
        assert runs == [("fast", 1001.0), ("fast", 1002.0), ("slow", 1002.5), ("fast", 1003.0)]
    finally:
        fast.stop()
        slow.stop()
    assert not fast.is_alive() and not slow.is_alive()


def test_a_woken_thread_cuts_its_wait_short_and_a_stopped_one_is_not_waited_for() -> None:
    clock = ManualClock()
    ran = threading.Event()
    thread = PeriodicThread("test-woken", 100.0, ran.set, clock=clock)
    thread.start()
    thread.wake()
    assert ran.wait(5)
    clock.settle()  # back in its wait
    thread.stop()
    clock.advance(1000)  # nothing waits any more


def test_a_thread_blocked_elsewhere_is_reported_not_waited_for_forever() -> None:
    clock = ManualClock(settle_timeout=0.2)
    gate = threading.Lock()
    gate.acquire()

    def job() -> None:
        with gate:
            pass

    thread = PeriodicThread("test-blocked", 1.0, job, clock=clock)
    thread.start()
    try:
        with pytest.raises(ClockStuck, match="test-blocked"):
            clock.advance(1.0)
    finally:
        gate.release()
        thread.stop()


def test_the_system_clock_waits_in_real_time() -> None:
    wake = threading.Event()
    assert SYSTEM.wait(wake, 0.01) is False
    wake.set()
    assert SYSTEM.wait(wake, 10) is True
    assert abs(SYSTEM.time() - SYSTEM.time()) < 1


def test_a_woken_thread_that_ends_instead_of_waiting_again_releases_advance_at_once() -> None:
    clock = ManualClock(settle_timeout=5.0)
    woken = threading.Event()

    def once() -> None:
        clock.wait(threading.Event(), 1.0)
        woken.set()
        sum(range(10**6))  # still at work when advance() first looks, then ends: nobody is notified

    thread = threading.Thread(target=once, name="test-ending", daemon=True)
    clock.enroll(thread)
    thread.start()
    began = time.monotonic()
    clock.advance(1.0)
    assert woken.is_set() and not thread.is_alive()
    assert time.monotonic() - began < 2.5  # not the settle timeout


def test_a_wait_shorter_than_the_clocks_resolution_still_ends_a_step_later() -> None:
    """1000.0 + 1e-14 is 1000.0 in a float: such a wait falls due at the next float, not at once
    forever (a loop waiting out a remainder that small kept advance() busy without moving on)."""
    clock = ManualClock(start=1000.0)
    wake = threading.Event()
    waits: list[float] = []

    def tiny_waits() -> None:
        for _ in range(3):
            clock.wait(wake, 1e-14)
            wake.clear()
            waits.append(clock.monotonic())

    thread = threading.Thread(target=tiny_waits, name="test-tiny-waits")
    clock.enroll(thread)
    thread.start()
    clock.advance(1.0)
    thread.join(5)
    assert not thread.is_alive()
    assert 1000.0 < waits[0] < waits[1] < waits[2] < 1000.001
