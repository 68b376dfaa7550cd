"""One bucket directory as this reader sees it: parsed records, liveness, change events.

A file is re-read only when its (inode, size, mtime, ctime) changed, and re-parsed only when
its bytes changed (the view keeps a digest of them, not a copy), so a rescan of an unchanged
store costs one ``stat`` per file. Atomic writers give every new content a new inode (or, on a
freed inode the filesystem hands out again, a new ctime, which no ``utime`` can set back); a
heartbeat only moves the mtime (and with it the ctime).

Three scans read the directory (the listing itself: :mod:`.survey`), cheapest first: a
*listing* scan reads nothing, not even the listing, while the directory did not change since its
last scan (:meth:`BucketView.unchanged`; ``list()`` on a local store), and else runs one of the
others; a *full* scan (the rescans of a client whose notifier
sees every write of this host: inotify) stats every file but does not re-read one whose mtime
moved on the same inode and size: it takes that as a heartbeat and leaves the file marked
unverified, and does not stat this client's own files while the listing shows the inode it
wrote and its heartbeat beats (:class:`Touched`); a *deep* scan re-reads every file whose
version changed, and the unverified ones (an in-place rewrite of the same size whose
notification was lost). ``list()`` reuses its ordered result while the view did not change
(:meth:`BucketView.listed`).

Liveness (docs/design.md §6) is decided in one place, :attr:`Entry.due`, by one of two rules.
The kernel's (:mod:`.owners`, on a store whose clients share one kernel): a record whose
owner's lock is held is alive whatever its mtime says, one whose owner's lock was released is
dead at once. Otherwise the mtime rule: a record is dead when its mtime has not changed for ``dead_after``
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
file name are never published. No problem with one file ends a scan. A record of a type this
version does not know (a newer runtime's kind) is skipped the same way but not warned about: the
first of each type is said once at INFO (:mod:`discovery_sync.unknown_kinds`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import UnknownRecordType, ValidationError
from discovery_sync.events import Added, DiscoveryEvent, Removed
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.queries import Query
from discovery_sync.reconcile import Change, apply
from discovery_sync.unknown_kinds import skip_unknown

from .directory import DirectoryClosed, StoreDirectory
from .liveness import Patience
from .names import may_be_record, printable, record_from
from .owner_lock import OwnerProbe, OwnerState
from .survey import DirState, Survey, dir_state, gone, now_ns, settled, survey
from .wire import DEFAULT_MAX_RECORD_BYTES, RecordTooLarge, read_regular, stat_entry, unread_reason

log = logging.getLogger("discovery_sync.backends.file")

#: what a scan changed, in the order applied: each event with the record's new value (None: Removed)
Changes = list[tuple[DiscoveryEvent, "DiscoveryInstance | None"]]
Content = bytes  # a digest of a file's bytes
Gate = Callable[[str, "Content | None"], bool]
#: foreign names warned about by name in one scan; the rest are counted in one line
MAX_NAMED_WARNINGS = 10
#: ordered results of distinct queries kept for reuse by ``listed()`` (the oldest goes first)
MAX_CACHED_LISTS = 16
#: a scan longer than this, and than STALL_FACTOR times the usual for as many files, was stalled by the store
STALL_AFTER = 2.0
STALL_FACTOR = 8.0
#: seconds per file a scan is taken to need until one was measured (generous: a first scan of a big
#: store under strace must not look stalled)
FIRST_GUESS_PER_FILE = 200e-6
#: the named scans, cheapest first
LISTING, FULL, DEEP = "listing", "full", "deep"


class UsualDuration:
    """How long a store operation usually takes per file it handles (a moving average of those
    not stalled): one longer than :meth:`stall_after` for its files was stalled by the store (a
    frozen mount). Per file, so that a big healthy store (seconds a scan at 50k records) is
    not taken for a frozen one; at least STALL_AFTER, so that a small one is not either."""

    def __init__(self) -> None:
        self.per_file = FIRST_GUESS_PER_FILE
        self._measured = False

    def stall_after(self, files: int) -> float:
        """Seconds after which an operation on ``files`` files is stalled."""
        return max(STALL_AFTER, STALL_FACTOR * self.per_file * files)

    def stalled(self, took: float, files: int) -> bool:
        """Whether an operation on ``files`` files that took ``took`` seconds was stalled; if not,
        it joins the average."""
        if took > self.stall_after(files):
            return True
        if files:
            sample = took / files
            self.per_file = self.per_file + (sample - self.per_file) / 8 if self._measured else sample
            self._measured = True
        return False


def _nothing() -> None:
    pass


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
    beat_ns: int = 0  # the shortest confirmed step between two of its mtimes: its writer's heartbeat (0: none yet)
    step_ns: int = 0  # the last step seen, which the next one must confirm (:meth:`BucketView._moved`)
    slack: float = 0.0  # seconds it may stand still beyond dead_after (a writer that beats slower)
    owner: OwnerState = OwnerState.UNKNOWN  # its owner's lock, as last probed (:mod:`.owners`)
    uid: int = -1  # the file's owner: only an owner file of the same user speaks for it

    @property
    def due(self) -> float:
        """The one place that decides whether a record is alive: it is dead once ``due`` is more
        than ``dead_after`` ago on the reader's clock. An owner whose lock is held keeps it alive
        (never due), one whose lock was released leaves it dead now; else (the mtime rule: no
        owner lock known, or a cohort's vacant id) ``due`` is when its mtime was first seen, plus
        the slack its writer's heartbeat asks."""
        return owner_due(self.owner, self.seen_at + self.slack)


_HELD, _RELEASED, _UNKNOWN = OwnerState.HELD, OwnerState.RELEASED, OwnerState.UNKNOWN  # hot path: no enum lookups
_NEVER, _NOW = float("inf"), float("-inf")


def owner_due(owner: OwnerState, mtime_due: float) -> float:
    """:attr:`Entry.due` for an owner in state ``owner`` and an mtime rule's ``mtime_due``."""
    if owner is _UNKNOWN:
        return mtime_due
    if owner is _HELD:
        return _NEVER
    return _NOW if owner is _RELEASED else mtime_due


@dataclass(slots=True)
class _OwnerMemo:
    """What :meth:`BucketView.owner_ids` found and the probes :meth:`BucketView.judge_owners`
    applied, each at a change count of the view (-1: none): an idle view answers from here."""

    ids_at: int = -1
    ids: frozenset[int] = frozenset()
    judged_at: int = -1
    judged: Mapping[int, OwnerProbe] = field(default_factory=dict)


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


class BucketView:
    """The cached state of one bucket directory. All methods are thread-safe.

    The named scans (:meth:`scan_full`, :meth:`scan_deep`, after :meth:`unchanged` for a listing
    scan), :meth:`read_name`
    and :meth:`expire` apply what they find under the view's ``lock`` and return the changes as
    ``(event, new value)`` pairs, in the order applied; the caller publishes them. A caller that
    publishes holds ``publishing`` around the call and the publishing, so the feeds get every
    view's changes in order; subscribers are added under it too. When ``subscribed`` says nobody
    listens to the bucket, the changes are applied and none is returned.
    """

    #: full scans must stat records of live owners too: :mod:`.sight` looks for others' heartbeats
    mtimes_needed = False
    #: when a file was last seen to change (a beat, a new content): writes reach the store
    moved_at = float("-inf")
    #: bumped whenever :meth:`inodes` may answer otherwise (an entry added, dropped, or of another inode)
    inodes_version = 0

    def __init__(
        self,
        kind: RecordKind,
        directory: StoreDirectory,
        dead_after: float,
        *,
        settle: float = 0.0,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        clock: Clock = SYSTEM,
        missing_is_empty: bool = False,
        subscribed: Callable[[RecordKind], bool] | None = None,
        patience: Patience | None = None,
        on_stall: Callable[[], None] | None = None,
    ) -> None:
        """``dead_after``: seconds an unchanged mtime stays alive; ``settle``: seconds a read may
        disagree with the store (the mount's cache window); files over ``max_record_bytes`` are
        never read. ``missing_is_empty`` (read-only clients, which never create the store): a
        directory that does not exist (yet, or any longer) is an empty bucket, not an error.
        ``subscribed(kind)``: whether anyone listens to changes of records of ``kind`` now (asked
        under ``publishing``). ``patience``: the slack of a writer whose heartbeat is slower than
        this reader's TTL asks (None: no writer's is, this reader's TTL is the longest any
        heartbeat stands for). ``on_stall()``: the store stalled a read (:meth:`stalled`); default:
        :meth:`restart_clocks`."""
        self.kind, self.missing_is_empty = kind, missing_is_empty
        self._on_stall = on_stall if on_stall is not None else self.restart_clocks
        self.progress: Callable[[], None] = _nothing  # the store answered a scan or sweep (rescan.py)
        self.directory = directory
        self.dead_after = dead_after
        self.settle = settle
        self.max_record_bytes = max_record_bytes
        self.lock = threading.RLock()  # the state
        self.publishing = threading.RLock()  # scans and their publishing, in order
        self._subscribed = subscribed
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._leftovers: dict[str, Entry] = {}  # temp and hidden files, by name (content unread)
        self._foreign: dict[str, str] = {}  # other entries of the last whole scan: name -> what it is
        # bumped by every change that may alter what valid() returns other than time passing (an
        # entry added, dropped, given another value or expired state, or a dead one alive again)
        self._changes = 0
        self._listed: dict[tuple[str, frozenset[str], Query], _Listed] = {}
        # name prefix -> the directory's (inode, mtime, ctime) at the last scan of it, when settled
        self._unchanged: dict[str, DirState | None] = {}
        self._patience = patience
        self._new_slack = patience.slack(0) if patience is not None else 0.0
        self._blind: str | None = None  # why nothing is judged dead now
        self._unwarned: set[str] = set()  # names of entries with a problem warn_pending() has not said yet
        self._scan_cost = UsualDuration()  # of a scan: a far longer one was stalled
        self._owner_memo = _OwnerMemo()

    # -- the named scans ------------------------------------------------------------------------
    def unchanged(self, name_prefix: str = "") -> bool:
        """Whether the directory itself did not change since the last scan of this prefix and that
        scan applied all it saw (no change held back by its ``gate``): nothing was created,
        removed or renamed in it since, and atomic writers give new content a new inode through a
        rename or link, so a *listing* scan (``unchanged()`` or else a scan) misses only liveness
        (mtimes, judged by full scans) and in-place rewrites (their notification, or a deep scan).
        The directory's mtime tells only while it is older than the scan that saw it by more than
        the filesystem's timestamp granularity (:func:`.survey.settled`). Raises OSError (or
        SymlinkRefused) when the directory cannot be read; False when it does not exist."""
        known = self._unchanged.get(name_prefix)
        if known is None:
            return False
        try:
            self.directory.revalidate()
            with self.directory.use() as dir_fd:
                return dir_state(dir_fd) == known
        except (FileNotFoundError, DirectoryClosed):
            if not self.missing_is_empty:
                raise
            return False

    def scan_full(self, *, gate: Gate | None = None, touched: Touched | None = None) -> Changes:
        """Stat every file; one whose inode and size are unchanged and whose mtime moved is not
        re-read but taken as a heartbeat and left unverified (the next deep scan reads it).
        ``touched``: this client's own files; one whose listing shows the inode this client
        wrote, the one the view holds, is not even stat-ed but taken as alive at ``touched.at``
        (a file replaced by another writer has another inode; an in-place rewrite keeps it, and
        waits for its notification or the next deep scan). Nor is a record whose owner holds its
        lock and whose listing shows the inode the view holds (the kernel says it lives), unless
        :attr:`mtimes_needed` (then every mtime that moves shows that others write)."""
        return self._scan("", FULL, gate, touched)

    def scan_deep(self, name_prefix: str = "", *, gate: Gate | None = None) -> Changes:
        """Stat every file (whose name starts with ``name_prefix``) and re-read each whose version
        changed or that a full scan left unverified. Every file is stat-ed: a record deleted and
        written again may get the freed inode back (ext4 reuses it at once)."""
        return self._scan(name_prefix, DEEP, gate, None)

    def _scan(self, name_prefix: str, depth: str, gate: Gate | None, touched: Touched | None) -> Changes:
        """A scan (see the named ones): ``gate(name, content)`` (content None for a vanished file)
        may hold a content change back, for a later scan or notification; heartbeat-only changes
        always apply. Raises OSError (or SymlinkRefused) only when the directory itself cannot be
        read; with ``missing_is_empty`` a missing directory is closed and every record of it is
        Removed instead. A scan far slower than usual restarts every clock (:meth:`_timed`)."""
        started = self._clock.monotonic()
        try:
            return self._scan_directory(name_prefix, depth, gate, touched)
        finally:
            self._timed(self._clock.monotonic() - started, len(self._entries))

    def _scan_directory(self, name_prefix: str, depth: str, gate: Gate | None, touched: Touched | None) -> Changes:
        with contextlib.ExitStack() as using:
            try:
                began_ns = now_ns()
                self.directory.revalidate()
                dir_fd = using.enter_context(self.directory.use())
                state = dir_state(dir_fd)
                whole = not name_prefix
                full = depth == FULL
                own = touched.inodes if touched is not None and whole and full else None
                # while this client cannot trust its own sight, others' heartbeats show in mtimes
                skip_held = full and not self.mtimes_needed
                found = survey(
                    dir_fd, name_prefix, self._entries, state=state, began_ns=began_ns, whole=whole, own=own,
                    skip_held=skip_held, answered=self.progress,
                )  # fmt: skip
                self.progress()
            except (FileNotFoundError, DirectoryClosed):
                if not self.missing_is_empty:
                    raise
                return self._vanished()
            with self.lock:
                return self._apply(dir_fd, found, name_prefix, depth != FULL, gate, touched)

    def _apply(
        self, dir_fd: int, found: Survey, name_prefix: str, deep: bool, gate: Gate | None, touched: Touched | None
    ) -> Changes:
        """Apply a survey (the view's lock held)."""
        held: list[str] = []  # names whose change ``gate`` held back: the view is behind the directory
        if gate is not None:
            gate = _noting_held(gate, held)
        out: Changes | None = [] if self._heard() else None
        if found.whole:
            self._track_leftovers(found.leftovers)
            self._track_foreign(found.foreign)
        for name, st in found.found.items():
            if st is not None:
                self._update(dir_fd, name, st, out, gate, deep=deep)
        for name in found.unread:
            self._add(dir_fd, name, out, gate)
        if found.touched:
            assert touched is not None  # only its files are in found.touched
            self._kept_alive(found.touched, touched.at, out)
        missing = self._entries.keys() - found.found.keys()  # a set operation: no loop in Python
        for name in [n for n in self._entries if n in missing and n.startswith(name_prefix)] if missing else []:
            # the listing was taken before the lock: a file a notification applied since is missing from it, yet there
            if gone(dir_fd, name) and (gate is None or gate(name, None)):
                self._drop(name, out)
        if len(self._unchanged) >= MAX_CACHED_LISTS:
            self._unchanged.clear()
        # a later change gives the directory another mtime only if this one is settled; and the
        # view must hold all the listing showed
        trusted_next = settled(found.began_ns, found.state[1]) and not held
        self._unchanged[name_prefix] = found.state if trusted_next else None
        return out or []

    def _heard(self) -> bool:
        return self._subscribed is None or self._subscribed(self.kind)

    def _timed(self, took: float, files: int) -> None:
        """A scan of ``files`` files took ``took`` seconds: one far slower than usual was stalled by
        the store (a frozen mount), so what it read may be as old as its start: every clock starts
        again."""
        if self._scan_cost.stalled(took, files):
            usual = self._scan_cost.per_file * files
            self.stalled(f"a scan of {self.kind.bucket} took {took:.1f} s (usually {usual:.2f} s for {files} files)")

    def stalled(self, what: str) -> None:
        """The store stalled a read (``what``, for the log): while it did, no heartbeat could show,
        so what this reader saw before says nothing about liveness now: ``on_stall()``."""
        log.warning(
            "%s: the store stalled; no record is judged dead before it has had a full TTL to show a heartbeat again",
            what,
        )
        self._on_stall()

    def _vanished(self) -> Changes:
        """The directory does not exist (``missing_is_empty``): close it; every record of it is gone."""
        self.directory.close()
        out: Changes = []
        with self.lock:
            for name in list(self._entries):
                self._drop(name, out)
            self._leftovers.clear()
            self._foreign.clear()
        return out if self._heard() else []

    def read_name(self, name: str) -> Changes:
        """Re-read one file (after a change notification) and return what changed.

        The file is opened rather than stat-ed: a network mount may answer ``stat`` of a file
        another host deleted from its cache, but opening it asks the server. A file that cannot
        be read now is left to the next scan.
        """
        if name.startswith(".") or not may_be_record(name):
            return []
        if self.missing_is_empty and not self.directory.is_open:
            return []  # the directory went away meanwhile: the next scan empties the view
        out: Changes = []
        # read under the lock: a read applied after a scan that saw the file gone would bring it back
        with self.directory.use() as dir_fd, self.lock:
            try:
                found = read_regular(dir_fd, name, self.max_record_bytes)
            except (OSError, RecordTooLarge) as exc:
                log.debug("cannot read %s/%s now (the next rescan judges it): %s", self.kind.bucket, name, exc)
                return []
            if found is None:
                self._drop(name, out)
            else:
                self._update(dir_fd, name, found[0], out, raw=found[1])
        return out

    # -- applying what is stored under one name (the view's lock held) ----------------------------------
    def _update(
        self,
        dir_fd: int,
        name: str,
        st: os.stat_result | None,
        out: Changes | None,
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
                self._seen_alive(entry, self._clock.monotonic(), out, st)
                entry.unverified = True
                return
        now = self._clock.monotonic()
        # watchers were told an expired record is gone: what comes now is new to them
        old = entry.valid if entry is not None and not entry.expired else None
        if raw is None:
            found = self._read(dir_fd, name, st, entry, old, gate, out)
            if found is None:
                return
            st, raw = found
        assert st is not None  # bytes read come with their fstat
        content = digest(raw)
        if entry is not None and content == entry.content:
            if entry.mtime_ns != st.st_mtime_ns:
                self._seen_alive(entry, now, out, st, new_file=entry.ino != st.st_ino)
            if entry.ino != st.st_ino:
                self.inodes_version += 1
            entry.ino, entry.size, entry.ctime_ns, entry.unverified = st.st_ino, st.st_size, st.st_ctime_ns, False
            return
        if gate is not None and not gate(name, content):
            return
        seen_at = entry.seen_at if entry is not None and entry.mtime_ns == st.st_mtime_ns else now
        self.moved_at = now  # a new content: someone writes to the store
        new = Entry(st.st_ino, st.st_size, st.st_mtime_ns, seen_at, content, old)
        if entry is not None and entry.owner is OwnerState.HELD:  # a live owner's change (a dead one's: next probe)
            new.owner = OwnerState.HELD
        self._store(name, new, st, raw, now, out)

    def _add(self, dir_fd: int, name: str, out: Changes | None, gate: Gate | None) -> None:
        """:meth:`_update` of a name the view holds no entry for (every file of a first scan):
        the same rules, in fewer steps. A record found is Added; no old value can reject it."""
        if name in self._entries:  # a notification applied it since the listing
            self._update(dir_fd, name, None, out, gate)
            return
        found = self._read(dir_fd, name, None, None, None, None, out)
        if found is None:  # unreadable (noted), vanished, or no longer a regular file
            return
        st, raw = found
        content = digest(raw)
        if gate is not None and not gate(name, content):
            return
        now = self._clock.monotonic()
        self._store(name, Entry(st.st_ino, st.st_size, st.st_mtime_ns, now, content, None), st, raw, now, out)

    def _read(
        self,
        dir_fd: int,
        name: str,
        st: os.stat_result | None,
        entry: Entry | None,
        old: DiscoveryInstance | None,
        gate: Gate | None,
        out: Changes | None,
    ) -> tuple[os.stat_result, bytes] | None:
        """The file's stat and bytes; None when it cannot be read (noted as such) or is gone (then
        dropped, unless ``gate`` holds that back: a notification may still deliver it)."""
        try:
            found = read_regular(dir_fd, name, self.max_record_bytes)
            self.progress()
        except (OSError, RecordTooLarge) as exc:
            if st is None:
                st = stat_entry(dir_fd, name)
            if st is not None:
                self._note_unread(name, entry, st, old, exc, out)
            return None
        if found is None and (gate is None or gate(name, None)):  # vanished, or no longer a regular file
            self._drop(name, out)
        return found

    def _store(self, name: str, entry: Entry, st: os.stat_result, raw: bytes, now: float, out: Changes | None) -> None:
        """Keep ``entry``, a new content under ``name`` (its ``valid`` the old value, if any), and
        note what it changes: a record Added or changed, or a content that is not served."""
        entry.read_at, entry.ctime_ns, entry.slack, entry.uid = now, st.st_ctime_ns, self._new_slack, st.st_uid
        old = entry.valid
        self._entries[name] = entry
        self.inodes_version += 1
        self._changes += 1
        try:  # the name was checked when the last valid identity was read under it
            instance = record_from(raw, self.kind, name, known=old.id() if old is not None else None)
        except UnknownRecordType as exc:  # a newer runtime's kind: no fault of the store, said once
            entry.problem, entry.warned = str(exc), True
            skip_unknown(log, self.kind.bucket, name, exc)
            return
        except ValidationError as exc:
            entry.problem = str(exc)  # reported by warn_pending(), once it has settled
            self._unwarned.add(name)
            return
        if old is None:  # the usual case (a first scan): no old value can reject it
            entry.valid = instance
            if out is not None:
                out.append((Added(instance), instance))
            return
        valid, events, change = apply(old, instance)
        entry.valid = valid
        if change is Change.REJECTED:
            log.warning("ignoring a change of model card %s whose taints cannot be read", name)
        if out is not None:
            out.extend((event, valid) for event in events)

    def _kept_alive(self, names: list[str], touched_at: float, out: Changes | None) -> None:
        """This client's heartbeat touched these files of its own after ``touched_at``: alive then
        (their mtime and content, unchanged as far as the listing shows, are not looked at)."""
        alive_since = self._clock.monotonic() - self.dead_after  # one reading for the whole batch
        for name in names:
            entry = self._entries.get(name)
            if entry is not None and entry.seen_at < touched_at:
                self._seen_alive(entry, touched_at, out, alive_since=alive_since)

    def _seen_alive(
        self,
        entry: Entry,
        seen_at: float,
        out: Changes | None,
        st: os.stat_result | None = None,
        *,
        alive_since: float | None = None,
        new_file: bool = False,
    ) -> None:
        """The one place that decides "alive again": ``entry``'s file was known alive at
        ``seen_at`` (its mtime moved: ``st`` is its new stat, when it was seen). If that is within
        ``dead_after`` of now (``alive_since``: now less ``dead_after``, when the caller read the
        clock already), an entry dead by the clock is alive again (a change) and an expired one
        is Added again: its mtime moves after all. ``new_file``: the same bytes were written to a
        new file (a successor's takeover, another writer): no evidence of its heartbeat yet."""
        if alive_since is None:
            alive_since = self._clock.monotonic() - self.dead_after
        was_dead = entry.due < alive_since
        if new_file and entry.owner is OwnerState.RELEASED:  # written anew: by a new owner, maybe
            entry.owner = OwnerState.UNKNOWN
        if st is not None:
            self._moved(entry, st.st_mtime_ns, new_file=new_file)
            entry.mtime_ns, entry.ctime_ns = st.st_mtime_ns, st.st_ctime_ns
        if owner_due(entry.owner, seen_at + entry.slack) >= alive_since:
            if was_dead:
                self._changes += 1
            if entry.expired:
                entry.expired = False
                self._changes += 1
                if entry.valid is not None and out is not None:
                    out.append((Added(entry.valid), entry.valid))
        entry.seen_at = seen_at

    def _note_unread(
        self,
        name: str,
        entry: Entry | None,
        st: os.stat_result,
        old: DiscoveryInstance | None,
        exc: Exception,
        out: Changes | None,
    ) -> None:
        """A file that could not be read: kept as an entry of this version (not read again until
        it changes, swept when dead, warned about once), with the last valid value of its name."""
        problem = unread_reason(exc)
        now = self._clock.monotonic()
        if entry is not None and entry.problem == problem and (entry.ino, entry.size) == (st.st_ino, st.st_size):
            if entry.mtime_ns != st.st_mtime_ns:  # a heartbeat
                self._seen_alive(entry, now, out, st)
            entry.unverified = False
            return
        seen_at = entry.seen_at if entry is not None and entry.mtime_ns == st.st_mtime_ns else now
        self._changes += 1
        unread = Entry(st.st_ino, st.st_size, st.st_mtime_ns, seen_at, None, old, read_at=now, problem=problem)
        unread.ctime_ns, unread.slack, unread.uid = st.st_ctime_ns, self._new_slack, st.st_uid
        self._entries[name] = unread
        self.inodes_version += 1
        self._unwarned.add(name)

    def warn_pending(self) -> None:
        """Warn once about each file whose content is not served, once it has stood for the
        settle time.

        Rescans call this. A notification may arrive while a non-atomic writer is mid-write, and
        within a network mount's cache window a replaced file may be read cut to its cached size,
        so content is judged only once it has stood that long.
        """
        now = self._clock.monotonic()
        with self.lock:
            for name in list(self._unwarned):
                entry = self._entries.get(name)
                if entry is None or entry.problem is None or entry.warned:
                    self._unwarned.discard(name)  # gone, readable again, or said already
                elif now - entry.read_at >= self.settle:
                    self._unwarned.discard(name)
                    entry.warned = True
                    log.warning("skipping the file %s in %s: %s", name, self.directory.path, entry.problem)

    def expire(self, name: str) -> Changes:
        """A dead record that stays in the directory (it could not be deleted): Removed once; a
        heartbeat that moves its mtime again brings it back with Added."""
        with self.lock:
            entry = self._entries.get(name)
            if entry is None or entry.expired:
                return []
            entry.expired = True
            self._changes += 1
            if entry.valid is None or not self._heard():
                return []
            return [(Removed(entry.valid.id()), None)]

    def _drop(self, name: str, out: Changes | None) -> None:
        entry = self._entries.pop(name, None)
        self.inodes_version += 1
        if entry is None:
            return
        self._changes += 1
        if entry.valid is not None and not entry.expired and out is not None:
            out.append((Removed(entry.valid.id()), None))

    # -- state --------------------------------------------------------------------------------------
    def valid(self, name_prefix: str = "", *, skip: frozenset[str] = frozenset()) -> list[DiscoveryInstance]:
        """Live valid records (dead ones excluded) whose names start with ``name_prefix``."""
        alive_since = self._alive_since(self._clock.monotonic())
        with self.lock:
            return [
                e.valid
                for n, e in self._entries.items()
                if e.valid is not None
                and not e.expired
                and n.startswith(name_prefix)
                and (n in skip or e.due >= alive_since)
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
        now = self._clock.monotonic()
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
                    due = entry.due
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
        alive_since = self._alive_since(self._clock.monotonic())
        with self.lock:
            records = [(n, e) for n, e in self._entries.items() if n not in owned and e.due < alive_since]
            return records + [(n, e) for n, e in self._leftovers.items() if e.seen_at + e.slack < alive_since]

    def owner_ids(self) -> frozenset[int]:
        """The instance ids of the records this view holds: the owners whose locks tell whether
        they are alive (:mod:`.owners`). Kept while the view does not change (an idle store)."""
        with self.lock:
            memo = self._owner_memo
            if memo.ids_at != self._changes:
                memo.ids = frozenset(e.valid.instance_id for e in self._entries.values() if e.valid is not None)
                memo.ids_at = self._changes
            return memo.ids

    def judge_owners(self, probes: Mapping[int, OwnerProbe], probed_at: float) -> bool:
        """Give each record the state the probe of its owner's lock found (``probes``, by instance
        id; the probe began at ``probed_at`` on the clock), if the owner file is of the record's
        user (else: unknown). A record read since then may be a new owner's: a release does not
        concern it (the next probe does). True when a record is dead by this (its owner's lock
        was released)."""
        died = waiting = False
        with self.lock:
            memo = self._owner_memo
            if (memo.judged_at, memo.judged) == (self._changes, probes):
                return False  # nothing changed since the same answers were applied
            for entry in self._entries.values():
                valid = entry.valid
                probe = probes.get(valid.instance_id) if valid is not None else None
                if probe is None:
                    continue
                state = probe.state if probe.uid == entry.uid else OwnerState.UNKNOWN
                if state is entry.owner:
                    continue
                if state is OwnerState.RELEASED and entry.read_at > probed_at:
                    waiting = True  # judged by the next probe, even if it answers the same
                    continue
                if entry.owner is OwnerState.HELD and state is not OwnerState.RELEASED:
                    # its mtime was not looked at while the lock spoke (full scans skip it): the
                    # mtime rule counts from the last moment the lock showed it alive
                    entry.seen_at = max(entry.seen_at, probed_at)
                entry.owner = state
                self._changes += 1
                died = died or (state is OwnerState.RELEASED and not entry.expired)
            memo.judged_at, memo.judged = (-1, {}) if waiting else (self._changes, dict(probes))
        return died

    def suspects(self, owned: frozenset[str]) -> int:
        """How many files could be judged dead once they stood still long enough: records not in
        ``owned``, and leftover files."""
        with self.lock:
            return sum(name not in owned for name in self._entries) + len(self._leftovers)

    # -- judging liveness ---------------------------------------------------------------------------
    def _alive_since(self, now: float) -> float:
        """An entry whose ``due`` is older than this is dead (none while the view is blind)."""
        return now - self.dead_after if self._blind is None else float("-inf")

    def _moved(self, entry: Entry, mtime_ns: int, *, new_file: bool = False) -> None:
        """``entry``'s mtime is now ``mtime_ns``: the step may be evidence of its writer's heartbeat.

        Evidence can only make a reader less patient, so it must never lie (docs/design.md §6,
        "Mixed TTLs"): a step counts only once the next step confirms it (within a quarter),
        so a stray ``touch`` between two beats, or a writer's clock stepped back, gives one short
        step that the next, full one contradicts; and a file written anew under the name
        (``new_file``: a takeover by a successor, another writer) starts without evidence, since
        the step from its predecessor's last beat says nothing of its own heartbeat."""
        step = mtime_ns - entry.mtime_ns
        if step:
            self.moved_at = self._clock.monotonic()
        if self._patience is None:
            return
        if new_file:
            entry.beat_ns, entry.step_ns, entry.slack = 0, 0, self._new_slack
            return
        if step <= 0:
            return
        previous, entry.step_ns = entry.step_ns, step
        if not previous or abs(previous - step) * 4 > max(previous, step):
            return
        beat = max(previous, step)
        if entry.beat_ns == 0 or beat < entry.beat_ns:
            entry.beat_ns = beat
            entry.slack = self._patience.slack(beat)

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
        now = self._clock.monotonic()
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
        now = self._clock.monotonic()
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


def _identity_path(instance: DiscoveryInstance) -> str:
    return instance.id().to_path()


def restart_clocks_of(views: Iterable[BucketView]) -> None:
    """A read of one bucket stalled: the buckets of a client share one mount, so every view's
    clocks start again (another bucket's next scan may be quick and still older than the stall)."""
    for view in views:
        view.restart_clocks()


def bucket_views(
    directories: Mapping[RecordKind, StoreDirectory], dead_after: float, **options: Any
) -> dict[RecordKind, BucketView]:
    """A view of each bucket (``options``: as :class:`BucketView` takes them); a read of one that
    stalls starts every view's clocks again (:func:`restart_clocks_of`)."""
    views: dict[RecordKind, BucketView] = {}
    for kind, directory in directories.items():
        on_stall = lambda: restart_clocks_of(views.values())  # noqa: E731 - the views made by then
        views[kind] = BucketView(kind, directory, dead_after, on_stall=on_stall, **options)
    return views
