"""A named daemon thread that runs one job at a fixed interval until stopped.

It sleeps on an Event (no busy loop), can be woken early with :meth:`wake`, and never dies
silently: an exception from the job goes to ``on_error``, which may return True to keep the
thread running or False to end it (after logging).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicThread:
    def __init__(
        self,
        name: str,
        interval: float,
        job: Callable[[], None],
        *,
        on_error: Callable[[BaseException], bool] | None = None,
        run_first: bool = False,
    ) -> None:
        self.name = name
        self.interval = interval
        self._job = job
        self._on_error = on_error
        self._run_first = run_first
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

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

    def _run(self) -> None:
        if not self._run_first:
            self._wait()
        while not self._stop.is_set():
            try:
                self._job()
            except BaseException as exc:
                keep_going = self._on_error(exc) if self._on_error else False
                if not keep_going:
                    log.exception("thread %s stopped after an error", self.name)
                    return
            self._wait()

    def _wait(self) -> None:
        self._wake.wait(self.interval)
        self._wake.clear()
