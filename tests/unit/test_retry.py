"""discovery_sync.retry.Retry: delays that grow to a maximum with jitter, a deadline that cuts the
waits, a wake-up event that ends them; driven by a manual clock, with no real sleeping."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import pytest

from discovery_sync.clock import SYSTEM
from discovery_sync.retry import Retry
from discovery_sync.testing import ManualClock

WAIT = 10.0  # real seconds a test waits for a thread it released


def in_thread(clock: ManualClock, body: Callable[[], None]) -> threading.Thread:
    """``body`` on a thread enrolled in ``clock`` (advance() first lets it reach its wait)."""
    thread = threading.Thread(target=body, name="test-retrying", daemon=True)
    clock.enroll(thread)
    thread.start()
    return thread


def test_delays_grow_by_the_factor_up_to_the_maximum_and_reset_starts_again() -> None:
    retry = Retry(0.25, 2.0, jitter=0)
    assert [retry.next_delay() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    retry.reset()
    assert retry.next_delay() == 0.25
    polls = Retry(0.02, 0.05, factor=1.5, jitter=0)  # the failover lock's waiters
    assert [polls.next_delay() for _ in range(5)] == pytest.approx([0.02, 0.03, 0.045, 0.05, 0.05])


def test_jitter_stays_within_its_bounds_around_the_nominal_delay() -> None:
    retry = Retry(1.0, 1.0)  # the default jitter: ±20 %
    delays = [retry.next_delay() for _ in range(500)]
    assert all(0.8 <= delay <= 1.2 for delay in delays)
    assert min(delays) < 0.9 and max(delays) > 1.1  # spread over the range, not one value
    wide = Retry(4.0, 4.0, jitter=0.5)
    assert all(2.0 <= wide.next_delay() <= 6.0 for _ in range(100))


def test_invalid_settings_are_refused() -> None:
    for bad in ({"start": 0}, {"start": 2, "maximum": 1}, {"factor": 0.5}, {"jitter": 1.0}, {"jitter": -0.1}):
        with pytest.raises(ValueError, match="not valid"):
            Retry(**{"start": 0.25, "maximum": 5.0, **bad})


def test_remaining_elapsed_and_expired_read_the_clock() -> None:
    clock = ManualClock()
    retry = Retry(timeout=5.0, clock=clock)
    assert retry.deadline == clock.monotonic() + 5.0
    assert retry.remaining() == 5.0 and not retry.expired
    clock.advance(2.0)
    assert retry.remaining() == 3.0 and retry.elapsed() == 2.0
    clock.advance(4.0)
    assert retry.remaining() == 0.0 and retry.expired
    endless = Retry(clock=clock)
    assert endless.deadline is None and endless.remaining() == math.inf and not endless.expired


def test_waits_run_on_the_clock_and_the_last_is_cut_to_the_deadline() -> None:
    clock = ManualClock(start=1000.0)
    retry = Retry(1.0, 10.0, jitter=0, timeout=2.5, clock=clock)
    results: list[tuple[bool, float]] = []

    def attempts() -> None:
        for _ in range(3):
            results.append((retry.wait(), clock.monotonic()))

    thread = in_thread(clock, attempts)
    clock.advance(0.5)
    assert results == []  # waiting 1 s of the clock: no real time passes it
    clock.advance(10.0)
    thread.join(WAIT)
    # 1 s, then 2 s cut to the deadline (an attempt is due there), then nothing left to wait for
    assert results == [(True, 1001.0), (True, 1002.5), (False, 1002.5)]
    assert not retry.wake.is_set()  # the clock ended the waits by setting it: cleared each time


def test_a_wait_asked_for_after_the_deadline_refuses_at_once() -> None:
    clock = ManualClock()
    retry = Retry(timeout=1.0, clock=clock)
    clock.advance(1.0)
    assert retry.wait() is False  # on the test's own thread: a wait on the manual clock would never end


def test_the_wake_event_ends_a_wait_early_and_is_cleared() -> None:
    clock = ManualClock()
    stop, wake = threading.Event(), threading.Event()
    retry = Retry(5.0, 5.0, jitter=0, clock=clock, wake=wake)
    outcomes: list[bool] = []

    def loop() -> None:
        while not stop.is_set():
            outcomes.append(retry.wait())

    thread = in_thread(clock, loop)
    clock.advance(5.0)  # one wait ran its course; the thread waits again
    stop.set()
    wake.set()  # what a thread's stop() does: its flag, then its wake-up event
    thread.join(WAIT)
    assert not thread.is_alive()
    assert outcomes == [True, False]
    assert not wake.is_set() and clock.monotonic() == 1005.0


def test_a_wake_set_before_the_wait_ends_it_at_once_on_the_system_clock() -> None:
    wake = threading.Event()
    wake.set()  # a stop() between the caller's check of its flag and its wait is not lost
    retry = Retry(60.0, 60.0, wake=wake, clock=SYSTEM)
    assert retry.wait() is False
    assert not wake.is_set()
