"""Connection state: one small vocabulary for how a client's link to its store is doing.

A client is CONNECTED while it can read and write its store; SUSPENDED while writes or reads
fail and its records are at risk (an etcd that does not answer, a file-store heartbeat that
fails or hangs, a Kubernetes API that is unreachable); LOST once its records are gone or a
successor took them over (an expired etcd lease, a deleted Kubernetes resource, a cohort
member replaced); CLOSED after ``shutdown()``. RECONNECTED is not a lasting state but a
change: the client is connected again after SUSPENDED or LOST, and the change names the
records it wrote again (``rewritten``); ``client.state`` is CONNECTED from then on.

Listeners are called in order of the changes from one named thread per client
(``discovery-sync-state``), never while a lock of the client is held; a listener that raises
anything, BaseExceptions such as SystemExit and KeyboardInterrupt included, is logged and stays
registered, and the other listeners go on hearing every change. A listener added late is not
told of earlier changes: read ``client.state`` first. LOST is final for a replaced cohort
member (nothing leads out of it); CLOSED is final for every client.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .errors import ValidationError
from .threads import start_thread

log = logging.getLogger("discovery_sync.connection")

STATE_THREAD = "discovery-sync-state"


class ConnectionState(str, enum.Enum):
    """How a client's link to its store is doing (see the module docstring)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    LOST = "lost"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StateChange:
    """One change a listener is told of: the new ``state`` (RECONNECTED when the client is
    connected again after SUSPENDED or LOST), the ``previous`` lasting state, why (``reason``,
    one line for a log), and for RECONNECTED the store keys of the records the client wrote
    again (``rewritten``; empty when none had to be)."""

    state: ConnectionState
    previous: ConnectionState
    reason: str
    rewritten: tuple[str, ...] = field(default=())


StateListener = Callable[[StateChange], None]

_STOP = object()


