"""Watches: a consumer handle (:class:`Watch`) fed by a backend thread (:class:`WatchFeed`).

The feed keeps two views of the matching records: ``view`` (what the store holds now, as far
as the backend knows) and ``delivered`` (what the events queued so far describe). Events go
through an unbounded ``queue.Queue`` whose length the feed bounds itself: when the consumer
falls more than ``maxsize`` events behind, the feed stops queueing ("lagged") but keeps its
view current. Once the consumer has drained the queue it receives the difference between
``delivered`` and ``view`` followed by a ``Resync``, so a slow consumer never blocks the store
and never ends with a wrong picture.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, cast

from .errors import DiscoveryError, WatchClosed, WatchFailed
from .events import Added, DiscoveryEvent, ModelTaintsUpdated, Removed, Resync, WatchEvent
from .identity import DiscoveryInstanceId
from .model import DiscoveryInstance, Model, R
from .options import wait_timeout
from .queries import Query
from .reconcile import diff, ordered

log = logging.getLogger(__name__)

DEFAULT_WATCH_QUEUE_SIZE = 4096


class WatchTimeout(DiscoveryError, queue.Empty):
    """No event arrived within the timeout given to :meth:`Watch.get`."""


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_WAKE = _Sentinel("wake")


class _InitialAdds:
    """The Added events that start a watch, each made when the consumer takes it: a start of 50k
    records does not keep 50k events alive at once for the garbage collector to trace."""

    __slots__ = ("_next", "_records")

    def __init__(self, records: tuple[DiscoveryInstance, ...]) -> None:
        self._records = records
        self._next = 0

    def __len__(self) -> int:
        """How many are still to be taken."""
        return len(self._records) - self._next

    def take(self) -> Added[DiscoveryInstance]:
        event = Added(self._records[self._next])
        self._next += 1
        return event


class WatchFeed(Generic[R]):
    """The producer side of one watch. Backends call its methods from their own threads.

    Backends give it records of every kind; it keeps those its query matches, which are of the
    query's kind ``R``: what its consumer receives is typed so."""

    def __init__(self, query: Query[R], *, maxsize: int = DEFAULT_WATCH_QUEUE_SIZE) -> None:
        self.query = query
        self._maxsize = max(1, maxsize)
        self._lock = threading.Lock()
        self._queue: queue.Queue[object] = queue.Queue()
        self._pending: collections.deque[DiscoveryEvent | _InitialAdds] = collections.deque()
        self._view: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._delivered: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._lagged = False
        self._queued = 0  # events (not wake-ups) in the queue
        self._failure: BaseException | None = None
        self._closed = False
        self._on_close: list[Callable[[], None]] = []
        self._on_ready: Callable[[], None] | None = None  # told after every put (a live view's pump)
        # metrics (discovery_sync.metrics), changed under self._lock only: events handed to the
        # consumer's queue or pending list, by kind (_ADDED...: EVENT_KINDS' order), times the
        # watch lagged, most events ever queued; see delivered()
        self._handed = [0, 0, 0, 0]
        self.lags = 0
        self.high_water = 0

    # -- producer API ---------------------------------------------------------------------------
    def start(self, snapshot: Iterable[DiscoveryInstance]) -> None:
        """Deliver the initial state: one Added per matching record, then one Resync."""
        with self._lock:
            matching = {i.id(): i for i in snapshot if self.query.matches(i)}
            self._view = dict(matching)
            self._delivered = dict(matching)
            records = ordered(matching.values())
            if records:
                self._pending.append(_InitialAdds(records))
            self._pending.append(Resync(records))
            self._handed[_ADDED] += len(records)
            self._handed[_RESYNC] += 1
        self._put(_WAKE)  # for a consumer already blocked in get()

    def publish(self, event: DiscoveryEvent, instance: DiscoveryInstance | None = None) -> bool:
        """Deliver an Added, ModelTaintsUpdated (``instance``: the model's new value) or Removed
        event, the very object given, if it concerns this watch; True when it did.

        An Added is delivered when its record matches the query; a Removed or taint update when
        the watch holds the record."""
        if isinstance(event, Added):
            record = event.instance
            if not self.query.matches(record):
                return False
            with self._lock:
                self._view[record.id()] = record
                self._emit(event, record.id(), record, _ADDED)
            return True
        if isinstance(event, Removed):
            with self._lock:
                if self._view.pop(event.id, None) is None:
                    return False
                self._emit(event, event.id, None, _REMOVED)
            return True
        if isinstance(event, ModelTaintsUpdated):
            if not isinstance(instance, Model):
                raise TypeError("a ModelTaintsUpdated needs the new model value")  # a backend's bug
            if not self.query.matches(instance):
                return False
            with self._lock:
                self._view[event.id] = instance
                self._emit(event, event.id, instance, _TAINTS)
            return True
        raise TypeError(f"cannot publish {event!r}")  # a Resync is the feed's own

    def added(self, instance: DiscoveryInstance) -> bool:
        """A new record, or an endpoint replaced with a new value (:meth:`publish` of an Added)."""
        return self.publish(Added(instance))

    def removed(self, instance_id: DiscoveryInstanceId) -> bool:
        """A record is gone (:meth:`publish` of a Removed)."""
        return self.publish(Removed(instance_id))

    def resync(self) -> None:
        """Emit a Resync of the current view (after publishing changes the backend had missed)."""
        with self._lock:
            self._emit(Resync(ordered(self._view.values())), None, None, _RESYNC)

    def reconcile(self, snapshot: Iterable[DiscoveryInstance], *, force_resync: bool = False) -> bool:
        """Bring the view to ``snapshot`` (the full store state): emit what differs, then a Resync.

        Returns True when something differed. Without a difference (and without
        ``force_resync``) nothing is emitted.
        """
        with self._lock:
            matching = {i.id(): i for i in snapshot if self.query.matches(i)}
            events, new_view = diff(self._view, matching)
            if not events and not force_resync:
                return False
            self._view = new_view
            for event in events:
                self._emit_event(event)
            self._emit(Resync(ordered(self._view.values())), None, None, _RESYNC)
            return bool(events)

    def fail(self, exc: BaseException) -> None:
        """The producer died: the consumer gets the queued events, then WatchFailed."""
        with self._lock:
            if self._failure is None:
                self._failure = exc
        self._put(_WAKE)

    @property
    def closed(self) -> bool:
        return self._closed

    def snapshot(self) -> tuple[R, ...]:
        with self._lock:
            return cast("tuple[R, ...]", ordered(self._view.values()))  # matched by the query: of its kind

    # -- internals ------------------------------------------------------------------------------
    def _emit_event(self, event: DiscoveryEvent) -> None:
        if isinstance(event, Added):
            self._emit(event, event.instance.id(), event.instance, _ADDED)
        elif isinstance(event, Removed):
            self._emit(event, event.id, None, _REMOVED)
        elif isinstance(event, ModelTaintsUpdated):
            self._emit(event, event.id, self._view[event.id], _TAINTS)
        else:
            self._emit(event, None, None, _RESYNC)

    def _emit(
        self, event: DiscoveryEvent, key: DiscoveryInstanceId | None, value: DiscoveryInstance | None, kind: int
    ) -> None:
        """Queue ``event`` (lock held; ``kind``: its index in EVENT_KINDS) and record what it
        delivers; drop into lagged mode when full."""
        if self._closed or self._lagged:
            return
        if self._queued >= self._maxsize:
            self._lagged = True
            self.lags += 1
            log.warning("watch %s lagged more than %d events behind; it will resync", self.query, self._maxsize)
            return
        if isinstance(event, Resync):
            self._delivered = dict(self._view)
        elif key is not None:
            if value is None:
                self._delivered.pop(key, None)
            else:
                self._delivered[key] = value
        self._queued += 1
        if self._queued > self.high_water:
            self.high_water = self._queued
        self._handed[kind] += 1
        self._put(event)

    def _put(self, item: object) -> None:
        self._queue.put(item)
        if self._on_ready is not None:
            self._on_ready()

    # -- consumer side (used by Watch) ------------------------------------------------------------
    def _take(self, deadline: float | None) -> WatchEvent[R]:
        """The next event (its records matched the query, so they are of its kind ``R``)."""
        while True:
            with self._lock:
                if self._closed:
                    raise WatchClosed(f"watch on {self.query} is closed")
                if self._pending:
                    return cast("WatchEvent[R]", self._next_pending())
                self._raise_if_failed()
            try:
                item = self._queue.get(timeout=_remaining(deadline)) if deadline is not None else self._queue.get()
            except queue.Empty:
                raise WatchTimeout(f"no event on {self.query} within the timeout") from None
            if item is not _WAKE:
                with self._lock:
                    self._queued -= 1
                return item  # type: ignore[return-value]
            with self._lock:
                if self._closed:
                    raise WatchClosed(f"watch on {self.query} is closed")
                if self._pending:
                    continue
                self._raise_if_failed()
            # a wake-up with nothing to do: loop and block again

    def _next_pending(self) -> DiscoveryEvent:
        """Take the first pending event (the lock held, something pending)."""
        head = self._pending[0]
        if type(head) is not _InitialAdds:
            return self._pending.popleft()  # type: ignore[return-value]
        event = head.take()
        if not head:
            self._pending.popleft()
        return event

    def delivered(self) -> list[int]:
        """Events the consumer has taken, by kind (metrics, EVENT_KINDS' order): those handed to
        it less those still queued or pending. Read here, so that taking an event costs nothing
        more; an event a consumer has just taken from the queue counts, as it is being returned
        (after close() nothing is queued any more: the count is final)."""
        with self._lock, self._queue.mutex:  # the consumer takes from the queue under its mutex
            delivered = list(self._handed)
            for event in (*self._queue.queue, *self._pending):
                if type(event) is _InitialAdds:
                    delivered[_ADDED] -= len(event)
                elif event is not _WAKE:
                    delivered[_KIND_INDEX[type(event)]] -= 1
        return delivered

    @property
    def lagging(self) -> bool:
        """Whether the consumer fell a full queue behind and has not caught up yet (metrics)."""
        return self._lagged

    @property
    def depth(self) -> int:
        """Events queued for the consumer now (metrics)."""
        return self._queued

    def _raise_if_failed(self) -> None:
        if self._failure is not None and not self._queued:
            raise WatchFailed(f"the watch on {self.query} failed: {self._failure}") from self._failure

    def _after_take(self) -> None:
        """Called by the consumer after each event: recover from lag once the queue is drained."""
        # read without the lock: a watch turns lagged only while events are queued, and the
        # consumer comes back here after taking each of them
        if not self._lagged:
            return
        with self._lock:
            if not self._lagged or self._queued or self._pending:
                return
            events, _ = diff(self._delivered, self._view)
            self._pending.extend(events)
            self._pending.append(Resync(ordered(self._view.values())))
            for event in self._pending:
                self._handed[_KIND_INDEX[type(event)]] += 1
            self._delivered = dict(self._view)
            self._lagged = False

    def close(self) -> None:
        """End the feed: its consumer's next ``get()`` raises WatchClosed; the close callbacks run."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            callbacks, self._on_close = self._on_close, []
            with self._queue.mutex:  # never delivered now: dropped (and not counted), so that delivered() is final
                for event in self._queue.queue:
                    if event is not _WAKE:
                        self._handed[_KIND_INDEX[type(event)]] -= 1
                self._queue.queue.clear()
        self._put(_WAKE)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a failing cleanup must not stop close()
                log.exception("error while closing the watch on %s", self.query)

    def on_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever the consumer has something new to take (an event, a
        failure, the close): a consumer that waits on many watches at once is told which. It is
        called from the producers' threads, maybe under the feed's lock: it must only take note."""
        self._on_ready = callback

    def add_close_callback(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._closed:
                self._on_close.append(callback)
                return
        callback()


# an event's index in WatchFeed.delivered() (discovery_sync.metrics.EVENT_KINDS' order)
_ADDED, _REMOVED, _TAINTS, _RESYNC = range(4)
_KIND_INDEX: dict[type, int] = {Added: _ADDED, Removed: _REMOVED, ModelTaintsUpdated: _TAINTS, Resync: _RESYNC}


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class Watch(Generic[R]):
    """The consumer's handle on a watch: blocking ``get``, iteration, ``close``, ``with``.

    A watch of a ``Query[R]`` (``Query.endpoints()``: ``R`` is ``Endpoint``) is a ``Watch[R]``:
    its events are ``WatchEvent[R]``, whose ``Added.instance`` is an ``R``.

    ``get(timeout)`` raises :class:`WatchTimeout` (also a ``queue.Empty``) when nothing arrives
    in time, :class:`~discovery_sync.errors.WatchClosed` after ``close()`` and
    :class:`~discovery_sync.errors.WatchFailed` when the backend thread feeding it died.
    Iteration ends when the watch is closed and raises WatchFailed on failure.

    ``close()`` (or the client's ``shutdown()``) releases everything the watch holds in the
    client; a watch dropped without ``close()`` stays fed, and held, until the client shuts down.
    """

    def __init__(self, feed: WatchFeed[R]) -> None:
        self._feed = feed

    @property
    def query(self) -> Query[R]:
        return self._feed.query

    @property
    def closed(self) -> bool:
        return self._feed.closed

    def get(self, timeout: float | None = None) -> WatchEvent[R]:
        """The next event; block at most ``timeout`` seconds (None or infinity: until one arrives)."""
        timeout = wait_timeout(timeout, "timeout")
        deadline = None if timeout is None else time.monotonic() + timeout
        event = self._feed._take(deadline)
        self._feed._after_take()
        return event

    def events(self, idle_timeout: float | None = None) -> Iterator[WatchEvent[R]]:
        """Iterate over events; stop when the watch closes or ``idle_timeout`` passes without one."""
        idle_timeout = wait_timeout(idle_timeout, "idle_timeout")
        while True:
            try:
                yield self.get(idle_timeout)
            except (WatchClosed, WatchTimeout):
                return

    def __iter__(self) -> Iterator[WatchEvent[R]]:
        return self.events()

    def snapshot(self) -> tuple[R, ...]:
        """The records the backend currently knows to match (independent of what was consumed)."""
        return self._feed.snapshot()

    def close(self) -> None:
        """Stop the watch; a consumer blocked in ``get`` wakes with WatchClosed. Idempotent."""
        self._feed.close()

    def __enter__(self) -> Watch[R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Watch {self.query}{' closed' if self.closed else ''}>"
