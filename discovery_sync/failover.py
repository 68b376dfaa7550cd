"""Failover locks: one holder at a time per lock name and store, for failover cohorts.

A primary worker and its warm standby share one logical instance id; only the holder of the
cohort's *failover lock* registers. The lock follows kazoo's ``Lock``: :meth:`FailoverLock.acquire`
blocks until the lock is held (or a timeout runs out), :meth:`FailoverLock.release` gives it back,
``with lock:`` does both. Unlike a thread lock it can be *lost*: a store-backed lock whose
holder was frozen (SIGSTOP, a stalled VM, a hung mount) longer than the store's stale bound may be
broken and taken by a waiter. The holder then learns it: :attr:`FailoverLock.held` turns False,
:meth:`FailoverLock.wait_lost` returns True and the :meth:`FailoverLock.on_lost` callbacks run.
A worker that loses its lock must stop acting as the primary.

This module is the backend-neutral part: the abstract :class:`FailoverLock` (the loss
bookkeeping every implementation shares), :func:`check_lock_name`, and
:class:`MemoryFailoverLock`, the in-process lock of the memory backend (never lost). The file
store's lock is ``discovery_sync.backends.file.failover.FileFailoverLock``.
"""

from __future__ import annotations

import abc
import logging
import re
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from .clock import SYSTEM, Clock
from .errors import ClientClosed, ValidationError
from .options import duration, wait_timeout
from .threads import start_thread

log = logging.getLogger("discovery_sync.failover")

#: the name of the threads that keep a lock and run the callbacks of :meth:`FailoverLock.on_lost`
LOCK_THREAD = "discovery-sync-failover-lock"
MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
_ACCEPTED = f"1 to {MAX_NAME_LENGTH} characters among ASCII letters, digits, '.', '_' and '-', not starting with '.'"

#: the label of ``failover_lock()``'s argument in errors: the caller's own word, not a store option's
STALE_AFTER_LABEL = "failover_lock() stale_after"
_STALE_AFTER = duration(0.0, exclusive_minimum=True)

_L = TypeVar("_L", bound="FailoverLock")
LostCallback = Callable[["FailoverLock"], None]


