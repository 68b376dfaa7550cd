"""Liveness of the file backend: the heartbeat that touches this client's record files.

Readers judge a record dead when its mtime has not moved for ``dead_after`` seconds of their own
clock (:mod:`.view`), and sweep it then (:mod:`.sweep`). So every interval this client touches
each file it owns; a file that is gone (swept while the client stalled, or removed by hand) is
written back. A file it may not touch is someone else's under our name: the rescan, which writes
back replaced records, is woken instead.

A touch is one ``utimensat`` of the name relative to the bucket's descriptor, symlinks not
followed: no file is opened. The names are encoded once per record (:class:`OwnedNames`) and the
bucket's descriptor is taken once per beat, so a beat costs little more than its system calls.
:attr:`Heartbeat.beaten_at` tells the rescans when the last completed beat began: a shallow scan
need not stat this client's own files to know they are alive (:class:`.view.Touched`).
Descriptors kept open per record (``futimens``) were rejected: 10,000 records would need 10,000
descriptors (the default limit is 1,024), and a descriptor of a file another writer replaced or
removed would keep touching the old inode, hiding that the name is no longer ours.

Clients with different TTLs share a store (docs/design.md §6, "Mixed TTLs"): every writer beats
every ``min(TTL, 10 s)/3``, and a reader waits for a record at least as long as its writer's
heartbeat asks (:class:`Patience`). A client whose own heartbeat fails or stalls cannot tell a
stale store from an unreachable one (:meth:`Heartbeat.trouble`): it judges nobody meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.threads import log_retry

from .directory import StoreDirectory
from .layout import StoreLayout
from .wire import REFERENCE_TTL, touch_record, touch_written

log = logging.getLogger("discovery_sync.backends.file")

#: a beat that has not ended after this many seconds (and heartbeat intervals) is stalled by the store
BEAT_STALL_AFTER = 2.0


def heartbeat_interval(ttl: float) -> float:
    """How often a client with this TTL touches its files: a third of its TTL, and never less
    often than a reference worker (TTL 10 s) needs, whatever the TTL."""
    return max(min(ttl, REFERENCE_TTL) / 3, 0.25)


class Patience:
    """How much longer than its own TTL a reader waits for a record whose writer beats slower.

    A writer's TTL shows in the step between two of its mtimes (its heartbeat, a third of
    ``min(TTL, 10 s)``; a reference worker's is 3.33 s), so a record whose step is ``s`` may
    stand still ``3 s`` (at most 10 s) before anyone may call it dead. Until a reader has seen
    one step it assumes the slowest heartbeat there is (10 s). A reader whose TTL is 10 s or more
    waits longer than any heartbeat asks, and needs no slack (it gets no Patience).
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl

    @staticmethod
    def needed(ttl: float) -> bool:
        return ttl < REFERENCE_TTL

    def slack(self, step_ns: int) -> float:
        """Seconds beyond the reader's TTL for a record whose mtime steps by ``step_ns`` (0: unknown)."""
        asked = REFERENCE_TTL if step_ns <= 0 else min(REFERENCE_TTL, 3 * step_ns / 1e9)
        return max(0.0, asked - self.ttl)


class OwnedNames:
    """File names of this client's records, encoded once (thread-safe under the GIL: a lookup
    that races a prune encodes the name again)."""

    def __init__(self, layout: StoreLayout) -> None:
        self.layout = layout
        self._names: dict[DiscoveryInstanceId, str] = {}

    def __call__(self, instance_id: DiscoveryInstanceId) -> str:
        name = self._names.get(instance_id)
        if name is None:
            name = self._names[instance_id] = self.layout.file_name(instance_id)
        return name

    def prune(self, owned: Mapping[DiscoveryInstanceId, object]) -> None:
        """Forget the names of records no longer owned (once they outnumber the owned ones). API
        calls add names meanwhile: the items are copied first (one step under the GIL), and a
        name added after the copy is encoded again when next asked for."""
        names = self._names
        if len(names) > 2 * len(owned) + 16:
            self._names = {i: n for i, n in list(names.items()) if i in owned}


class Fencing:
    """What the heartbeat of a failover-cohort member needs: ``current()`` says whether the member
    still is its cohort's current writer (reading its claim; False fences it), ``written`` maps
    each of its records to the inode it wrote."""

    def __init__(self, current: Callable[[], bool], written: Mapping[DiscoveryInstanceId, int]) -> None:
        self.current = current
        self.written = written


