"""One bucket directory as this reader sees it: parsed records, liveness, change events.

A file is re-read only when its (inode, size, mtime) changed, and re-parsed only when its
bytes changed, so a rescan of an unchanged store costs one ``stat`` per file. Atomic writers
give every new content a new inode; a heartbeat only moves the mtime.

Liveness follows design §6: a record is dead when its mtime has not changed for ``dead_after``
seconds *of this reader's monotonic clock* (the TTL plus the mount's cache window), counted
from the moment this reader first saw that mtime. Comparing mtimes with the local wall clock is
never done, so skewed clocks between hosts cannot kill a live worker.

Within a network mount's cache window a read may disagree with the directory: a deleted file
still stats, a replaced one is read cut to its cached size. So a vanished file is confirmed by
opening it, and unreadable content is reported only once it has stood for the cache window.
Files a writer or the filesystem left behind (``LEFTOVER_PREFIXES``) are tracked by the same
liveness rule, so they can be swept too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from discovery_sync.errors import ValidationError
from discovery_sync.events import DiscoveryEvent, Removed
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance, instance_from_json
from discovery_sync.reconcile import Change, apply

from .records import LEFTOVER_PREFIXES, read_open, read_record

log = logging.getLogger("discovery_sync.backends.file")

Publish = Callable[[DiscoveryEvent, "DiscoveryInstance | None"], None]
Version = tuple[int, int, int]  # (inode, size, mtime_ns) of a file
Gate = Callable[[str, "Version | None"], bool]


@dataclass(slots=True)
class Entry:
    ino: int
    size: int
    mtime_ns: int
    seen_at: float  # reader's monotonic time when this mtime was first observed
    raw: bytes
    valid: DiscoveryInstance | None  # the last valid value stored under this name
    read_at: float = 0.0  # reader's monotonic time when this content was first read
    problem: str | None = None  # why the content is unreadable
    warned: bool = False  # reset with every new content

    @property
    def version(self) -> tuple[int, int, int]:
        return (self.ino, self.size, self.mtime_ns)


class BucketView:
    """The cached state of one bucket directory. All methods are thread-safe.

    Every method that reads the directory reports the changes it finds through ``publish``
    while holding the view's lock, so subscribers see changes in the order the view applied
    them.
    """

    def __init__(
        self,
        kind: RecordKind,
        directory: Path,
        dead_after: float,
        publish: Publish,
        *,
        settle: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``dead_after``: seconds an unchanged mtime stays alive; ``settle``: seconds a read may
        disagree with the store (the mount's cache window)."""
        self.kind = kind
        self.directory = directory
        self._prefix = os.path.join(directory, "")  # hot paths join strings, not Paths
        self.dead_after = dead_after
        self.settle = settle
        self.lock = threading.RLock()
        self._publish = publish
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._leftovers: dict[str, Entry] = {}  # temp and hidden files, by name (raw stays empty)

    # -- reading the directory --------------------------------------------------------------------
    def refresh(
        self,
        name_prefix: str = "",
        *,
        publish: Publish | None = None,
        gate: Gate | None = None,
        quick: bool = False,
    ) -> None:
        """Scan the directory (names starting with ``name_prefix``) and publish what changed.

        ``publish`` replaces the view's subscriber for this scan. ``gate(name, version)`` (version
        None for a vanished file) may hold a content change back: it is then left for a later
        scan or notification. Heartbeat-only changes always apply.

        ``quick`` skips the ``stat`` of files whose inode is the cached one: atomic writers give
        new content a new inode, so only liveness (mtimes, judged by full scans) goes unread.
        """
        full = not name_prefix and not quick
        leftovers: dict[str, os.stat_result] | None = {} if full else None
        found = _scan(self.directory, name_prefix, self._unchanged_inode if quick else None, leftovers)
        with self.lock:
            if leftovers is not None:
                self._track_leftovers(leftovers)
            saved = self._publish
            self._publish = publish or saved
            try:
                for name, st in found.items():
                    if st is not None:
                        self._update(name, st, gate)
                for name in [n for n in self._entries if n.startswith(name_prefix) and n not in found]:
                    if gate is None or gate(name, None):
                        self._drop(name)
            finally:
                self._publish = saved

    def refresh_name(self, name: str) -> None:
        """Re-read one file (after a change notification) and publish what changed.

        The file is opened rather than stat-ed: a network mount may answer ``stat`` of a file
        another host deleted from its cache, but opening it asks the server.
        """
        if name.startswith("."):
            return
        with read_open(self._prefix + name) as opened, self.lock:
            if opened is None:
                self._drop(name)
            else:
                st, read = opened
                self._update(name, st, read=read)

    def _update(
        self, name: str, st: os.stat_result, gate: Gate | None = None, read: Callable[[], bytes | None] | None = None
    ) -> None:
        entry = self._entries.get(name)
        version = (st.st_ino, st.st_size, st.st_mtime_ns)
        if entry is not None and entry.version == version:
            return
        now = self._clock()
        seen_at = entry.seen_at if entry is not None and entry.mtime_ns == st.st_mtime_ns else now
        raw = read() if read is not None else read_record(self._prefix + name)
        if raw is None:  # vanished between stat and read
            self._drop(name)
            return
        if entry is not None and raw == entry.raw:
            entry.ino, entry.size, entry.mtime_ns, entry.seen_at = *version, seen_at
            return
        if gate is not None and not gate(name, version):
            return
        old = entry.valid if entry is not None else None
        new_entry = Entry(*version, seen_at, raw, old, read_at=now)
        self._entries[name] = new_entry
        try:
            instance = instance_from_json(raw)
            if instance.kind is not self.kind:
                raise ValidationError(f"a {instance.kind.value} record does not belong in {self.kind.bucket}")
        except ValidationError as exc:
            new_entry.problem = str(exc)  # reported by warn_pending(), once it has settled
            return
        valid, event, change = apply(old, instance)
        new_entry.valid = valid
        if change is Change.REJECTED:
            log.warning("ignoring a change of model card %s that alters more than its taints", name)
        if event is not None:
            self._publish(event, valid)

    def warn_pending(self) -> None:
        """Warn once about each unreadable content that has stood for the settle time.

        Rescans call this. A notification may arrive while a non-atomic writer is mid-write, and
        within a network mount's cache window a replaced file may be read cut to its cached size,
        so content is judged only once it has stood that long.
        """
        now = self._clock()
        with self.lock:
            for name, entry in self._entries.items():
                if entry.problem is not None and not entry.warned and now - entry.read_at >= self.settle:
                    entry.warned = True
                    log.warning("skipping unreadable record %s in %s: %s", name, self.directory, entry.problem)

    def _drop(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None and entry.valid is not None:
            self._publish(Removed(entry.valid.id()), None)

    def _unchanged_inode(self, name: str, inode: int) -> bool:
        entry = self._entries.get(name)
        return entry is not None and entry.ino == inode

    # -- state --------------------------------------------------------------------------------------
    def valid(self, name_prefix: str = "", *, skip: frozenset[str] = frozenset()) -> list[DiscoveryInstance]:
        """Live valid records (dead ones excluded) whose names start with ``name_prefix``."""
        alive_since = self._clock() - self.dead_after
        with self.lock:
            return [
                e.valid
                for n, e in self._entries.items()
                if e.valid is not None and n.startswith(name_prefix) and (n in skip or e.seen_at >= alive_since)
            ]

    def dead(self, owned: frozenset[str]) -> list[tuple[str, Entry]]:
        """Records whose mtime has not moved for ``dead_after`` on this reader's clock (owned ones
        excluded), then leftover files (see ``LEFTOVER_PREFIXES``) as still as that."""
        now = self._clock()
        with self.lock:
            records = [(n, e) for n, e in self._entries.items() if n not in owned and now - e.seen_at > self.dead_after]
            return records + [(n, e) for n, e in self._leftovers.items() if now - e.seen_at > self.dead_after]

    def forget_leftover(self, name: str) -> None:
        with self.lock:
            self._leftovers.pop(name, None)

    def _track_leftovers(self, found: dict[str, os.stat_result]) -> None:
        now = self._clock()
        tracked = {}
        for name, st in found.items():
            entry = self._leftovers.get(name)
            if entry is None or (entry.ino, entry.mtime_ns) != (st.st_ino, st.st_mtime_ns):
                entry = Entry(st.st_ino, st.st_size, st.st_mtime_ns, now, b"", None)
            tracked[name] = entry
        self._leftovers = tracked

    def __len__(self) -> int:
        with self.lock:
            return len(self._entries)


def _scan(
    directory: Path,
    name_prefix: str,
    unchanged: Callable[[str, int], bool] | None = None,
    leftovers: dict[str, os.stat_result] | None = None,
) -> dict[str, os.stat_result | None]:
    """Regular files of ``directory`` (dot files excluded) with their stat; None for the files
    ``unchanged(name, inode)`` vouches for, which are not stat'ed. Leftover dot files go into
    ``leftovers`` when it is given."""
    found: dict[str, os.stat_result | None] = {}
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    if leftovers is not None and name.startswith(LEFTOVER_PREFIXES):
                        with contextlib.suppress(FileNotFoundError):
                            leftovers[name] = entry.stat(follow_symlinks=False)
                    continue
                if not name.startswith(name_prefix):
                    continue
                if unchanged is not None and unchanged(name, entry.inode()):
                    found[name] = None
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found[name] = st
    except FileNotFoundError:
        pass  # the bucket directory was removed: everything in it is gone
    return found
