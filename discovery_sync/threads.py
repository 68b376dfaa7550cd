"""Background threads that never die silently: the one path every thread's exceptions take.

Every thread discovery-sync starts runs its body through :func:`start_thread`. An exception
that escapes the body is logged once, with the thread's name and traceback, and handed to the
thread's ``on_crash`` callback, which tells the consumers (fails their watches, marks the
client's status). Nothing reaches :func:`threading.excepthook`, not even an exception raised
by ``on_crash`` itself. Threads that retry pace their attempts with
:class:`discovery_sync.retry.Retry` and log them with :func:`log_retry`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("discovery_sync.threads")


def start_thread(
    name: str,
    body: Callable[[], None],
    on_crash: Callable[[BaseException], None] | None = None,
    *,
    start: bool = True,
) -> threading.Thread:
    """A daemon thread named ``name`` running ``body`` (started unless ``start=False``).

    An exception escaping ``body`` is logged with the thread's name and passed to ``on_crash``.
    """
    thread = threading.Thread(target=guarded(body, on_crash), name=name, daemon=True)
    if start:
        thread.start()
    return thread


def guarded(body: Callable[[], None], on_crash: Callable[[BaseException], None] | None = None) -> Callable[[], None]:
    """``body`` wrapped so that no exception leaves it (see the module docstring)."""

    def run() -> None:
        try:
            body()
        except BaseException as exc:
            report_crash(exc, on_crash)

    return run


def report_crash(exc: BaseException, on_crash: Callable[[BaseException], None] | None = None) -> None:
    """Log ``exc`` as the death of the current thread's body and tell ``on_crash``."""
    name = threading.current_thread().name
    log.error("thread %s stopped by an unexpected error: %r", name, exc, exc_info=exc)
    if on_crash is None:
        return
    try:
        on_crash(exc)
    except BaseException as second:
        log.error("thread %s could not report its failure: %r", name, second, exc_info=second)


def log_retry(what: str, exc: BaseException, delay: float) -> None:
    """Log an attempt of the current thread that failed and is retried in ``delay`` seconds.

    Errors that are not discovery-sync's or the operating system's are bugs or nonsense from a
    server: their traceback is logged too.
    """
    from .errors import DiscoveryError

    name = threading.current_thread().name
    expected = isinstance(exc, DiscoveryError | OSError)
    log.warning(
        "thread %s: %s failed (%s); retrying in %.2f s",
        name,
        what,
        exc if expected else repr(exc),
        delay,
        exc_info=None if expected else exc,
    )
