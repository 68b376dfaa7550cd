"""The rescan thread of the file backend: which scan runs when, and what a rescan does.

A rescan is the safety net under the notifier: every bucket is scanned (:mod:`.view`'s named
scans); the changes it finds that no notification delivered in time are published as missed,
then a Resync (:mod:`.missed` decides when a change counts as missed); dead records are swept
(:mod:`.sweep`) and this client's records that a stranger replaced are written back.

The schedule (:class:`RescanSchedule`): with the polling observer (network filesystems) every
rescan is deep. With inotify, which delivers every write made on this host, a full scan runs
every ``full_scan_interval`` (dead_after / 2: liveness needs no more), every ``DEEP_EVERY``-th of
them deep; the rescans in between are listing scans (creates, deletes and atomic replaces a lost
notification missed), and run only while a watch needs them (the notifier runs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from discovery_sync.broadcast import FeedSet
from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.discovery import CollectedGarbage
from discovery_sync.errors import BackendUnavailable, DiscoveryError
from discovery_sync.events import DiscoveryEvent
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.metrics import Durations
from discovery_sync.model import DiscoveryInstance
from discovery_sync.periodic import PeriodicThread

from .garbage import Removals
from .missed import Suspects
from .sight import Sight
from .sweep import Sweeper
from .timing import Timing
from .view import DEEP, FULL, LISTING, STALL_AFTER, BucketView, Touched, UsualDuration
from .watcher import StoreWatcher

log = logging.getLogger("discovery_sync.backends.file")

#: with inotify, full scans re-read files whose mtime alone moved (taken for heartbeats) only every
#: this many full scans (and after a notification failed or the observer restarted)
DEEP_EVERY = 10
MAX_CONSECUTIVE_SCAN_ERRORS = 3

Owned = Mapping[DiscoveryInstanceId, str]  # this client's records of one bucket: id -> file name


class RescanSchedule:
    """Which scan the rescan thread runs next (see the module docstring)."""

    def __init__(self, timing: Timing, *, polling: bool, clock: Clock = SYSTEM) -> None:
        self._polling = polling
        self._full_every = timing.full_scan_interval
        self._slack = timing.rescan_interval / 2  # of the timer
        self._clock = clock
        self._next_full = 0.0  # when the next full scan is due (the clock's monotonic time)
        self._shallow_left = 0  # full scans until the next deep one; 0: the next one is deep

    def next_scan(self, *, watching: bool) -> str | None:
        """The scan to run now (None: none; ``watching``: a watch needs the listing scans)."""
        now = self._clock.monotonic()
        if not self._polling and now < self._next_full:
            return LISTING if watching else None
        self._next_full = now + self._full_every - self._slack
        if self._polling or self._shallow_left <= 0:
            self._shallow_left = DEEP_EVERY - 1
            return DEEP
        self._shallow_left -= 1
        return FULL

    def full_now(self) -> None:
        """The next scan is a full one (a deep one, if that is due)."""
        self._next_full = 0

    def deep_now(self) -> None:
        """The next scan is a deep one."""
        self._shallow_left = self._next_full = 0


class Rescans:
    """What rescans do, and the ``discovery-sync-file-rescan`` thread that runs them.

    ``owned()``: this client's records now, by bucket; ``touched(owned, kind)``: its files of
    one bucket as its heartbeat keeps them (:class:`.view.Touched`); ``restore(view, owned)``:
    write back those another writer replaced. A client that deletes nothing (``read_only``, or
    during a dry run of ``collect_garbage()``: ``removals``) only reports dead records Removed.
    ``report(trouble)`` is told after every rescan why it could not read the store (None: it
    could; :meth:`.link.Link.scanned`); ``progress()`` as each rescan begins and ends (the link
    thread watches for a stall: :attr:`scanning_since`, :attr:`stall_after`).
    """

    def __init__(
        self,
        root: Path,
        views: Mapping[RecordKind, BucketView],
        feeds: FeedSet,
        *,
        timing: Timing,
        schedule: RescanSchedule,
        grace: float,
        watcher: StoreWatcher,
        sight: Sight,
        sweeper: Sweeper,
        removals: Removals,
        owned: Callable[[], dict[RecordKind, dict[DiscoveryInstanceId, str]]],
        touched: Callable[[Owned], Touched | None],
        restore: Callable[[BucketView, Owned], None],
        read_only: bool,
        on_crash: Callable[[BaseException], None],
        report: Callable[[str | None], None] | None = None,
        progress: Callable[[], None] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.root = root
        self.schedule = schedule
        self._views, self._feeds, self._watcher, self._sight = views, feeds, watcher, sight
        self._sweeper, self._removals, self._read_only = sweeper, removals, read_only
        self._owned, self._touched, self._restore = owned, touched, restore
        self._clock = clock
        self._suspects = {kind: Suspects(grace) for kind in views}
        self._errors = dict.fromkeys(views, 0)  # failed scans in a row, by bucket
        self._last_error: dict[RecordKind | None, str | None] = {}
        self._report, self._progress = report, progress
        # rescans under way: thread ident -> when it began, and its stall bound for the files then
        self._scanning: dict[int, tuple[float, float]] = {}
        self._answered_at = float("-inf")  # the store's last answer to a scan or sweep (progressed())
        self._usual = UsualDuration()  # of a rescan, on the clock: see stall_after
        # a read-only client saw a bucket directory (a store that vanishes after that is gone)
        self._seen_store = any(view.directory.is_open for view in views.values())
        self.durations = {scan: Durations() for scan in (DEEP, FULL, LISTING)}  # of each rescan (metrics)
        for view in views.values():  # every answer of the store to any scan or sweep restarts the stall bound
            view.progress = self.progressed
        self.swept = sweeper.swept
        self.thread = PeriodicThread(
            "discovery-sync-file-rescan",
            timing.rescan_interval,
            self.scheduled,
            on_error=self.error,
            on_crash=on_crash,
            clock=clock,
        )

    def scheduled(self) -> None:
        """The thread's job, every ``rescan_interval``: the scan the schedule says."""
        scan = self.schedule.next_scan(watching=self._watcher.notifier.started)
        if scan is not None:
            self.rescan(scan)

    def full_now(self) -> None:
        """Run a full scan now (a heartbeat was refused on a replaced file)."""
        self.schedule.full_now()
        self.thread.wake()

    def notification_failed(self, exc: BaseException) -> None:
        log.warning("error while handling a file notification (the next rescan repairs it): %s", exc)
        self.schedule.deep_now()
        self.thread.wake()

    def rescan(self, scan: str = DEEP) -> None:
        """Rescan every bucket now (see :meth:`.backend.FileDiscovery.rescan`). A bucket that
        cannot be read fails the watches of its kind only; the other buckets are scanned.
        Its duration is measured, under the scan it became (``durations``)."""
        started, began, me = time.perf_counter(), self._clock.monotonic(), threading.get_ident()
        files = self._files()  # as it begins: its sweeps may empty the views before it ends
        self._scanning[me] = (began, self._usual.stall_after(files))
        if self._progress is not None:
            self._progress()
        try:
            scan = self._rescan(scan, began)
        finally:
            del self._scanning[me]
            self.durations[scan].observe(time.perf_counter() - started)
            if scan != LISTING:  # most listing scans read nothing: the usual is that of those that read
                self._usual.stalled(self._clock.monotonic() - began, files)  # a usual one joins the average
            if self._progress is not None:
                self._progress()

    def progressed(self) -> None:
        """The store answered a scan or sweep of this client (any thread's): the stall bound of
        every rescan under way counts from now. A rescan that keeps getting answers (a sweep of
        10k dead records, a big store on a loaded machine), or that waits for a view another
        thread sweeps meanwhile, is slow, not stalled; a frozen mount answers nothing."""
        if self._scanning:  # one clock reading per answer: reads call this once a file
            self._answered_at = self._clock.monotonic()

    @property
    def scanning_since(self) -> float | None:
        """When the oldest rescan under way began or last got an answer of the store (see
        :meth:`progressed`), on the clock (None: none is)."""
        began = min((began for began, _ in list(self._scanning.values())), default=None)
        return None if began is None else max(began, self._answered_at)

    @property
    def stall_after(self) -> float:
        """A rescan under way longer than this is stalled by the store (a frozen mount): eight
        times what a full or deep rescan of as many files as it began with usually takes, at
        least 2 s (that of the oldest rescan under way; else of one that would begin now)."""
        under_way = list(self._scanning.values())
        return min(under_way)[1] if under_way else self._usual.stall_after(self._files())

    def _files(self) -> int:
        return sum(len(view) for view in self._views.values())

    def _rescan(self, scan: str, began: float) -> str:
        """:meth:`rescan`; the scan it ran (deep after the observer was restarted)."""
        if self._read_only and self._watcher.follow():  # first: the emitter of a bucket that went away has stopped
            self._publish_new_buckets()
        if self._watcher.restart_if_dead():
            scan = DEEP  # what it did not deliver meanwhile
        self._sight.judge()
        owned = self._owned() if scan != LISTING else {}
        took = self._clock.monotonic() - began
        if took > STALL_AFTER:  # e.g. judge()'s statvfs on a frozen mount: the scans below may be quick and stale
            next(iter(self._views.values())).stalled(f"a rescan took {took:.1f} s before its first scan")
        for kind, view in self._views.items():
            try:
                self._rescan_bucket(kind, view, scan, owned.get(kind, {}))
            except (OSError, DiscoveryError) as exc:
                self.failed(exc, kind)
                continue
            self._errors[kind] = 0
            self._last_error[kind] = None
        self._last_error.pop(None, None)  # the whole rescan ran
        if self._report is not None:
            self._report(self._trouble())
        return scan

    def _trouble(self) -> str | None:
        """Why the last rescan could not read the store (a bucket whose watches failed; for a
        read-only client, a store removed after it saw it), or None."""
        for kind, problem in list(self._last_error.items()):  # client.rescan() may run meanwhile
            if kind is not None and problem is not None:
                return f"rescans of {kind.bucket} fail: {problem}"
        if self._read_only:
            if any(view.directory.is_open for view in self._views.values()):
                self._seen_store = True
            elif self._seen_store:
                return "the store was removed (no bucket directory is left): no record is seen until a writer makes it"
        return None

    def _publish_new_buckets(self) -> None:
        """The buckets watched changed: what changed while no notifier ran, as ordinary events."""
        for view in self._views.values():
            try:
                with view.publishing:
                    self._feeds.publish_all(view.scan_deep())
            except (OSError, DiscoveryError):  # the scan that follows reports it
                continue

    def _rescan_bucket(self, kind: RecordKind, view: BucketView, scan: str, owned: Owned) -> None:
        with view.publishing:
            self._scan_bucket(kind, view, scan, owned)
            if scan == LISTING:
                return
            view.warn_pending()
            removed = self._sweep_bucket(view, owned)
        if removed is not None:
            self._removals.note(removed)
            self._restore(view, owned)

    def _sweep_bucket(self, view: BucketView, owned: Owned) -> CollectedGarbage | None:
        """Sweep the dead records of ``view`` (``owned``: this client's, never judged) and publish
        the changes; the keys removed, or None when this client deletes nothing (then watches
        hear Removed all the same). The caller holds the view's ``publishing`` lock."""
        names = frozenset(owned.values())
        if self._read_only or not self._removals.deleting:
            self._feeds.publish_all(self._sweeper.expire(view, names))
            return None
        removed, changes = self._sweeper.sweep(view, names)
        self._feeds.publish_all(changes)
        return removed

    def sweep_dead(self) -> None:
        """Owners died (:mod:`.owners`): sweep their records in every bucket now, no scan first.
        A bucket that fails is left to the next rescan."""
        owned = self._owned()
        for kind, view in self._views.items():
            try:
                with view.publishing:
                    removed = self._sweep_bucket(view, owned.get(kind, {}))
            except (OSError, DiscoveryError) as exc:
                log.warning("sweeping dead owners' records in %s failed (the next rescan does): %s", kind.bucket, exc)
                continue
            if removed is not None:
                self._removals.note(removed)

    def _scan_bucket(self, kind: RecordKind, view: BucketView, scan: str, owned: Owned) -> None:
        """Scan one bucket; publish what notifications had not delivered in time as missed."""
        suspects = self._suspects[kind]
        gate = suspects.gate(self._clock.monotonic())
        if scan == LISTING:
            missed = [] if view.unchanged() else view.scan_full(gate=gate)
        elif scan == FULL:
            missed = view.scan_full(gate=gate, touched=self._touched(owned))
        else:
            missed = view.scan_deep(gate=gate)
        suspects.scan_ended(self._clock.monotonic())
        if missed:
            log.info(
                "rescan of %s found %d change(s) no notification delivered in time (then a Resync): %s",
                kind.bucket,
                len(missed),
                ", ".join(f"{type(event).__name__} {_about(event, instance)}" for event, instance in missed),
            )
            self._feeds.publish_missed(kind, missed)
        if suspects:  # a change waits for confirmation: the next scan is deep (reads it, even if only its mtime moves)
            self.schedule.deep_now()

    def error(self, exc: BaseException) -> bool:
        """The thread's ``on_error``: the observer could not be restarted, or a bug; every watch is
        concerned. True: the thread goes on."""
        if not isinstance(exc, OSError | DiscoveryError):
            log.error("thread %s: rescan failed unexpectedly", threading.current_thread().name, exc_info=exc)
        self.failed(exc, None)
        if self._report is not None:
            self._report(f"rescans fail: {self._last_error.get(None) or exc}")
        return isinstance(exc, Exception)

    def failed(self, exc: BaseException, kind: RecordKind | None) -> None:
        """A rescan of ``kind``'s bucket (None: of the whole store) failed. Transient errors are
        retried a few times; then, and at once when the directory is gone or refused, the watches
        concerned fail. The thread goes on, so a store that is repaired serves new watches."""
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and kind is not None:
            self._errors[kind] += 1
            if self._errors[kind] < MAX_CONSECUTIVE_SCAN_ERRORS:
                log.warning("rescan of %s failed (%d in a row): %s", kind.bucket, self._errors[kind], exc)
                return
        if isinstance(exc, OSError):
            exc = BackendUnavailable(f"cannot watch the file store at {self.root}: {exc}")
        if str(exc) != self._last_error.get(kind):  # said once per problem, not every rescan
            log.error("rescan of %s failed; its watches fail: %s", kind.bucket if kind else self.root, exc)
        self._last_error[kind] = str(exc)
        self._feeds.fail(exc, kind)


def _about(event: DiscoveryEvent, instance: DiscoveryInstance | None) -> str:
    """The identity path an event is about, for log lines."""
    if instance is not None:
        return instance.id().to_path()
    event_id = getattr(event, "id", None)
    return event_id.to_path() if event_id is not None else "?"