def check_lock_name(name: object) -> str:
    """``name`` when it is a valid failover-lock name, else ValidationError saying what is accepted.

    Names are 1 to 64 characters of ``[A-Za-z0-9._-]`` not starting with ``.``: they become
    file names (``failover.{name}.lock``), so no separator, no hidden or special name.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValidationError(f"failover lock name {name!r} is not valid: use {_ACCEPTED}")
    return name


def check_stale_after(value: object) -> float:
    """The ``stale_after`` argument of ``Discovery.failover_lock()`` as seconds: more than 0 and
    at most a week, a number or its ASCII text; else a ValidationError naming
    ``failover_lock() stale_after`` (the argument the caller gave, whatever store option sets
    its default), the value and what is accepted."""
    return _STALE_AFTER(value, STALE_AFTER_LABEL)


class FailoverLock(abc.ABC):
    """A named lock held by at most one holder of a store at a time, which its holder can lose.

    The holder is this *object* (not a thread): any thread may release it, and a second
    :meth:`acquire` of an object that holds it waits for its release, as ``threading.Lock``
    does (the lock is not reentrant). All methods are thread-safe.

    - :meth:`acquire` blocks until the lock is held (True) or ``timeout`` runs out (False).
    - :meth:`release` gives it back; idempotent, and it never removes a lock another holder took
      (after a loss it removes nothing).
    - ``with lock:`` acquires without a time limit and releases at the end of the block.
    - :attr:`held` is True while the lock is held and not lost.
    - :meth:`wait_lost` blocks until the lock is lost (True), released or not held (False), or
      the timeout runs out (False).
    - :meth:`on_lost` registers a callback called once when the lock is lost.
    - :meth:`close` releases it and wakes threads waiting in :meth:`acquire` (which then raise
      ClientClosed); the client calls it at shutdown.

    A lost lock stays taken by this object until :meth:`release` (or ``with``'s end, or
    :meth:`close`) is called: only then may another :meth:`acquire` of this object start, so the
    release of a lost acquisition can never give back a later one.

    ``clock`` counts the timeout of :meth:`acquire` (and an implementation's waits and staleness).
    """

    def __init__(self, name: str, *, clock: Clock = SYSTEM) -> None:
        self._name = check_lock_name(name)
        self._clock = clock
        self._status = threading.Condition()
        self._taken = False  # acquired by this object and not released yet (lost or not)
        self._acquiring = False  # a thread is in acquire() of this object
        self._releasing = False
        self._lost = False  # the latest acquisition was lost
        self._closed = False
        self._generation = 0  # acquisitions so far: a loss is declared for one of them
        self._callbacks: list[LostCallback] = []
        #: set by close(): waits of this object end at once
        self._closing = threading.Event()

    @property
    def name(self) -> str:
        """The lock's name (unique per store)."""
        return self._name

    @property
    def held(self) -> bool:
        """True while this object holds the lock and has not lost it."""
        with self._status:
            return self._taken and not self._lost and not self._releasing

    def acquire(self, timeout: float | None = None) -> bool:
        """Block until the lock is held: True; False when ``timeout`` seconds ran out first.

        ``timeout``: None (or infinity, or more than ``threading.TIMEOUT_MAX``) waits without
        limit, 0 or a negative number tries once; NaN and non-numbers are a ValidationError.
        Raises ClientClosed when the lock is (or gets) closed, and BackendUnavailable when the
        store refuses the attempt (a full disk, a read-only filesystem, ...).
        """
        limit = wait_timeout(timeout, "timeout")
        deadline = None if limit is None else self._clock.monotonic() + limit
        with self._status:
            while self._taken or self._acquiring:  # this object holds it (or is taking it) in another thread
                self._check_open()
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._status.wait(remaining)
            self._check_open()
            self._acquiring = True
        taken = False
        generation = 0
        try:
            taken = self._take(deadline)
            if taken and self._closing.is_set():  # closed while it was being taken
                self._give_back()
                taken = False
                raise ClientClosed(f"the failover lock {self._name!r} was closed")
        finally:
            with self._status:
                self._acquiring = False
                if taken:
                    self._taken = True
                    self._lost = False
                    self._generation += 1
                    generation = self._generation
                self._status.notify_all()
        if taken:
            self._keep(generation)
        return taken

    def release(self) -> None:
        """Give the lock back. Idempotent (nothing happens when it is not held); after a loss it
        removes nothing, so the new holder keeps the lock. Never raises for a store that refuses
        the removal: that is logged, and waiters take the lock over once it is stale."""
        with self._status:
            if not self._taken or self._releasing:
                return
            self._releasing = True
        try:
            self._give_back()
        finally:
            with self._status:
                self._taken = False
                self._releasing = False
                self._status.notify_all()

    def close(self) -> None:
        """Release the lock and end every wait of this object: threads in :meth:`acquire` raise
        ClientClosed, and so does every later :meth:`acquire`. Idempotent."""
        with self._status:
            self._closed = True
            self._status.notify_all()
        self._closing.set()
        self._wake_waiters()
        self.release()

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the lock is lost: True. False when the timeout ran out, or when this
        object does not hold the lock (never took it, or released it without having lost it);
        a release while waiting ends the wait with False. ``timeout`` as for :meth:`acquire`."""
        limit = wait_timeout(timeout, "timeout")
        with self._status:
            self._status.wait_for(lambda: self._lost or not self._taken, limit)
            return self._lost

    def on_lost(self, callback: Callable[[FailoverLock], None]) -> None:
        """Call ``callback(lock)`` once, when the lock is next lost.

        Callbacks run on a named daemon thread (``discovery-sync-failover-lock``: the thread that
        found the loss), one after the other, never while a lock of this library is held, so a
        callback may call :meth:`release` or :meth:`acquire`. One that raises is logged and the
        others still run. A callback registered when the latest acquisition is already lost is
        called at once, on a new thread of that name. Registered callbacks wait across releases
        and acquisitions until a loss happens.
        """
        if not callable(callback):
            raise ValidationError(f"on_lost() takes a callable, got {type(callback).__name__}")
        with self._status:
            if not self._lost:
                self._callbacks.append(callback)
                return
        start_thread(LOCK_THREAD, lambda: self._run_callbacks([callback]))

    def __enter__(self: _L) -> _L:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "lost" if self._lost and self._taken else "not held"
        return f"<{type(self).__name__} {self._name!r} {state}>"

    # -- for implementations ---------------------------------------------------------------------------
    @abc.abstractmethod
    def _take(self, deadline: float | None) -> bool:
        """Take the lock in the store: True once held, False at ``deadline`` (a time of
        ``self._clock.monotonic()``; None: no limit). Must end soon after :attr:`_closing` is set
        (raising ClientClosed)."""

    @abc.abstractmethod
    def _give_back(self) -> None:
        """Give back what :meth:`_take` took (if not lost); must not raise for the store."""

    def _keep(self, generation: int) -> None:  # noqa: B027  (optional: locks that cannot be lost keep nothing)
        """Start keeping the lock (acquisition number ``generation``) held, e.g. a refresher thread."""

    def _wake_waiters(self) -> None:  # noqa: B027  (optional: for implementations that wait on a condition)
        """Wake the threads waiting in :meth:`_take` (after :attr:`_closing` was set)."""

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(f"the failover lock {self._name!r} was closed")

    def _declare_lost(self, generation: int) -> None:
        """The acquisition number ``generation`` was lost: :attr:`held` turns False, waits of
        :meth:`wait_lost` end with True, and the callbacks run in the calling thread (which must
        hold no lock). Nothing happens once a later acquisition was made, or when it was
        already declared."""
        with self._status:
            if generation != self._generation or self._lost:
                return
            self._lost = True
            callbacks, self._callbacks = self._callbacks, []
            self._status.notify_all()
        self._run_callbacks(callbacks)

    def _run_callbacks(self, callbacks: list[LostCallback]) -> None:
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception(
                    "a callback of on_lost() of the failover lock %r raised; the others still run", self._name
                )


_MEMORY = threading.Condition()
_MEMORY_HOLDERS: dict[tuple[object, str], MemoryFailoverLock] = {}


class MemoryFailoverLock(FailoverLock):
    """The failover lock of the memory backend: in-process, never lost.

    Every object made with the same ``registry_key`` (a hashable object naming one memory
    registry) and ``name`` contends for one lock, shared by all the threads of the process;
    waiting is on a condition variable, never polling. See :class:`FailoverLock` for the contract.
    """

    def __init__(self, name: str, registry_key: object) -> None:
        super().__init__(name)
        self._key = (registry_key, self._name)
        hash(self._key)  # a TypeError now, not at the first acquire()

    def _take(self, deadline: float | None) -> bool:
        with _MEMORY:
            while self._key in _MEMORY_HOLDERS:
                if self._closing.is_set():
                    raise ClientClosed(f"the failover lock {self._name!r} was closed")
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                _MEMORY.wait(remaining)
            _MEMORY_HOLDERS[self._key] = self
            return True

    def _give_back(self) -> None:
        with _MEMORY:
            if _MEMORY_HOLDERS.get(self._key) is self:
                del _MEMORY_HOLDERS[self._key]
            _MEMORY.notify_all()

    def _wake_waiters(self) -> None:
        with _MEMORY:
            _MEMORY.notify_all()
