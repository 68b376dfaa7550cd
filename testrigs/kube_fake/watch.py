"""Change events and the per-stream queue a watch request drains."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from .resources import ResourceType
from .selectors import Selection

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class Change:
    """One committed write: the object before (None on create) and after (None on delete)."""

    rv: int
    resource: ResourceType
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    cascade: bool = True  # deletions: whether dependents are garbage-collected

    @property
    def current(self) -> dict[str, Any]:
        """The object the event carries: the new state, or the last state for deletions."""
        obj = self.new if self.new is not None else self.old
        assert obj is not None
        return obj


def bookmark(rt: ResourceType, rv: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A BOOKMARK event: only kind, apiVersion and metadata.resourceVersion (plus annotations)."""
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotations:
        metadata["annotations"] = annotations
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": metadata}}


class Watcher:
    """The events one watch stream still has to send, fed by the store under its lock.

    ``start_rv`` is the version the stream starts after: changes up to it are never sent. The
    newest change of the resource type (in any namespace, matching or not) is what a BOOKMARK
    carries, as the real watch cache's last processed version; a stream gets no BOOKMARK until
    that is newer than ``start_rv``.
    """

    def __init__(self, rt: ResourceType, selection: Selection, start_rv: int, type_rv: int = 0):
        self.resource = rt
        self.selection = selection
        self._cond = threading.Condition()
        self._queue: deque[dict[str, Any]] = deque()
        self._start = start_rv
        self._type_rv = type_rv  # the newest change of this resource type the store has offered
        self._closed = False

    def translate(self, change: Change) -> dict[str, Any] | None:
        """The event this stream sees for ``change``, honouring selectors like the real server.

        An object that starts matching arrives as ADDED and one that stops matching as DELETED.
        """
        if change.resource != self.resource:
            return None
        was = change.old is not None and self.selection.matches(change.old)
        now = change.new is not None and self.selection.matches(change.new)
        if was and now:
            return {"type": "MODIFIED", "object": change.new}
        if now:
            return {"type": "ADDED", "object": change.new}
        if was:
            return {"type": "DELETED", "object": change.new if change.new is not None else change.old}
        return None

    def preload(self, events: list[dict[str, Any]]) -> None:
        """Queue the replay (or synthetic ADDED events) the stream starts with."""
        with self._cond:
            self._queue.extend(events)
            self._cond.notify_all()

    def offer(self, change: Change) -> None:
        """Called by the store, in commit order, for every change to any resource."""
        if change.resource != self.resource or change.rv <= self._start:
            return
        event = self.translate(change)
        with self._cond:
            if event is not None:
                self._queue.append(event)
            self._type_rv = max(self._type_rv, change.rv)
            self._cond.notify_all()

    def close(self) -> None:
        """End the stream after what is already queued has been sent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def next(self, timeout: float) -> tuple[dict[str, Any] | None, int | None]:
        """The next queued event (None when none came within ``timeout`` or the stream was closed).

        With no event, also the version a BOOKMARK may carry now (taken with the queue empty, so it
        never runs ahead of an unsent event), or None while nothing of the type changed since the start.
        """
        with self._cond:
            if not self._queue and not self._closed and timeout > 0:
                self._cond.wait(timeout)
            if self._queue:
                return self._queue.popleft(), None
            return None, (self._type_rv if self._type_rv > self._start else None)
