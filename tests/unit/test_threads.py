"""The one path of a background thread's exceptions: logged with its name, handed to on_crash,
never to threading.excepthook."""

from __future__ import annotations

import threading

from discovery_sync.periodic import PeriodicThread
from discovery_sync.retry import Retry
from discovery_sync.threads import start_thread
from testrigs.helpers import LogCatcher

WAIT = 10.0


def test_an_escaping_exception_is_logged_with_the_thread_name_and_reported(escaped, thread_log: LogCatcher):
    reported: list[BaseException] = []
    thread = start_thread("test-crashing-body", lambda: 1 / 0, reported.append)
    thread.join(WAIT)
    assert [type(e) for e in reported] == [ZeroDivisionError]
    assert thread_log.wait_for("thread test-crashing-body stopped by an unexpected error: ZeroDivisionError")
    assert escaped == []


def test_a_failing_report_is_logged_too(escaped, thread_log: LogCatcher):
    def report(exc: BaseException) -> None:
        raise RuntimeError("the report failed")

    start_thread("test-failing-report", lambda: 1 / 0, report).join(WAIT)
    assert thread_log.wait_for("thread test-failing-report could not report its failure: RuntimeError")
    assert escaped == []


def test_a_periodic_thread_retries_and_tracks_its_health(escaped):
    calls: list[int] = []
    third = threading.Event()

    def job() -> None:
        calls.append(1)
        if len(calls) >= 3:
            third.set()
            return
        raise OSError("transient")

    periodic = PeriodicThread("test-periodic", 0.01, job, on_error=lambda exc: True, run_first=True)
    assert periodic.health()["alive"] is False
    periodic.start()
    assert third.wait(WAIT)
    periodic.stop()
    assert periodic.health()["failures"] == 0 and periodic.health()["last_error"] is None
    assert escaped == []


def test_a_periodic_thread_whose_handler_gives_up_ends_through_on_crash(escaped):
    crashed = threading.Event()

    def job() -> None:
        raise ValueError("a bug")

    periodic = PeriodicThread(
        "test-giving-up", 0.01, job, on_error=lambda exc: False, on_crash=lambda exc: crashed.set(), run_first=True
    )
    periodic.start()
    assert crashed.wait(WAIT)
    periodic.stop()
    assert periodic.health()["failures"] == 1 and "ValueError: a bug" in periodic.health()["last_error"]
    assert escaped == []


def test_backoff_doubles_up_to_its_maximum_with_jitter_and_resets():
    backoff = Retry(0.25, 1.0)
    delays = [backoff.next_delay() for _ in range(5)]
    for delay, nominal in zip(delays, [0.25, 0.5, 1.0, 1.0, 1.0], strict=True):
        assert 0.8 * nominal <= delay <= 1.2 * nominal
    backoff.reset()
    assert backoff.next_delay() <= 0.3
