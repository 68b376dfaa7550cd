"""A named daemon thread that runs one job at a fixed interval until stopped.

It sleeps on an Event through its clock (no busy loop; a manual clock in tests), can be woken
early with :meth:`wake`, and never dies silently: an exception from the job goes to
``on_error``, which returns True to run the job again after the interval or False to end the
thread; an exception of ``on_error`` itself ends it through
:func:`discovery_sync.threads.report_crash` (logged, handed to ``on_crash``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .clock import SYSTEM, Clock
from .metrics import Durations
from .threads import start_thread

log = logging.getLogger(__name__)


class PeriodicThread:
    """``job`` every ``interval`` seconds in a thread named ``name`` (or after as many seconds
    as ``next_interval()`` says after each run, when given); :meth:`health` tells how it
    goes, ``durations`` how long each run of the job took (real time, also for a run that
    raised) and ``crashes`` whether the thread crashed (metrics)."""

    def __init__(
        self,
        name: str,
        interval: float,
        job: Callable[[], None],
        *,
        on_error: Callable[[BaseException], bool] | None = None,
        on_crash: Callable[[BaseException], None] | None = None,
        run_first: bool = False,
        clock: Clock = SYSTEM,
        next_interval: Callable[[], float] | None = None,
    ) -> None:
        self.name = name
        self.interval = interval
        self._next_interval = next_interval
        self._job = job
        self._on_error = on_error
        self._run_first = run_first
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.failures = 0  # in a row
        self.last_error: str | None = None
        self._last_success = clock.monotonic()
        self.durations = Durations()
        self.crashes = 0
        self._on_crash = on_crash
        self._thread = start_thread(name, self._run, self._crashed, start=False)
        clock.enroll(self._thread)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Run the job now instead of at the end of the current interval."""
        self._wake.set()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def health(self) -> dict[str, Any]:
        """Whether the thread runs, its failures in a row, the last one, and seconds since a success."""
        return {
            "alive": self.is_alive(),
            "failures": self.failures,
            "last_error": self.last_error,
            "seconds_since_success": round(self._clock.monotonic() - self._last_success, 3),
        }

    def _crashed(self, exc: BaseException) -> None:
        self.crashes += 1  # the thread ends here: no other writer
        if self._on_crash is not None:
            self._on_crash(exc)

    def _run(self) -> None:
        if not self._run_first:
            self._wait()
        job = self.durations.timing(self._job)
        while not self._stop.is_set():
            try:
                job()
            except BaseException as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self._on_error is None or not self._on_error(exc):
                    raise
            else:
                self.failures, self.last_error, self._last_success = 0, None, self._clock.monotonic()
            self._wait()

    def _wait(self) -> None:
        interval = self.interval if self._next_interval is None else self._next_interval()
        self._clock.wait(self._wake, interval)
        self._wake.clear()
