"""ConnectionStates: the lasting states, the changes listeners are told of, and their thread."""

from __future__ import annotations

import logging
import queue
import threading

import pytest

import discovery_sync as ds
from discovery_sync.connection import STATE_THREAD, ConnectionState, ConnectionStates, StateChange

C, S, R, L, X = (
    ConnectionState.CONNECTED,
    ConnectionState.SUSPENDED,
    ConnectionState.RECONNECTED,
    ConnectionState.LOST,
    ConnectionState.CLOSED,
)


def _listening(states: ConnectionStates) -> queue.Queue[tuple[StateChange, str]]:
    seen: queue.Queue[tuple[StateChange, str]] = queue.Queue()
    states.add_listener(lambda change: seen.put((change, threading.current_thread().name)))
    return seen


def _drain(seen: queue.Queue[tuple[StateChange, str]], count: int) -> list[StateChange]:
    changes = []
    for _ in range(count):
        change, thread = seen.get(timeout=5)
        assert thread == STATE_THREAD
        changes.append(change)
    return changes


def test_a_new_client_is_connected_and_repeated_reports_change_nothing():
    states = ConnectionStates("test")
    seen = _listening(states)
    states.resume("fine")
    states.reconnect("fine")
    states.suspend("heartbeat failed")
    states.suspend("heartbeat failed again")
    states.reconnect("heartbeat works", rewritten=["k1"])
    states.resume("still fine")
    states.close()
    changes = _drain(seen, 3)
    assert [(c.previous, c.state) for c in changes] == [(C, S), (S, R), (C, X)]
    assert changes[0].reason == "heartbeat failed"
    assert changes[1].rewritten == ("k1",)
    assert states.state is X
    states.join(5)
    assert seen.empty()


def test_lost_then_reconnected_names_what_was_written_again():
    states = ConnectionStates("test")
    seen = _listening(states)
    states.suspend("etcd does not answer")
    states.lose("lease 7 expired")
    states.suspend("ignored: lost is worse")
    states.resume("etcd answers: not enough, the records are not back")
    assert states.state is L
    states.reconnect("lease granted again", rewritten=("a", "b"))
    states.close()
    assert [(c.previous, c.state, c.rewritten) for c in _drain(seen, 4)] == [
        (C, S, ()),
        (S, L, ()),
        (L, R, ("a", "b")),
        (C, X, ()),
    ]


def test_a_final_loss_is_never_left_except_by_closing():
    states = ConnectionStates("test")
    seen = _listening(states)
    states.lose("replaced by pid 3", final=True)
    states.reconnect("a heartbeat that still worked")
    states.resume("a heartbeat that still worked")
    states.suspend("a write failed")
    assert states.state is L
    states.close()
    states.close()
    assert [c.state for c in _drain(seen, 2)] == [L, X]
    states.join(5)
    assert seen.empty()


def test_once_closing_only_closed_follows():
    """shutdown() calls closing() first: what its threads report while they stop changes nothing."""
    states = ConnectionStates("test")
    seen = _listening(states)
    states.suspend("heartbeat failed")
    states.lose("no beat for a TTL")
    states.closing()
    states.reconnect("a beat that touched nothing", rewritten=("k",))
    states.resume("the store answers")
    states.lose("lost again", final=True)
    states.suspend("x")
    assert states.state is L
    states.close()
    assert [(c.previous, c.state) for c in _drain(seen, 3)] == [(C, S), (S, L), (L, X)]
    states.join(5)
    assert seen.empty()


def test_the_state_is_never_reconnected_and_closed_is_final():
    states = ConnectionStates("test")
    states.suspend("x")
    states.resume("y")
    assert states.state is C
    states.close()
    states.suspend("late")
    states.lose("late")
    states.reconnect("late")
    states.resume("late")
    assert states.state is X
    assert [c.state for c in states.history] == [S, R, X]


def test_a_raising_listener_is_logged_and_kept(caplog):
    states = ConnectionStates("test")
    calls: queue.Queue[ConnectionState] = queue.Queue()

    def bad(change: StateChange) -> None:
        calls.put(change.state)
        raise RuntimeError("listener bug")

    states.add_listener(bad)
    seen = _listening(states)
    with caplog.at_level(logging.ERROR, logger="discovery_sync.connection"):
        states.suspend("one")
        states.resume("two")
        assert [c.state for c in _drain(seen, 2)] == [S, R]
    assert [calls.get(timeout=5), calls.get(timeout=5)] == [S, R]
    assert "a state listener raised" in caplog.text


class _ListenerAbort(BaseException):
    """A BaseException of the listener's own, neither Exception nor an interpreter exit."""


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), _ListenerAbort()])
def test_a_listener_raising_a_base_exception_silences_nobody(caplog, raised):
    """Issue 38: SystemExit, KeyboardInterrupt or any BaseException from one listener is logged,
    that listener stays registered, and every listener goes on hearing the later changes."""
    states = ConnectionStates("test")
    before = _listening(states)
    calls: queue.Queue[ConnectionState] = queue.Queue()

    def bad(change: StateChange) -> None:
        calls.put(change.state)
        raise raised

    states.add_listener(bad)
    after = _listening(states)
    with caplog.at_level(logging.ERROR, logger="discovery_sync.connection"):
        states.suspend("one")
        states.lose("two")
        states.reconnect("three", rewritten=("k",))
        states.close()
        assert [c.state for c in _drain(before, 4)] == [S, L, R, X]
        assert [c.state for c in _drain(after, 4)] == [S, L, R, X]
    assert [calls.get(timeout=5) for _ in range(4)] == [S, L, R, X]
    states.join(5)
    assert states._thread is not None and not states._thread.is_alive()
    assert caplog.text.count("a state listener raised") == 4
    assert type(raised).__name__ in caplog.text


def test_listeners_run_while_no_lock_is_held():
    """A listener may call back into the states (here: read and report) without a deadlock."""
    states = ConnectionStates("test")
    done = threading.Event()

    def reentrant(change: StateChange) -> None:
        states.suspend("from a listener")  # takes the lock: must not be held by the caller
        states.add_listener(lambda change: None)
        done.set()

    states.add_listener(reentrant)
    states.lose("gone")
    assert done.wait(5)


def test_a_removed_listener_is_not_called_and_removing_twice_is_refused():
    states = ConnectionStates("test")
    first = _listening(states)
    calls: list[StateChange] = []
    states.add_listener(calls.append)
    states.remove_listener(calls.append)
    with pytest.raises(ds.ValidationError, match="not added"):
        states.remove_listener(calls.append)
    with pytest.raises(ds.ValidationError, match="takes a callable"):
        states.add_listener("print")  # type: ignore[arg-type]
    states.suspend("x")
    states.close()
    _drain(first, 2)
    states.join(5)
    assert calls == []


def test_without_listeners_no_thread_runs_and_nothing_piles_up():
    before = {t.name for t in threading.enumerate()}
    states = ConnectionStates("test")
    for _ in range(1000):
        states.suspend("x")
        states.resume("y")
    assert STATE_THREAD not in {t.name for t in threading.enumerate()} - before
    assert states._changes.qsize() == 0
    assert len(states.history) == 100
    states.close()


def test_the_listener_thread_ends_at_close():
    states = ConnectionStates("test")
    _listening(states)
    thread = states._thread
    assert thread is not None and thread.name == STATE_THREAD
    states.close()
    states.join(5)
    assert not thread.is_alive()


def test_states_print_as_their_value():
    assert str(ConnectionState.SUSPENDED) == "suspended"
    assert ConnectionState("lost") is L
