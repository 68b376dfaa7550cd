"""The rules of :class:`ConnectionKeeper` on their own (the faults behind them are driven for real
in test_connection_states.py): which failures suspend, which answers resume, stale evidence, a
Failed daemon, and the deleted CR handed to the keeper thread."""

from __future__ import annotations

import queue
import threading

from discovery_sync.backends.kube.keeper import KEEPER_THREAD, ConnectionKeeper

from discovery_sync.connection import ConnectionState, ConnectionStates

WAIT = 10.0
CONNECTED, SUSPENDED, LOST = ConnectionState.CONNECTED, ConnectionState.SUSPENDED, ConnectionState.LOST


def make_keeper() -> tuple[ConnectionKeeper, ConnectionStates, queue.Queue[tuple[str | None, str]]]:
    states = ConnectionStates("test")
    calls: queue.Queue[tuple[str | None, str]] = queue.Queue()

    def recover(uid: str | None) -> None:
        calls.put((uid, threading.current_thread().name))

    return ConnectionKeeper(states, recover), states, calls


def test_every_failing_source_must_answer_before_the_client_resumes():
    kept, states, _ = make_keeper()
    kept.failed("watch a", "a fails", started=1.0)
    kept.failed("watch b", "b fails", started=1.1)
    assert states.state is SUSPENDED and kept.failing() == {"watch a": "a fails", "watch b": "b fails"}
    kept.answered("watch a", "a answers", started=2.0)
    assert states.state is SUSPENDED
    kept.answered("watch b", "b answers", started=2.1)
    assert states.state is CONNECTED and kept.failing() == {}
    assert [(c.state, c.reason) for c in states.history] == [
        (SUSPENDED, "a fails"),
        (ConnectionState.RECONNECTED, "b answers"),
    ]


def test_a_failure_older_than_the_latest_answer_is_ignored():
    kept, states, _ = make_keeper()
    kept.answered("watch a", "a answers", started=5.0)
    kept.failed("watch b", "b began before a's answer", started=4.9)
    assert states.state is CONNECTED and kept.failing() == {}
    kept.failed("watch b", "b began after it", started=5.1)
    assert states.state is SUSPENDED


def test_a_read_or_a_settled_write_suspends_until_the_next_answer_of_anyone():
    kept, states, _ = make_keeper()
    kept.failed("read", "a read's list failed", started=1.0, lasting=False)
    assert states.state is SUSPENDED and kept.failing() == {}
    kept.answered("watch a", "a answers", started=2.0)
    assert states.state is CONNECTED
    kept.failed("write", "a write failed", started=3.0)
    kept.settled("write")  # it gave up: no longer failing, but no answer either
    assert states.state is SUSPENDED and kept.failing() == {}
    kept.answered("read", "a read worked", started=4.0)
    assert states.state is CONNECTED


def test_a_failed_daemon_keeps_the_client_suspended():
    kept, states, _ = make_keeper()
    kept.failed("daemon", "Kubernetes discovery failed: boom", started=1.0)
    kept.answered("write", "a write worked", started=2.0)
    assert states.state is SUSPENDED


def test_a_deleted_cr_is_handed_to_the_keeper_thread_and_a_lost_client_retries_at_the_next_answer():
    kept, states, calls = make_keeper()
    kept.cr_gone("uid-1")
    assert calls.get(timeout=WAIT) == ("uid-1", KEEPER_THREAD)
    states.lose("deleted")
    kept.answered("read", "a read worked", started=1.0)  # nothing asked to retry: nothing happens
    kept.retry_when_answered()
    kept.answered("read", "a read worked", started=2.0)
    assert calls.get(timeout=WAIT) == (None, KEEPER_THREAD)
    kept.answered("read", "a read worked", started=3.0)  # once only
    assert states.state is LOST
    kept.close()
    kept.join(WAIT)
    kept.cr_gone("uid-2")  # closed: nothing more is handled
    kept.failed("watch a", "shutting down", started=4.0)
    assert calls.empty() and states.state is LOST


def test_a_source_retrying_after_one_failure_holds_the_resumption_back():
    kept, states, _ = make_keeper()
    kept.failed("watch a", "a fails", started=1.0)
    kept.retrying("watch b")  # b failed once (no outage by itself) and retries
    kept.answered("watch a", "a answers", started=2.0)
    assert states.state is SUSPENDED  # b has not answered since
    kept.answered("watch b", "b answers", started=2.1)
    assert states.state is CONNECTED
    kept.retrying("watch b")  # alone, a first failure suspends nothing
    assert states.state is CONNECTED and kept.failing() == {}
