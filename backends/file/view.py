"""One bucket directory as this reader sees it: parsed records, liveness, change events.

A file is re-read only when its (inode, size, mtime, ctime) changed, and re-parsed only when
its bytes changed (the view keeps a digest of them, not a copy), so a rescan of an unchanged
store costs one ``stat`` per file. Atomic writers give every new content a new inode (or, on a
freed inode the filesystem hands out again, a new ctime, which no ``utime`` can set back); a
heartbeat only moves the mtime (and with it the ctime). ``list()`` neither lists nor stats a
directory that did not change since its last scan (``refresh(quick=True)``), and reuses its ordered result
while the view did not change (:meth:`BucketView.listed`). A *shallow* scan
(``refresh(deep=False)``, the rescans of a client whose notifier sees every write of this host:
inotify) does not even re-read a file whose mtime moved on the same inode and size: it takes
that as a heartbeat (liveness) and leaves the file marked unverified; the next deep scan reads
it, in case that was an in-place rewrite of the same size whose notification was lost. A
shallow scan of a client that holds records does not stat its own files either, while the
listing shows the inode it wrote and its heartbeat is beating (:class:`Touched`): it knows when
it touched them.

Liveness (docs/design.md §6): a record is dead when its mtime has not changed for ``dead_after``
seconds *of this reader's monotonic clock* (the TTL plus the mount's cache window), counted
from the moment this reader first saw that mtime, plus the entry's ``slack``: a reader whose TTL
is shorter than the writer's waits as long as the writer's heartbeat asks (:class:`.liveness.Patience`).
Comparing mtimes with the local wall clock is never done, so skewed clocks between hosts cannot
kill a live worker. While the view is ``blind`` (this client cannot tell a stale store from an
unreachable one: its own heartbeat fails or stalls) nothing is judged dead, and when it sees
again, or after a scan that stalled, every clock starts again (:meth:`BucketView.restart_clocks`).

Within a network mount's cache window a read may disagree with the directory: a deleted file
still stats, a replaced one is read cut to its cached size. So a vanished file is confirmed by
opening it, and unreadable content is reported only once it has stood for the cache window.
Files a writer or the filesystem left behind (``LEFTOVER_PREFIXES``) are tracked by the same
liveness rule, so they can be swept too.

Whatever else is in the directory is judged by its name and type first (:mod:`.names`) and
costs nothing after one warning: foreign names, non-regular files, files over the size bound,
files this reader may not read, and records whose content names another identity than their
file name are never published. No problem with one file ends a scan.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from discovery_sync.errors import ValidationError
from discovery_sync.events import Added, DiscoveryEvent, Removed
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.queries import Query
from discovery_sync.reconcile import Change, apply

from .directory import DirectoryClosed, StoreDirectory, listing
from .liveness import Patience
from .names import describe_entry, may_be_record, printable, record_from
from .wire import DEFAULT_MAX_RECORD_BYTES, RecordTooLarge, read_regular, stat_entry, stat_regular, unread_reason

log = logging.getLogger("discovery_sync.backends.file")

Publish = Callable[[DiscoveryEvent, "DiscoveryInstance | None"], None]
Content = bytes  # a digest of a file's bytes
Gate = Callable[[str, "Content | None"], bool]
#: foreign names warned about by name in one scan; the rest are counted in one line
MAX_NAMED_WARNINGS = 10
#: how much older than a scan the directory's mtime must be for any later change to give it
#: another mtime: timestamps of whole seconds may come from a filesystem that keeps seconds
#: (ext3, HFS+) or two (FAT); others tick by the kernel's coarse clock (a jiffy, 1-10 ms)
SETTLED_NS = 2_000_000_000
FINE_SETTLED_NS = 100_000_000


def settled(began_ns: int, mtime_ns: int) -> bool:
    """Whether a change made after ``began_ns`` (this host's wall clock) gives a directory whose
    mtime is ``mtime_ns`` another mtime."""
    return began_ns - mtime_ns > (SETTLED_NS if mtime_ns % 1_000_000_000 == 0 else FINE_SETTLED_NS)


#: ordered results of distinct queries kept for reuse by ``listed()`` (the oldest goes first)
MAX_CACHED_LISTS = 16
#: a scan longer than this, and than STALL_FACTOR times the usual, was stalled by the store
STALL_AFTER = 2.0
STALL_FACTOR = 8.0


def digest(raw: bytes) -> Content:
    return hashlib.blake2b(raw, digest_size=16).digest()


@dataclass(slots=True)
class Entry:
    ino: int
    size: int
    mtime_ns: int
    seen_at: float  # reader's monotonic time when this mtime was first observed
    content: Content | None  # digest of the bytes last read (None: not read)
    valid: DiscoveryInstance | None  # the last valid value stored under this name
    read_at: float = 0.0  # reader's monotonic time when this content was first read
    problem: str | None = None  # why the content is not served
    warned: bool = False  # reset with every new content
    expired: bool = False  # judged dead but still there (it could not be deleted): Removed was published
    ctime_ns: int = 0  # a file written again on a freed inode, size and mtime set back, has another ctime
    unverified: bool = False  # the mtime moved since the content was last read (a shallow scan saw it)
    beat_ns: int = 0  # the shortest step seen between two of its mtimes: its writer's heartbeat (0: none yet)
    slack: float = 0.0  # seconds it may stand still beyond dead_after (a writer that beats slower)

    @property
    def due(self) -> float:
        """When, on the reader's clock, its mtime stood still ``dead_after`` less the slack ago: dead
        once ``due`` is older than that."""
        return self.seen_at + self.slack


@dataclass(slots=True, frozen=True)
class _Listed:
    """An ordered ``listed()`` result and how long it holds: while the view's change count is
    ``changes`` and the clock is before ``expires`` (when its first record would die)."""

    changes: int
    expires: float
    records: tuple[DiscoveryInstance, ...]


class Touched(NamedTuple):
    """This client's own files, as its heartbeat keeps them: ``inodes`` maps each file name to
    the inode this client wrote, and every one of them still under that inode was touched after
    ``at`` (the reader's monotonic clock: when the last completed beat began)."""

    inodes: Mapping[str, int]
    at: float


@dataclass(slots=True)
class _Scan:
    found: dict[str, os.stat_result | None]  # None: new (see unread), or one of touched
    unread: list[str]  # regular files with record names the view does not know yet: read, not stat'ed
    leftovers: dict[str, os.stat_result]
    foreign: dict[str, str]  # name -> what it is
    touched: list[str]  # this client's own files, under the inode it wrote (not stat'ed)


class BucketView:
    """The cached state of one bucket directory. All methods are thread-safe.

    Every method that reads the directory reports the changes it finds through ``publish``
    while holding the view's lock, so subscribers see changes in the order the view applied
    them.
    """

    def __init__(
        self,
        kind: RecordKind,
        directory: StoreDirectory,
        dead_after: float,
        publish: Publish,
        *,
        settle: float = 0.0,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        clock: Callable[[], float] = time.monotonic,
        missing_is_empty: bool = False,
        subscribed: Callable[[RecordKind], bool] | None = None,
        patience: Patience | None = None,
    ) -> None:
        """``dead_after``: seconds an unchanged mtime stays alive; ``settle``: seconds a read may
        disagree with the store (the mount's cache window); files over ``max_record_bytes`` are
        never read. ``missing_is_empty`` (read-only clients, which never create the store): a
        directory that does not exist (yet, or any longer) is an empty bucket, not an error.
        ``subscribed(kind)``: whether ``publish`` has a subscriber for records of ``kind`` now; a
        scan that finds none (with the view's lock held, under which subscribers of its kind are
        added) publishes nothing, which spares a first read of a big bucket an event per record.
        ``patience``: the slack of a writer whose heartbeat is slower than this reader's TTL asks
        (None: no writer's is, this reader's TTL is the longest any heartbeat stands for)."""
        self.kind = kind
        self.missing_is_empty = missing_is_empty
        self.directory = directory
        self.dead_after = dead_after
        self.settle = settle
        self.max_record_bytes = max_record_bytes
        self.lock = threading.RLock()
        self._publish = publish
        self._subscribed = subscribed
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._leftovers: dict[str, Entry] = {}  # temp and hidden files, by name (content unread)
        self._foreign: dict[str, str] = {}  # other entries of the last full scan: name -> what it is
        # bumped by every change that may alter what valid() returns other than time passing (an
        # entry added, dropped, given another value or expired state, or a dead one alive again)
        self._changes = 0
        self._listed: dict[tuple[str, frozenset[str], Query], _Listed] = {}
        # name prefix -> the directory's (inode, mtime, ctime) at the last scan of it, when settled
        self._unchanged: dict[str, tuple[int, int, int] | None] = {}
        self._patience = patience
        self._new_slack = patience.slack(0) if patience is not None else 0.0
        self._blind: str | None = None  # why nothing is judged dead now
        self._unwarned: set[str] = set()  # names of entries with a problem warn_pending() has not said yet
        # when this reader last saw a file of the bucket change (a heartbeat, a new content): the
        # store takes someone's writes (FileDiscovery._judge_sight)
        self.moved_at = float("-inf")
        self._scan_cost = 0.0  # a scan's usual duration (moving average): longer ones stalled

    # -- reading the directory --------------------------------------------------------------------
    def refresh(
        self,
        name_prefix: str = "",
        *,
        publish: Publish | None = None,
        gate: Gate | None = None,
        quick: bool = False,
        deep: bool = True,
        touched: Touched | None = None,
    ) -> None:
        """Scan the directory (names starting with ``name_prefix``) and publish what changed.

        ``publish`` replaces the view's subscriber for this scan. ``gate(name, content)``
        (content None for a vanished file) may hold a content change back: it is then left for a
        later scan or notification. Heartbeat-only changes always apply.

        ``quick`` reads nothing, not even the listing, while the directory itself did not change
        since the last scan of this prefix and that scan applied all it saw (no change held back
        by its ``gate``): nothing was created, removed or renamed in it since, and atomic writers
        give new content a new inode through a rename or link, so only liveness (mtimes, judged
        by full scans) and in-place rewrites (their notification, or a deep scan) go unread.
        Once the directory changed every file is stat-ed: a record deleted and written again may
        get the freed inode back (ext4 reuses it at once). The directory's mtime tells only while
        it is older than the scan that saw it by more than the filesystem's timestamp
        granularity (:func:`settled`).

        Without ``deep``, a file whose inode and size are unchanged and whose mtime moved is not
        re-read (see the module docstring); a deep scan re-reads those left unverified. Such a
        shallow scan also takes ``touched``, this client's own files: one whose listing shows the
        inode this client wrote, the one the view holds, is not stat-ed but taken as alive at
        ``touched.at`` (a file replaced by another writer has another inode; an in-place rewrite
        keeps it, and waits for its notification or the next deep scan).

        Raises OSError (or SymlinkRefused) only when the directory itself cannot be read; with
        ``missing_is_empty`` a missing directory is closed and every record of it published
        removed instead.
        """
        full = not name_prefix and not quick
        began = time.time_ns()  # the same clock as the directory's mtime: both are this host's
        started = self._clock()
        try:
            self._refresh(name_prefix, publish, gate, quick, deep, touched, full, began)
        finally:
            self._timed(self._clock() - started)

    def _timed(self, took: float) -> None:
        """A scan took ``took`` seconds: one far slower than usual was stalled by the store (a frozen
        mount), so what it read may be as old as its start: every clock starts again."""
        if took > max(STALL_AFTER, STALL_FACTOR * self._scan_cost):
            log.warning(
                "a scan of %s took %.1f s (usually %.2f s): the store stalled; no record is judged dead "
                "before it has had a full TTL to show a heartbeat again",
                self.kind.bucket,
                took,
                self._scan_cost,
            )
            self.restart_clocks()
            return
        self._scan_cost += (took - self._scan_cost) / 8

    def _refresh(
        self,
        name_prefix: str,
        publish: Publish | None,
        gate: Gate | None,
        quick: bool,
        deep: bool,
        touched: Touched | None,
        full: bool,
        began: int,
    ) -> None:
        held: list[str] = []  # names whose change ``gate`` held back: the view is behind the directory
        if gate is not None:
            gate = _noting_held(gate, held)
        with contextlib.ExitStack() as using:
            try:
                self.directory.revalidate()
                dir_fd = using.enter_context(self.directory.use())
                dir_st = os.fstat(dir_fd)
                state = (dir_st.st_ino, dir_st.st_mtime_ns, dir_st.st_ctime_ns)
                trusted = quick and self._unchanged.get(name_prefix) == state
                if trusted:  # nothing created, removed or renamed in it since: its listing is the view's
                    return
                own = touched.inodes if touched is not None and full and not deep else None
                scan = _scan(dir_fd, name_prefix, self._entries, full, own)
            except (FileNotFoundError, DirectoryClosed):
                if not self.missing_is_empty:
                    raise
                self._vanished(publish)
                return
            with self.lock:
                if full:
                    self._track_leftovers(scan.leftovers)
                    self._track_foreign(scan.foreign)
                saved = self._publish
                if publish is not None:
                    self._publish = publish
                elif self._subscribed is not None and not self._subscribed(self.kind):
                    self._publish = _unheard
                try:
                    for name, st in scan.found.items():
                        if st is not None:
                            self._update(dir_fd, name, st, gate, deep=deep)
                    for name in scan.unread:
                        self._add(dir_fd, name, gate)
                    if scan.touched:
                        assert touched is not None  # only its files are in scan.touched
                        self._kept_alive(scan.touched, touched.at)
                    missing = self._entries.keys() - scan.found.keys()  # a set operation: no loop in Python
                    for name in (
                        [n for n in self._entries if n in missing and n.startswith(name_prefix)] if missing else []
                    ):
                        # the listing was taken before the lock: a file a notification applied since
                        # is missing from it, yet there
                        if _gone(dir_fd, name) and (gate is None or gate(name, None)):
                            self._drop(name)
                    if len(self._unchanged) >= MAX_CACHED_LISTS:
                        self._unchanged.clear()
                    # a later change gives the directory another mtime only if this one is settled; and
                    # the view must hold all the listing showed
                    trusted_next = settled(began, dir_st.st_mtime_ns) and not held
                    self._unchanged[name_prefix] = state if trusted_next else None
                finally:
                    self._publish = saved

    def _vanished(self, publish: Publish | None) -> None:
        """The directory does not exist (``missing_is_empty``): close it; every record of it is gone."""
        self.directory.close()
        with self.lock:
            saved = self._publish
            self._publish = publish or saved
            try:
                for name in list(self._entries):
                    self._drop(name)
            finally:
                self._publish = saved
            self._leftovers.clear()
            self._foreign.clear()

    def refresh_name(self, name: str) -> None:
        """Re-read one file (after a change notification) and publish what changed.

        The file is opened rather than stat-ed: a network mount may answer ``stat`` of a file
        another host deleted from its cache, but opening it asks the server. A file that cannot
        be read now is left to the next scan.
        """
        if name.startswith(".") or not may_be_record(name):
            return
        if self.missing_is_empty and not self.directory.is_open:
            return  # the directory went away meanwhile: the next scan empties the view
        # read under the lock: a read applied after a scan that saw the file gone would bring it back
        with self.directory.use() as dir_fd, self.lock:
            try:
                found = read_regular(dir_fd, name, self.max_record_bytes)
            except (OSError, RecordTooLarge) as exc:
                log.debug("cannot read %s/%s now (the next rescan judges it): %s", self.kind.bucket, name, exc)
                return
            if found is None:
                self._drop(name)
            else:
                self._update(dir_fd, name, found[0], raw=found[1])

    def _update(
        self,
        dir_fd: int,
        name: str,
        st: os.stat_result | None,
        gate: Gate | None = None,
        raw: bytes | None = None,
        *,
        deep: bool = True,
    ) -> None:
        """Apply what is now stored under ``name``: ``st`` its stat (None: read it to know), ``raw``
        its bytes when they were read already (with ``st`` their ``fstat``). Without ``deep`` a
        moved mtime alone (same inode and size) is taken as a heartbeat and not read."""
        entry = self._entries.get(name)
        if st is not None and entry is not None and (entry.ino, entry.size) == (st.st_ino, st.st_size):
            if (entry.mtime_ns, entry.ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns) and not (deep and entry.unverified):
                return
            if not deep and entry.mtime_ns != st.st_mtime_ns:
                self._heartbeat(entry, st)
                return
        now = self._clock()
        # watchers were told an expired record is gone: what comes now is new to them
        old = entry.valid if entry is not None and not entry.expired else None
        if raw is None:
            try:
                found = read_regular(dir_fd, name, self.max_record_bytes)
            except (OSError, RecordTooLarge) as exc:
                if st is None:
                    st = stat_entry(dir_fd, name)
                if st is not None:
                    self._note_unread(name, entry, st, now, old, exc)
                return
            if found is None:  # vanished since the listing, or no longer a regular file
                if gate is None or gate(name, None):  # a notification may still deliver it
                    self._drop(name)
                return
            st, raw = found
        assert st is not None  # bytes read come with their fstat
        version = (st.st_ino, st.st_size, st.st_mtime_ns)
        seen_at = entry.seen_at if entry is not None and entry.mtime_ns == st.st_mtime_ns else now
        content = digest(raw)
        if entry is not None and content == entry.content:
            if seen_at != entry.seen_at and entry.due < now - self.dead_after:
                self._changes += 1  # dead by the clock, alive again
            self._moved(entry, st.st_mtime_ns)
            entry.ino, entry.size, entry.mtime_ns, entry.seen_at = *version, seen_at
            entry.ctime_ns = st.st_ctime_ns
            entry.unverified = False
            if entry.expired and seen_at == now:  # its mtime moves again: alive after all
                entry.expired = False
                self._changes += 1
                if entry.valid is not None:
                    self._publish(Added(entry.valid), entry.valid)
            return
        if gate is not None and not gate(name, content):
            return
        new_entry = Entry(*version, seen_at, content, old, read_at=now, ctime_ns=st.st_ctime_ns, slack=self._new_slack)
        self.moved_at = now  # a new content: someone writes to the store
        self._entries[name] = new_entry
        self._changes += 1
        try:  # the name was checked when the last valid identity was read under it
            instance = record_from(raw, self.kind, name, known=old.id() if old is not None else None)
        except ValidationError as exc:
            new_entry.problem = str(exc)  # reported by warn_pending(), once it has settled
            self._unwarned.add(name)
            return
        valid, events, change = apply(old, instance)
        new_entry.valid = valid
        if change is Change.REJECTED:
            log.warning("ignoring a change of model card %s whose taints cannot be read", name)
        for event in events:
            self._publish(event, valid)

    def _add(self, dir_fd: int, name: str, gate: Gate | None) -> None:
        """:meth:`_update` of a name the view holds no entry for (every file of a first scan):
        the same rules, in fewer steps. A record found is Added; no old value can reject it."""
        if name in self._entries:  # a notification applied it since the listing
            self._update(dir_fd, name, None, gate)
            return
        try:
            found = read_regular(dir_fd, name, self.max_record_bytes)
        except (OSError, RecordTooLarge) as exc:
            st = stat_entry(dir_fd, name)
            if st is not None:
                self._note_unread(name, None, st, self._clock(), None, exc)
            return
        if found is None:  # vanished, or no longer a regular file
            return
        st, raw = found
        content = digest(raw)
        if gate is not None and not gate(name, content):
            return
        now = self._clock()
        entry = Entry(st.st_ino, st.st_size, st.st_mtime_ns, now, content, None, read_at=now, ctime_ns=st.st_ctime_ns)
        entry.slack = self._new_slack
        self._entries[name] = entry
        self._changes += 1
        try:
            instance = record_from(raw, self.kind, name)
        except ValidationError as exc:
            entry.problem = str(exc)  # reported by warn_pending(), once it has settled
            self._unwarned.add(name)
            return
        entry.valid = instance
        if self._publish is not _unheard:  # a first scan nobody listens to builds no events
            self._publish(Added(instance), instance)

    def _heartbeat(self, entry: Entry, st: os.stat_result) -> None:
        """A shallow scan saw the mtime of an unchanged inode and size move: alive now, content
        taken as unchanged until a deep scan (or a notification) reads it."""
        now = self._clock()
        self._moved(entry, st.st_mtime_ns)
        entry.mtime_ns, entry.ctime_ns, entry.unverified = st.st_mtime_ns, st.st_ctime_ns, True
        self._seen_alive(entry, now, now - self.dead_after)

    def _kept_alive(self, names: list[str], touched_at: float) -> None:
        """This client's heartbeat touched these files of its own after ``touched_at``: alive then
        (their mtime and content, unchanged as far as the listing shows, are not looked at)."""
        alive_since = self._clock() - self.dead_after
        for name in names:
            entry = self._entries.get(name)
            if entry is not None and entry.seen_at < touched_at:
                self._seen_alive(entry, touched_at, alive_since)

    def _seen_alive(self, entry: Entry, seen_at: float, alive_since: float) -> None:
        """``entry``'s file was last known alive at ``seen_at``. If that is after ``alive_since``,
        an entry dead by the clock is alive again (a change) and an expired one is published
        Added again: its mtime moves after all."""
        if seen_at + entry.slack >= alive_since:
            if entry.due < alive_since:
                self._changes += 1  # dead by the clock, alive again
            if entry.expired:
                entry.expired = False
                self._changes += 1
                if entry.valid is not None:
                    self._publish(Added(entry.valid), entry.valid)
        entry.seen_at = seen_at

    def _note_unread(
        self,
        name: str,
        entry: Entry | None,
        st: os.stat_result,
        now: float,
        old: DiscoveryInstance | None,
        exc: Exception,
    ) -> None:
        """A file that could not be read: kept as an entry of this version (not read again until
        it changes, swept when dead, warned about once), with the last valid value of its name."""
        problem = unread_reason(exc)
        seen_at = entry.seen_at if entry is not None and entry.mtime_ns == st.st_mtime_ns else now
        if entry is not None and entry.problem == problem and (entry.ino, entry.size) == (st.st_ino, st.st_size):
            if seen_at != entry.seen_at and entry.due < now - self.dead_after:
                self._changes += 1  # dead by the clock, alive again
            self._moved(entry, st.st_mtime_ns)
            entry.mtime_ns, entry.ctime_ns, entry.seen_at = st.st_mtime_ns, st.st_ctime_ns, seen_at  # a heartbeat
            entry.unverified = False
            return
        self._changes += 1
        self._entries[name] = Entry(
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            seen_at,
            None,
            old,
            read_at=now,
            problem=problem,
            slack=self._new_slack,
            ctime_ns=st.st_ctime_ns,
        )
        self._unwarned.add(name)

    def warn_pending(self) -> None:
        """Warn once about each file whose content is not served, once it has stood for the
        settle time.

        Rescans call this. A notification may arrive while a non-atomic writer is mid-write, and
        within a network mount's cache window a replaced file may be read cut to its cached size,
        so content is judged only once it has stood that long.
        """
        now = self._clock()
        with self.lock:
            for name in list(self._unwarned):
                entry = self._entries.get(name)
                if entry is None or entry.problem is None or entry.warned:
                    self._unwarned.discard(name)  # gone, readable again, or said already
                elif now - entry.read_at >= self.settle:
                    self._unwarned.discard(name)
                    entry.warned = True
                    log.warning("skipping the file %s in %s: %s", name, self.directory.path, entry.problem)

    def expire(self, name: str) -> None:
        """A dead record that stays in the directory (it could not be deleted): publish Removed
        once; a heartbeat that moves its mtime again brings it back with Added."""
        with self.lock:
            entry = self._entries.get(name)
            if entry is None or entry.expired:
                return
            entry.expired = True
            self._changes += 1
            if entry.valid is not None:
                self._publish(Removed(entry.valid.id()), None)

    def _drop(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self._changes += 1
        if entry is not None and entry.valid is not None and not entry.expired:
            self._publish(Removed(entry.valid.id()), None)

    # -- state --------------------------------------------------------------------------------------
    def valid(self, name_prefix: str = "", *, skip: frozenset[str] = frozenset()) -> list[DiscoveryInstance]:
        """Live valid records (dead ones excluded) whose names start with ``name_prefix``."""
        alive_since = self._alive_since(self._clock())
        with self.lock:
            return [
                e.valid
                for n, e in self._entries.items()
                if e.valid is not None
                and not e.expired
                and n.startswith(name_prefix)
                and (n in skip or e.seen_at + e.slack >= alive_since)
            ]

    def listed(
        self, name_prefix: str, query: Query, *, skip: frozenset[str] = frozenset()
    ) -> tuple[DiscoveryInstance, ...]:
        """:meth:`valid` that ``query`` matches, in the order of ``reconcile.ordered`` (every record
        of a bucket is of its kind, so by identity path).

        The result is kept and returned again while nothing changed that could alter it: no
        entry added, dropped, given another value or expired state, no dead entry alive again
        (see ``_changes``), and no record it holds dead by the clock yet. Refreshing the view
        (reading the directory) is the caller's: this reads none of it.
        """
        now = self._clock()
        key = (name_prefix, skip, query)
        with self.lock:
            kept = self._listed.get(key)
            if kept is not None and kept.changes == self._changes and now < kept.expires:
                return kept.records
            alive_since = self._alive_since(now)
            expires = float("inf")
            chosen = []
            for name, entry in self._entries.items():
                instance = entry.valid
                if instance is None or entry.expired or not name.startswith(name_prefix):
                    continue
                if name not in skip:
                    due = entry.seen_at + entry.slack
                    if due < alive_since:
                        continue
                    expires = min(expires, due + self.dead_after)
                if query.matches(instance):
                    chosen.append(instance)
            chosen.sort(key=_identity_path)
            records = tuple(chosen)
            self._listed.pop(key, None)
            self._listed[key] = _Listed(self._changes, expires, records)
            if len(self._listed) > MAX_CACHED_LISTS:
                del self._listed[next(iter(self._listed))]
            return records

    def dead(self, owned: frozenset[str]) -> list[tuple[str, Entry]]:
        """Files with a record name whose mtime has not moved for ``dead_after`` on this reader's
        clock (owned ones excluded), then leftover files (see ``LEFTOVER_PREFIXES``) as still as that."""
        alive_since = self._alive_since(self._clock())
        with self.lock:
            records = [(n, e) for n, e in self._entries.items() if n not in owned and e.seen_at + e.slack < alive_since]
            return records + [(n, e) for n, e in self._leftovers.items() if e.seen_at + e.slack < alive_since]

    # -- judging liveness ---------------------------------------------------------------------------
    def _alive_since(self, now: float) -> float:
        """An entry whose ``due`` is older than this is dead (none while the view is blind)."""
        return now - self.dead_after if self._blind is None else float("-inf")

    def _moved(self, entry: Entry, mtime_ns: int) -> None:
        """``entry``'s mtime is now ``mtime_ns``: the step is evidence of its writer's heartbeat."""
        step = mtime_ns - entry.mtime_ns
        if step:
            self.moved_at = self._clock()
        if self._patience is not None and step > 0 and (entry.beat_ns == 0 or step < entry.beat_ns):
            entry.beat_ns = step
            entry.slack = self._patience.slack(step)

    @property
    def blind(self) -> str | None:
        """Why this reader cannot judge liveness now (None: it can)."""
        return self._blind

    def pause_judging(self, reason: str) -> None:
        """Judge nothing dead until :meth:`resume_judging`: this reader cannot tell a stale store
        from an unreachable one (``reason``)."""
        with self.lock:
            if self._blind is None:
                self._changes += 1
            self._blind = reason

    def resume_judging(self, *, restart: bool = True) -> None:
        """Judge liveness again; ``restart``: every record gets a full TTL from now to show a
        heartbeat (what this reader saw meanwhile may be as old as the spell)."""
        with self.lock:
            if self._blind is None:
                return
            self._blind = None
            self._changes += 1
            if restart:
                self.restart_clocks()

    def restart_clocks(self) -> None:
        """Count every record's and leftover's stillness from now: what this reader saw before may
        be as old as the stall (the mtimes it read could not move meanwhile)."""
        now = self._clock()
        with self.lock:
            for entry in (*self._entries.values(), *self._leftovers.values()):
                entry.seen_at = max(entry.seen_at, now)
            self._changes += 1

    def inode_of(self, name: str) -> int | None:
        """The inode this view last saw under ``name`` (None when it holds no such file)."""
        with self.lock:
            entry = self._entries.get(name)
            return entry.ino if entry is not None else None

    def inodes(self) -> dict[str, int]:
        """The inode this view last saw under each name (one snapshot, for checking many names)."""
        with self.lock:
            return {name: entry.ino for name, entry in self._entries.items()}

    def foreign(self) -> dict[str, str]:
        """Entries of the last full scan that are neither records nor leftovers: name -> what it is."""
        with self.lock:
            return dict(self._foreign)

    def forget_leftover(self, name: str) -> None:
        """Drop what the view knows of a leftover file that was removed."""
        with self.lock:
            self._leftovers.pop(name, None)

    def _track_leftovers(self, found: dict[str, os.stat_result]) -> None:
        now = self._clock()
        tracked = {}
        for name, st in found.items():
            entry = self._leftovers.get(name)
            if entry is None or (entry.ino, entry.mtime_ns) != (st.st_ino, st.st_mtime_ns):
                entry = Entry(st.st_ino, st.st_size, st.st_mtime_ns, now, None, None, slack=self._new_slack)
            tracked[name] = entry
        self._leftovers = tracked

    def _track_foreign(self, found: dict[str, str]) -> None:
        new = [name for name in found if name not in self._foreign]
        self._foreign = found
        for name in new[:MAX_NAMED_WARNINGS]:
            log.warning(
                "ignoring %s in %s: %s; only records belong in a bucket (it is never read or deleted)",
                printable(name),
                self.directory.path,
                found[name],
            )
        if len(new) > MAX_NAMED_WARNINGS:
            log.warning(
                "ignoring %d more entries of %s that are not records (discovery-sync doctor lists them)",
                len(new) - MAX_NAMED_WARNINGS,
                self.directory.path,
            )

    def __len__(self) -> int:
        with self.lock:
            return len(self._entries)


def _noting_held(gate: Gate, held: list[str]) -> Gate:
    """``gate``, noting in ``held`` the names whose change it holds back."""

    def noting(name: str, content: Content | None) -> bool:
        if gate(name, content):
            return True
        held.append(name)
        return False

    return noting


def _unheard(event: DiscoveryEvent, instance: DiscoveryInstance | None) -> None:
    """The publisher of a scan nobody subscribed to."""


def _identity_path(instance: DiscoveryInstance) -> str:
    return instance.id().to_path()


def _gone(dir_fd: int, name: str) -> bool:
    """No regular file under ``name`` now (opened, so a network mount asks its server)."""
    try:
        return stat_regular(dir_fd, name) is None
    except OSError:  # there, though this reader may not open it
        return False


def _scan(
    dir_fd: int,
    name_prefix: str,
    known: dict[str, Entry],
    full: bool,
    own: Mapping[str, int] | None = None,
) -> _Scan:
    """Regular files with record names (and the prefix) in the directory. Known ones come with
    their stat; new ones are listed in ``unread`` (opening them tells all a stat would). ``own``:
    this client's files (name -> the inode it wrote); one whose listing and view show that inode
    is listed in ``touched`` instead of being stat-ed. A ``full`` scan also collects leftover
    files and foreign entries."""
    scan = _Scan({}, [], {}, {}, [])
    with listing(dir_fd) as entries:
        for entry in entries:
            name = entry.name
            cached = known.get(name)
            if cached is not None:  # a record name already, and no dot file
                candidate = not name_prefix or name.startswith(name_prefix)
                if own is not None and candidate and own.get(name) == cached.ino == entry.inode():
                    scan.found[name] = None
                    scan.touched.append(name)
                    continue
            else:
                candidate = name.startswith(name_prefix) and not name.startswith(".") and may_be_record(name)
                # the type the listing gives costs no system call (DT_UNKNOWN falls back to lstat)
                with contextlib.suppress(OSError):
                    if candidate and entry.is_file(follow_symlinks=False):
                        scan.found[name] = None
                        scan.unread.append(name)
                        continue
            if not candidate and not full:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError:  # judged again by the next scan; what the view knows stays
                if candidate:
                    scan.found[name] = None
                continue
            if candidate and stat.S_ISREG(st.st_mode):
                scan.found[name] = st
            elif full:
                problem = describe_entry(name, st)
                if problem is None and name.startswith("."):
                    scan.leftovers[name] = st
                elif problem is not None:
                    scan.foreign[name] = problem
    return scan
