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
    """The events one watch stream still has to send, fed by the store under its lock."""

    def __init__(self, rt: ResourceType, selection: Selection, start_rv: int):
        self.resource = rt
        self.selection = selection
        self._cond = threading.Condition()
        self._queue: deque[dict[str, Any]] = deque()
        self._progress = start_rv  # every change up to here has been queued (or filtered out)
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

    def preload(self, events: list[dict[str, Any]], progress: int) -> None:
        """Queue the replay (or synthetic ADDED events) the stream starts with."""
        with self._cond:
            self._queue.extend(events)
            self._progress = progress
            self._cond.notify_all()

    def offer(self, change: Change) -> None:
        """Called by the store, in commit order, for every change to any resource."""
        event = self.translate(change)
        with self._cond:
            if event is not None:
                self._queue.append(event)
            self._progress = max(self._progress, change.rv)
            self._cond.notify_all()

    def expire(self, error: dict[str, Any]) -> None:
        """Drop what is still queued, send ``error`` (an ERROR event) and end the stream."""
        with self._cond:
            self._queue.clear()
            self._queue.append(error)
            self._closed = True
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

    def next(self, timeout: float) -> tuple[dict[str, Any] | None, int]:
        """The next queued event (None when none came within ``timeout`` or the stream was closed).

        Also returns the resourceVersion the stream has caught up to once the queue is drained, which
        is what a BOOKMARK may carry.
        """
        with self._cond:
            if not self._queue and not self._closed and timeout > 0:
                self._cond.wait(timeout)
            if self._queue:
                return self._queue.popleft(), self._progress
            return None, self._progress