class Heartbeat:
    """The job of the backend's ``discovery-sync-file-heartbeat`` thread: :meth:`beat`, and :meth:`error`.

    :param owned: this client's records now (a copy, taken without waiting for the API lock).
    :param files: the file names of such records, by bucket: id -> name (:meth:`.own.OwnFiles.by_kind`).
    :param write_back: writes a record again if this client still owns it; True when it did.
    :param refused: called when one of the files may not be touched (or, for a cohort member,
        another file holds its name).
    :param fenced: for a failover-cohort member (docs/design.md §4.1): a beat first asks whether
        the member still is its cohort's current writer (and touches nothing when it is not), and
        touches only the files it wrote (:func:`.wire.touch_written`).
    :param starting: called as each beat begins (:attr:`beating_since` set), before it touches
        anything: the client's link thread times it (:mod:`.link`).
    :param ended: called after each beat, the failed ones too (once :meth:`error` noted why).
    """

    def __init__(
        self,
        layout: StoreLayout,
        buckets: Mapping[RecordKind, StoreDirectory],
        interval: float,
        *,
        owned: Callable[[], Mapping[DiscoveryInstanceId, DiscoveryInstance]],
        files: Callable[
            [Mapping[DiscoveryInstanceId, DiscoveryInstance]], Mapping[RecordKind, Mapping[DiscoveryInstanceId, str]]
        ],
        write_back: Callable[[DiscoveryInstance], bool],
        refused: Callable[[], None],
        fenced: Fencing | None = None,
        starting: Callable[[], None] | None = None,
        ended: Callable[[], None] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.layout = layout
        self._clock = clock
        self.buckets = buckets
        self.interval = interval
        self._owned = owned
        self._files = files
        self._write_back = write_back
        self._refused = refused
        self._fencing = fenced
        self._starting, self._ended = starting, ended
        #: a beat under way longer than this was stalled by the store
        self.stall_after = max(BEAT_STALL_AFTER, interval)
        # monotonic time when the last beat that touched every file it could began (None: none yet)
        self.beaten_at: float | None = None
        self._beating_since: float | None = None  # the beat under way
        self._failure: str | None = None  # why the last beat failed (None: it did not)

    def trouble(self, now: float) -> str | None:
        """Why this client's heartbeat cannot keep its records alive now: the last beat failed, or
        the one under way is stalled (None: it beats). Such a client cannot tell a stale store
        from one it cannot reach."""
        if self._failure is not None:
            return f"this client's heartbeat fails ({self._failure})"
        since = self._beating_since
        if since is not None and now - since > self.stall_after:
            return f"this client's heartbeat has been stalled by the store for {now - since:.1f} s"
        return None

    @property
    def beating_since(self) -> float | None:
        """When the beat under way began (None: none is)."""
        return self._beating_since

    def beat(self) -> None:
        """Touch every file of this client; write back the ones that are gone."""
        began = self._beating_since = self._clock.monotonic()
        try:
            if self._starting is not None:
                self._starting()
            self._beat(began)
        finally:
            self._beating_since = None
        if self._ended is not None:
            self._ended()

    def _beat(self, began: float) -> None:
        fencing = self._fencing
        if fencing is not None and not fencing.current():
            self.beaten_at = began  # nothing of this client's to keep alive: a successor replaced it
            self._failure = None
            return
        owned = self._owned()
        gone: list[DiscoveryInstanceId] = []
        for kind, files in self._files(owned).items():
            with self.buckets[kind].use() as dir_fd:
                gone += _touch(dir_fd, files, self._refused, None if fencing is None else fencing.written)
        for instance in [owned[i] for i in gone]:
            if self._write_back(instance):
                log.warning(
                    "record %s was removed from the store while this client is alive; wrote it again",
                    self.layout.path_of(instance.id()),
                )
        self.beaten_at = began
        self._failure = None

    def error(self, exc: BaseException) -> bool:
        """Log a failed beat; retried every interval (a record outlives a few: ttl = 3 intervals at least)."""
        self._failure = f"{exc.strerror or exc}" if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        log_retry(f"the heartbeat of the file store at {self.layout.root}", exc, self.interval)
        if self._ended is not None:
            self._ended()
        return isinstance(exc, Exception)


def _touch(
    dir_fd: int,
    files: Mapping[DiscoveryInstanceId, str],
    refused: Callable[[], None],
    written: Mapping[DiscoveryInstanceId, int] | None,
) -> list[DiscoveryInstanceId]:
    """Touch each file (``files``: id -> name; :func:`.wire.touch_record`, looked up here on every
    call so that tests can replace it; with ``written``, only the file of the inode this client
    wrote); the records whose file is gone."""
    gone = []
    for instance_id, name in files.items():
        try:
            if written is None:
                touched: bool | None = touch_record(dir_fd, name)
            else:
                inode = written.get(instance_id)
                touched = None if inode is None else touch_written(dir_fd, name, inode)
            if touched is None:  # another file holds the name: the rescan judges it under the store lock
                refused()
            elif not touched:
                gone.append(instance_id)
        except PermissionError:  # someone else's file under our name: the rescan writes ours back
            refused()
    return gone
