"""Fan-out of store changes to the open watch feeds of one producer."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import partial

from .events import DiscoveryEvent
from .identity import RecordKind
from .model import DiscoveryInstance
from .watch import WatchFeed


class FeedSet:
    """The open feeds of a producer (a client, or an in-process registry)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._feeds: list[WatchFeed] = []

    def add(self, feed: WatchFeed) -> None:
        with self._lock:
            self._feeds.append(feed)
        feed.add_close_callback(partial(self.discard, feed))

    def discard(self, feed: WatchFeed) -> None:
        with self._lock:
            if feed in self._feeds:
                self._feeds.remove(feed)

    def __len__(self) -> int:
        with self._lock:
            return len(self._feeds)

    def current(self, kind: RecordKind | None = None) -> list[WatchFeed]:
        with self._lock:
            return [f for f in self._feeds if kind is None or f.query.kind is kind]

    def publish(self, event: DiscoveryEvent, instance: DiscoveryInstance | None) -> None:
        """Tell every feed about one change; ``instance`` is the new value (None for Removed)."""
        for feed in self.current():
            feed.publish(event, instance)

    def publish_all(self, changes: Sequence[tuple[DiscoveryEvent, DiscoveryInstance | None]]) -> None:
        """Tell every feed about each change, in order (``(event, new value)`` pairs)."""
        if not changes:
            return
        feeds = self.current()
        for event, instance in changes:
            for feed in feeds:
                feed.publish(event, instance)

    def publish_missed(
        self, kind: RecordKind, changes: Sequence[tuple[DiscoveryEvent, DiscoveryInstance | None]]
    ) -> None:
        """Changes a rescan found that notifications had missed: each feed they concern gets
        them followed by a Resync."""
        if not changes:
            return
        for feed in self.current(kind):
            concerned = [feed.publish(event, instance) for event, instance in changes]
            if any(concerned):
                feed.resync()

    def fail(self, exc: BaseException, kind: RecordKind | None = None) -> None:
        """Fail every feed (of ``kind`` only, when given) with ``exc``."""
        for feed in self.current(kind):
            feed.fail(exc)

    def close_all(self) -> None:
        for feed in self.current():
            feed.close()
