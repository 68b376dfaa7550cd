"""Driving file-store clients on a :class:`~discovery_sync.testing.ManualClock` from a test.

What a client's threads publish while the clock moves is in its watches when ``advance()``
returns; notifications (inotify) still come in real time. File mtimes stay the kernel's: where
they are coarse (one tick of the kernel's clock, 1-10 ms, on kernels before 6.13 or filesystems
without fine-grained timestamps), two heartbeats within one tick stamp the same mtime, and a
record whose writer beats on the manual clock would look stopped to its readers. So each step
first waits, in real time, until the kernel stamps a later mtime than it did after the last step
(at once where timestamps are fine-grained, a tick at most elsewhere), and a test advances in
steps no longer than a heartbeat.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from testrigs.helpers import in_thread
from testrigs.waiting import wait_until

T = TypeVar("T")


class Steps:
    """Moves ``clock`` in steps; ``probe`` (a file of the test's own, on the store's filesystem)
    tells when the kernel's timestamps ticked."""

    def __init__(self, clock: ManualClock, probe: Path) -> None:
        self.clock = clock
        self._probe = probe
        probe.touch()
        self._stamp = self._stamp_now()

    def _stamp_now(self) -> int:
        os.utime(self._probe)
        return self._probe.stat().st_mtime_ns

    def advance(self, seconds: float) -> None:
        """One step: once a file touched now gets a later mtime than after the last step."""
        wait_until(lambda: self._stamp_now() > self._stamp, "the kernel's file timestamps to tick", interval=0.001)
        self.clock.advance(seconds)
        self._stamp = self._stamp_now()

    def run(self, seconds: float, step: float) -> None:
        """Advance ``seconds`` in steps of at most ``step``."""
        end = self.clock.monotonic() + seconds
        while (left := end - self.clock.monotonic()) > 1e-9:
            self.advance(min(step, left))

    def until_event(self, watch: ds.Watch, step: float, limit: float) -> tuple[ds.DiscoveryEvent, float]:
        """Advance in steps of ``step`` until ``watch`` has an event; the event and the clock's time
        then (the event came in the last step). Fails after ``limit`` seconds of the clock."""
        give_up = self.clock.monotonic() + limit
        while True:
            try:
                return watch.get(timeout=0), self.clock.monotonic()
            except ds.WatchTimeout:
                pass
            assert self.clock.monotonic() < give_up, f"no event within {limit:g} s of the clock"
            self.advance(step)

    def until(self, condition: Callable[[], object], step: float, limit: float) -> float:
        """Advance in steps of ``step`` until ``condition()`` is true; the clock's time then."""
        give_up = self.clock.monotonic() + limit
        while not condition():
            assert self.clock.monotonic() < give_up, f"not within {limit:g} s of the clock"
            self.advance(step)
        return self.clock.monotonic()

    def call(self, name: str, action: Callable[[], T], step: float, limit: float) -> T:
        """``action()``, which waits on the clock, run on a thread of its own (named ``name``)
        while the clock advances in steps of ``step``; what it returned, or raises what it raised.
        Fails when it has not returned after ``limit`` seconds of the clock."""
        thread, outcome = in_thread(name, action)
        self.clock.enroll(thread)  # advance() lets it reach its wait before it moves
        self.until(lambda: outcome, step, limit)
        thread.join(10)
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]  # type: ignore[return-value]
