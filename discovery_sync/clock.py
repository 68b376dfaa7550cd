"""Time, through one seam: every judgement and wait of a client's threads asks a :class:`Clock`.

Liveness, rescan schedules, notice graces, soft locks and retries read ``monotonic()`` (durations)
and wait with ``wait()``/``sleep()``; stamps written into files for people to read come from
``time()``. :data:`SYSTEM` is the real clock and every default;
:class:`discovery_sync.testing.ManualClock` moves only when a test advances it, running the
waits that fall due, so tests of TTLs and graces take no real time.

Two readings never come from an injected clock: a filesystem's timestamps (mtimes set by the
kernel) are compared with the kernel's own wall clock, and timeouts a caller passes to a
blocking API call (``Watch.get(timeout=...)``) are the caller's real seconds.
"""

from __future__ import annotations

import threading
import time


class Clock:
    """The real clock (the base class of every other).

    ``wait(wake, timeout)`` is the one way a thread waits for time to pass: until ``wake`` is
    set or ``timeout`` seconds of this clock elapsed. Another clock may end the wait by setting
    ``wake``, so a waiter passes an event of its own that it clears after waking (a wake-up
    event, never a stop flag others read) and re-checks its own reasons to stop.
    """

    def monotonic(self) -> float:
        """Seconds that only go forward (for durations and deadlines)."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch (for stamps people read: markers, claims)."""
        return time.time()

    def wait(self, wake: threading.Event, timeout: float | None) -> bool:
        """Wait until ``wake`` is set or ``timeout`` seconds passed (None: no limit); True when
        ``wake`` is set."""
        return wake.wait(timeout)

    def enroll(self, thread: threading.Thread) -> None:
        """``thread`` waits only through this clock between its jobs (a periodic thread): a
        manual clock lets it finish its job before time moves on. The real clock ignores it."""

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (a wait nothing can cut short)."""
        if seconds > 0:
            self.wait(threading.Event(), seconds)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: the real clock, shared (it holds no state)
SYSTEM = Clock()
