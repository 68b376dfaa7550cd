"""Failover cohorts: clients that share one logical instance id (docs/design.md §4.1).

A primary worker and its standby publish one logical worker: the standby registers under the
same instance id once it holds the failover lock, replacing the primary's records in place. A
:class:`CohortMembership` is one member's view of that story: it has not written yet
(``claimed`` False), it is the cohort's current writer, or a successor replaced it. Being
replaced is final: the member keeps none of its records, writes, refreshes and deletes nothing
more, and says so (:attr:`replaced`, :meth:`wait_replaced`, :meth:`on_replaced`).

Callbacks run on a thread of their own (``discovery-sync-replaced``), never while a lock of the
client is held; one that raises is logged and the others still run.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InstanceReplaced
from .options import wait_timeout
from .threads import start_thread

log = logging.getLogger("discovery_sync.cohort")

REPLACED_THREAD = "discovery-sync-replaced"


@dataclass(frozen=True)
class Replacement:
    """How a cohort member learned it was replaced: ``by`` names the successor as far as the
    store tells (e.g. ``pid 42 on host h``), ``seen`` what showed it (a claim, a record)."""

    logical_instance_id: int
    by: str
    seen: str

    def __str__(self) -> str:
        return f"replaced by {self.by} ({self.seen})"


class CohortMembership:
    """One cohort member's state; thread-safe. ``token`` names this member's claims."""

    def __init__(self, logical_instance_id: int, on_mark: Callable[[Replacement], None] | None = None) -> None:
        self.logical_instance_id = logical_instance_id
        self._on_mark = on_mark  # told at once, on the marking thread (it must not block)
        self.token = secrets.token_hex(8)
        #: True once this member has written (claimed the logical id) in the store
        self.claimed = False
        self._replaced: Replacement | None = None
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Replacement], None]] = []

    @property
    def replaced(self) -> Replacement | None:
        """How this member was replaced, or None while it was not."""
        return self._replaced

    def mark_replaced(self, replacement: Replacement) -> bool:
        """Record that a successor replaced this member; True the first time (callbacks start)."""
        with self._lock:
            if self._replaced is not None:
                return False
            self._replaced = replacement
            callbacks = list(self._callbacks)
        self._event.set()
        if self._on_mark is not None:
            self._on_mark(replacement)
        log.error(
            "this client (logical instance %x) was %s: it keeps none of its records and writes nothing "
            "more; exit, or connect again as a standby",
            self.logical_instance_id,
            replacement,
        )
        if callbacks:
            start_thread(REPLACED_THREAD, lambda: self._run(callbacks, replacement))
        return True

    def check(self) -> None:
        """Raise InstanceReplaced when this member was replaced."""
        replacement = self._replaced
        if replacement is not None:
            raise InstanceReplaced(
                f"this client (logical instance {self.logical_instance_id:x}) was {replacement}: it may not "
                "write to the store any more; exit, or connect again as a standby"
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Block until this member is replaced (True) or ``timeout`` seconds pass (False)."""
        return self._event.wait(wait_timeout(timeout, "timeout"))

    def on_replaced(self, callback: Callable[[Replacement], None]) -> None:
        """Call ``callback(replacement)`` once this member is replaced (at once, on its own
        thread, when it already was)."""
        if not callable(callback):
            from .errors import ValidationError

            raise ValidationError(f"on_replaced() takes a callable, got {type(callback).__name__}")
        with self._lock:
            replacement = self._replaced
            if replacement is None:
                self._callbacks.append(callback)
                return
        start_thread(REPLACED_THREAD, lambda: self._run([callback], replacement))

    @staticmethod
    def _run(callbacks: list[Callable[[Replacement], None]], replacement: Replacement) -> None:
        for callback in callbacks:
            try:
                callback(replacement)
            except Exception:
                log.exception("a callback of on_replaced() raised; the others still run")