class ConnectionStates:
    """A client's connection state and its listeners; thread-safe.

    Backends call :meth:`suspend`, :meth:`lose`, :meth:`resume`, :meth:`reconnect` and
    :meth:`close` as they
    see their store; each call that changes the lasting state queues one :class:`StateChange`
    for the listeners. Calls that change nothing are free (no lock taken when the state is
    already the one asked for), so a heartbeat may report every beat.
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._state = ConnectionState.CONNECTED
        self._final = False
        self._lock = threading.Lock()
        self._listeners: list[StateListener] = []
        self._changes: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        #: the last 100 changes, oldest first (for status() and tests)
        self.history: list[StateChange] = []
        #: how many changes showed each state, since the start (for metrics())
        self.counts: dict[ConnectionState, int] = {}

    @property
    def state(self) -> ConnectionState:
        """The lasting state: CONNECTED, SUSPENDED, LOST or CLOSED (never RECONNECTED)."""
        return self._state

    def suspend(self, reason: str) -> None:
        """Writes or reads fail: records are at risk. No change when already SUSPENDED or LOST."""
        if self._state is ConnectionState.CONNECTED:
            self._move(ConnectionState.SUSPENDED, reason, allowed=(ConnectionState.CONNECTED,))

    def lose(self, reason: str, *, final: bool = False) -> None:
        """The client's records are gone or were taken over (``final``: for good, as for a
        replaced cohort member)."""
        if self._state is not ConnectionState.LOST or final:
            allowed = (ConnectionState.CONNECTED, ConnectionState.SUSPENDED, ConnectionState.LOST)
            self._move(ConnectionState.LOST, reason, allowed=allowed, final=final)

    def resume(self, reason: str) -> None:
        """The store answers again and nothing was lost: RECONNECTED after SUSPENDED; no change
        when CONNECTED, nor when LOST (only :meth:`reconnect` leads out of LOST: the records
        must be back first)."""
        if self._state is ConnectionState.SUSPENDED:
            self._move(ConnectionState.CONNECTED, reason, allowed=(ConnectionState.SUSPENDED,))

    def reconnect(self, reason: str, rewritten: Iterable[str] = ()) -> None:
        """The store answers again and this client's records are back: RECONNECTED after
        SUSPENDED or LOST, naming the store keys of the records written again; no change when
        already CONNECTED."""
        if self._state is not ConnectionState.CONNECTED:
            allowed = (ConnectionState.SUSPENDED, ConnectionState.LOST)
            self._move(ConnectionState.CONNECTED, reason, allowed=allowed, rewritten=tuple(rewritten))

    def closing(self) -> None:
        """``shutdown()`` began: from now on only :meth:`close` changes the state, so the last
        change listeners hear is SUSPENDED, LOST or CONNECTED to CLOSED. What the backend sees
        while it shuts down (a heartbeat that touched nothing once the records were dropped, a
        store that answers the last delete) says nothing of a link the client is giving up: a
        client LOST or SUSPENDED is never reported RECONNECTED by its own shutdown (issue 38)."""
        with self._lock:
            self._final = True

    def close(self, reason: str = "shutdown() was called") -> None:
        """The client was shut down: CLOSED, the last change; the listener thread ends after it."""
        allowed = (ConnectionState.CONNECTED, ConnectionState.SUSPENDED, ConnectionState.LOST)
        self._move(ConnectionState.CLOSED, reason, allowed=allowed, final=True, closing=True)

    def add_listener(self, listener: StateListener) -> None:
        """Call ``listener(change)`` for every later change (see the module docstring)."""
        if not callable(listener):
            raise ValidationError(f"add_state_listener() takes a callable, got {type(listener).__name__}")
        with self._lock:
            self._listeners.append(listener)
            if self._thread is None and not self._stopped():
                self._thread = start_thread(STATE_THREAD, self._deliver)

    def remove_listener(self, listener: StateListener) -> None:
        """Stop calling ``listener``; ValidationError when it was never added (or already removed)."""
        with self._lock:
            try:
                self._listeners.remove(listener)
            except ValueError:
                raise ValidationError("remove_state_listener(): that listener was not added") from None

    def join(self, timeout: float | None = None) -> None:
        """Wait for the listener thread to deliver every queued change and end (after close())."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _stopped(self) -> bool:
        return self._state is ConnectionState.CLOSED

    def _move(
        self,
        state: ConnectionState,
        reason: str,
        *,
        allowed: tuple[ConnectionState, ...],
        final: bool = False,
        rewritten: tuple[str, ...] = (),
        closing: bool = False,
    ) -> bool:
        with self._lock:
            previous = self._state
            if previous not in allowed or (self._final and not closing):
                return False
            self._state = state
            self._final = self._final or final
            shown = ConnectionState.RECONNECTED if state is ConnectionState.CONNECTED else state
            change = StateChange(shown, previous, reason, rewritten)
            self.history.append(change)
            del self.history[:-100]
            self.counts[shown] = self.counts.get(shown, 0) + 1
            if self._thread is not None:  # no listener yet: nobody to queue for
                self._changes.put(change)
                if closing:
                    self._changes.put(_STOP)
        level = logging.INFO if state in (ConnectionState.CONNECTED, ConnectionState.CLOSED) else logging.WARNING
        log.log(level, "%s: %s (was %s): %s", self._owner, shown, previous, reason)
        return True

    def _deliver(self) -> None:
        while True:
            change = self._changes.get()
            if change is _STOP:
                return
            assert isinstance(change, StateChange)
            with self._lock:
                listeners = list(self._listeners)
            for listener in listeners:
                self._call(listener, change)

    def _call(self, listener: StateListener, change: StateChange) -> None:
        """Call one listener; whatever it raises, BaseExceptions included, is logged and kept
        from the delivery thread, so no listener can silence the others (issue 38). A
        SystemExit or KeyboardInterrupt raised in a listener would never have ended the
        process from this thread anyway: Python only ends the thread it is raised in."""
        try:
            listener(change)
        except BaseException as exc:
            log.error(
                "%s: a state listener raised %r on %s; it stays registered",
                self._owner,
                exc,
                change.state,
                exc_info=exc,
            )
