"""``collect_garbage()`` of the file backend, and what rescans tell it of the records they removed.

A collection watches the store for one TTL plus the cache window (liveness is judged on this
reader's clock), then removes the records nobody touched meanwhile (:mod:`.sweep`). Rescans
remove dead records all along; the ones they removed since the collection began are part of
its result (:class:`Removals`). A dry run removes nothing, and neither do the client's rescans
while it runs: their dead records are only reported Removed to watches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from discovery_sync.broadcast import FeedSet
from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.discovery import CollectedGarbage
from discovery_sync.errors import BackendUnavailable
from discovery_sync.identity import RecordKind

from .sweep import Sweeper
from .timing import Timing
from .view import BucketView
from .wire import REFERENCE_TTL

PROGRESS_INTERVAL = 0.25  # seconds between two progress reports of collect_garbage()
MAX_REMEMBERED_REMOVALS = 10_000

Progress = Callable[[float, float], None]


class Removals:
    """The store keys rescans removed since the last collection began; whether they may delete
    at all (not while a dry run is under way)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._removed: list[str] = []
        self._dry_runs = 0

    @property
    def deleting(self) -> bool:
        return not self._dry_runs

    def note(self, removed: Sequence[str]) -> None:
        if not removed:  # most rescans remove nothing: no lock taken
            return
        with self._lock:
            self._removed.extend(removed)
            del self._removed[:-MAX_REMEMBERED_REMOVALS]

    def begin(self, dry_run: bool) -> None:
        with self._lock:
            self._removed.clear()
            self._dry_runs += dry_run

    def end(self, dry_run: bool) -> list[str]:
        """The keys noted since :meth:`begin` (none for a dry run)."""
        with self._lock:
            self._dry_runs -= dry_run
            removed, self._removed = ([], self._removed) if dry_run else (self._removed, [])
            return removed


def scanned(view: BucketView, feeds: FeedSet) -> None:
    """A deep scan of the whole bucket, its changes published."""
    try:
        with view.publishing:
            feeds.publish_all(view.scan_deep())
    except OSError as exc:
        raise BackendUnavailable(f"cannot read {view.directory.path}: {exc}") from exc


class GarbageCollector:
    """One client's ``collect_garbage()``: ``owned_names(kind)`` are the file names of its records."""

    def __init__(
        self,
        views: Mapping[RecordKind, BucketView],
        feeds: FeedSet,
        sweeper: Sweeper,
        removals: Removals,
        timing: Timing,
        owned_names: Callable[[RecordKind], frozenset[str]],
        stopping: threading.Event,
        clock: Clock = SYSTEM,
    ) -> None:
        self._views = views
        self._feeds = feeds
        self._sweeper = sweeper
        self._removals = removals
        self._timing = timing
        self._owned_names = owned_names
        self._stopping = stopping
        self._clock = clock

    def collect(self, dry_run: bool, progress: Progress | None) -> CollectedGarbage:
        """Watch, then sweep every bucket; the keys removed (a dry run: that would be) and those
        the store did not let this user delete (``not_removed``, with the reason)."""
        self._removals.begin(dry_run)
        try:
            result = self._judge(dry_run, progress)
        finally:
            removed = self._removals.end(dry_run)
        result += removed
        return CollectedGarbage(sorted(set(result)), result.not_removed)

    def _judge(self, dry_run: bool, progress: Progress | None) -> CollectedGarbage:
        timing = self._timing
        for view in self._views.values():
            scanned(view, self._feeds)
        if not any(view.suspects(self._owned_names(kind)) for kind, view in self._views.items()):
            return CollectedGarbage()  # nothing seen now can be dead after the wait: skip it
        self._wait_reporting(timing.longest_dead_after + timing.rescan_interval, progress)
        if any(view.blind is not None for view in self._views.values()):
            # judging is paused (Sight): give others' writes the time to show, if there are any
            shown_within = timing.full_scan_interval + timing.cache_window + REFERENCE_TTL / 3 + timing.rescan_interval
            self._wait_reporting(shown_within, progress)
        result = CollectedGarbage()
        for kind, view in self._views.items():
            with view.publishing:
                scanned(view, self._feeds)
                swept, changes = self._sweeper.sweep(view, self._owned_names(kind), retry=True, dry_run=dry_run)
                self._feeds.publish_all(changes)
            result += swept
            result.not_removed.update(swept.not_removed)
        return result

    def _wait_reporting(self, seconds: float, progress: Progress | None) -> None:
        """Wait ``seconds`` (less if the client shuts down), telling ``progress`` every quarter second."""
        start = self._clock.monotonic()
        deadline = start + seconds  # waits cut to a deadline, not to seconds less the time elapsed: a
        wake = threading.Event()  # remainder below the clock's resolution would never be waited out
        while not self._stopping.is_set():
            now = self._clock.monotonic()
            if progress is not None:
                progress(min(now - start, seconds), seconds)
            if now >= deadline:
                return
            self._clock.wait(wake, min(PROGRESS_INTERVAL, deadline - now))
            wake.clear()
