"""Waiting for a state that sends no notice: ``wait_until(condition, what, timeout=...)``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

WAIT = 10.0  # the default bound, in seconds, on a wait for something that must happen


def wait_until(condition: Callable[[], object], what: str, timeout: float = WAIT, interval: float = 0.02) -> None:
    """Return once ``condition()`` is true, calling it at once and then every ``interval`` seconds;
    raise ``AssertionError("not within {timeout} s: {what}")`` (a test failure) if it is still false
    ``timeout`` seconds after the call.

    For states with no event to wait on (a client's status, a store's content, another process's
    view); where an event exists, wait on the event instead. ``condition`` is called on the calling
    thread; what it raises propagates.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: a sleep that a patched time.sleep does not affect
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        pause.wait(interval)
