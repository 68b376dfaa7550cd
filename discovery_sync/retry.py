"""The one retry primitive: delays that grow to a maximum, with jitter, a deadline and a wake-up.

A :class:`Retry` paces the attempts of one operation: :meth:`Retry.next_delay` gives the delay
before the next attempt (``start`` seconds, multiplied by ``factor`` after each failure up to
``maximum``, each with ``±jitter`` uniform jitter), :meth:`Retry.reset` starts again from
``start`` after a success, and :meth:`Retry.wait` waits that delay through the clock, cut to the
deadline. Every duration is read from the clock given (:data:`discovery_sync.clock.SYSTEM` by
default), so a :class:`discovery_sync.testing.ManualClock` drives a retrying thread with no real
sleeping.

The deadline is ``timeout`` seconds after the Retry was made (None: none); :attr:`Retry.deadline`
holds it as a time of the clock's ``monotonic()``. An attempt may always be made at the deadline
itself: a wait is cut to end there, and only a wait asked for once the deadline has passed
refuses (returns False at once).

A thread that must be stoppable while it waits passes ``wake``, an event of its own that its
``stop()`` sets after setting its stop flag: :meth:`Retry.wait` returns False when ``wake`` ends
it and clears ``wake``, and the thread then checks its stop flag (a manual clock also ends waits
by setting ``wake``, so it is never a flag that others read).
"""

from __future__ import annotations

import math
import random
import threading

from .clock import SYSTEM, Clock


class Retry:
    """Delays and waits between the attempts of one operation (see the module docstring).

    :param start: the first delay, in seconds.
    :param maximum: the largest delay (before jitter).
    :param factor: what a delay is multiplied by after each failure.
    :param jitter: each delay is the nominal one times a uniform factor in ``[1 - jitter, 1 + jitter]``;
        0 gives exact delays.
    :param timeout: seconds from now until the deadline; None: no deadline.
    :param clock: what every duration and wait is read from.
    :param wake: an event of the waiting thread's own that ends a wait when set (None: a wait only
        the clock ends).
    """

    def __init__(
        self,
        start: float = 0.25,
        maximum: float = 5.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.2,
        timeout: float | None = None,
        clock: Clock = SYSTEM,
        wake: threading.Event | None = None,
    ) -> None:
        if not 0 < start <= maximum or factor < 1 or not 0 <= jitter < 1:
            raise ValueError(f"Retry({start!r}, {maximum!r}, factor={factor!r}, jitter={jitter!r}): not valid")
        self.start = start
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.clock = clock
        self.wake = threading.Event() if wake is None else wake
        self.started = clock.monotonic()
        #: the deadline as a time of ``clock.monotonic()``; None: none
        self.deadline = None if timeout is None else self.started + timeout
        self._nominal = start

    def next_delay(self) -> float:
        """The delay before the next attempt (the current one, jittered); the one after it grows."""
        delay = self._nominal
        if self.jitter:
            delay *= random.uniform(1 - self.jitter, 1 + self.jitter)
        self._nominal = min(self._nominal * self.factor, self.maximum)
        return delay

    def reset(self) -> None:
        """After a success: the next delay is ``start`` again."""
        self._nominal = self.start

    def remaining(self) -> float:
        """Seconds until the deadline (0 once it has passed; infinity without one)."""
        if self.deadline is None:
            return math.inf
        return max(self.deadline - self.clock.monotonic(), 0.0)

    @property
    def expired(self) -> bool:
        """Whether the deadline has come (never without one)."""
        return self.remaining() <= 0

    def elapsed(self) -> float:
        """Seconds since this Retry was made."""
        return self.clock.monotonic() - self.started

    def wait(self, delay: float | None = None) -> bool:
        """Wait ``delay`` seconds (None: :meth:`next_delay`), cut to end at the deadline.

        True when the wait ran its course (the next attempt is due, possibly the last one, at the
        deadline); False at once when the deadline has passed already, and False when ``wake``
        ended the wait. ``wake`` is clear when it returns: the caller checks why it was woken.
        """
        if delay is None:
            delay = self.next_delay()
        left = self.remaining()
        if left <= 0:
            return False
        woken = self.clock.wait(self.wake, min(delay, left))
        self.wake.clear()  # a manual clock sets it too, to end a wait that fell due
        return not woken

    def __repr__(self) -> str:
        return (
            f"Retry(start={self.start!r}, maximum={self.maximum!r}, factor={self.factor!r}, jitter={self.jitter!r}, "
            f"next={self._nominal!r}, deadline={self.deadline!r})"
        )
