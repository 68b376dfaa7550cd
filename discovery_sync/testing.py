"""Helpers for testing code that uses discovery-sync: a clock that moves only when told.

``FileDiscovery(root, clock=ManualClock())`` (or ``connect("file:///...", clock=clock)``) judges
TTLs, schedules rescans, beats its heartbeat and breaks soft locks by that clock, so a test
``advance()``-s it by a TTL instead of sleeping one. What the kernel stamps (file mtimes) stays
real: a record's liveness is judged by how long its mtime stood still on the client's clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from .clock import Clock
from .errors import DiscoveryError, ValidationError

#: real seconds advance() waits for a woken thread to finish its job and wait again
DEFAULT_SETTLE_TIMEOUT = 10.0
#: real seconds between looks at a woken thread that might have ended (a thread's end wakes nobody)
ENDED_POLL = 0.005


class ClockStuck(DiscoveryError):
    """A thread woken by :meth:`ManualClock.advance` did not wait again in time (it is blocked
    on something else than the clock: a lock the test holds, a frozen store)."""


@dataclass(eq=False)
class _Waiter:
    deadline: float
    wake: threading.Event
    thread: threading.Thread = field(default_factory=threading.current_thread)
    fired: bool = False


class ManualClock(Clock):
    """A clock that stands still until :meth:`advance` moves it.

    ``advance(seconds)`` ends, one after another in the order of their deadlines, the waits that
    fall due, with the clock standing at each one's deadline; after each it waits (in real
    time, up to ``settle_timeout``) until the woken thread waits on the clock again or ends, so
    what that thread does at that moment is done when ``advance`` returns. Before moving at all
    it lets every enrolled thread (the client's periodic threads) reach its wait. Waits on the
    clock by the thread that advances it would never end: a test advances from its own thread
    and waits through other means (``Watch.get(timeout=...)`` counts real seconds).
    """

    def __init__(self, start: float = 1000.0, *, settle_timeout: float = DEFAULT_SETTLE_TIMEOUT) -> None:
        self._now = float(start)
        self._wall_offset = time.time() - self._now
        self.settle_timeout = settle_timeout
        self._cond = threading.Condition()
        self._waiters: list[_Waiter] = []
        self._enrolled: list[threading.Thread] = []

    def monotonic(self) -> float:
        with self._cond:
            return self._now

    def time(self) -> float:
        with self._cond:
            return self._now + self._wall_offset

    def enroll(self, thread: threading.Thread) -> None:
        with self._cond:
            self._enrolled = [t for t in self._enrolled if t.is_alive() or t.ident is None]
            self._enrolled.append(thread)

    def wait(self, wake: threading.Event, timeout: float | None) -> bool:
        with self._cond:
            if timeout is not None and timeout <= 0:
                return wake.is_set()
            # a timeout below the resolution of the clock's float still ends after a step of it
            deadline = math.inf if timeout is None else max(self._now + timeout, math.nextafter(self._now, math.inf))
            waiter = _Waiter(deadline, wake)
            self._waiters.append(waiter)
            self._cond.notify_all()  # advance() may be waiting for this thread to be idle
        try:
            wake.wait()
        finally:
            with self._cond:
                self._waiters.remove(waiter)
                self._cond.notify_all()
        return not waiter.fired

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward, running what falls due (see the class docstring)."""
        if seconds < 0:
            raise ValidationError(f"advance({seconds!r}): a clock only goes forward")
        with self._cond:
            target = self._now + seconds
            self._settle()
            while True:
                due = [w for w in self._waiters if not w.fired and w.deadline <= target]
                if not due:
                    self._now = target
                    return
                waiter = min(due, key=lambda w: w.deadline)
                self._now = max(self._now, waiter.deadline)
                waiter.fired = True
                waiter.wake.set()
                self._wait_for(partial(self._idle, waiter.thread, after=waiter), waiter.thread)
                self._settle()

    def settle(self) -> None:
        """Wait until every enrolled thread waits on the clock (or has ended)."""
        with self._cond:
            self._settle()

    def _settle(self) -> None:
        for thread in list(self._enrolled):
            self._wait_for(partial(self._idle, thread), thread)

    def _idle(self, thread: threading.Thread, after: _Waiter | None = None) -> bool:
        if thread.ident is None:  # created, not started: nothing to wait for
            return True
        if not thread.is_alive():
            return True
        return any(w.thread is thread and w is not after and not w.fired for w in self._waiters)

    def _wait_for(self, idle: Callable[[], bool], thread: threading.Thread) -> None:
        give_up = time.monotonic() + self.settle_timeout
        while not idle():
            left = give_up - time.monotonic()
            if left <= 0:
                raise ClockStuck(
                    f"thread {thread.name} did not wait on the manual clock again within {self.settle_timeout:g} s "
                    "of real time: it is blocked on something else"
                )
            self._cond.wait(min(left, ENDED_POLL))  # a thread's end notifies nobody: look again soon

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now!r})"
