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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.threads import log_retry

from .directory import StoreDirectory
from .layout import StoreLayout
from .wire import touch_record

log = logging.getLogger("discovery_sync.backends.file")


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
        """Forget the names of records no longer owned (once they outnumber the owned ones)."""
        if len(self._names) > 2 * len(owned) + 16:
            self._names = {i: n for i, n in self._names.items() if i in owned}


class Heartbeat:
    """The job of the backend's ``discovery-sync-file-heartbeat`` thread: :meth:`beat`, and :meth:`error`.

    :param owned: this client's records now (a copy, taken without waiting for the API lock).
    :param names: the file name of a record of this client.
    :param write_back: writes a record again if this client still owns it; True when it did.
    :param refused: called when one of the files may not be touched.
    """

    def __init__(
        self,
        layout: StoreLayout,
        buckets: Mapping[RecordKind, StoreDirectory],
        interval: float,
        *,
        owned: Callable[[], Mapping[DiscoveryInstanceId, DiscoveryInstance]],
        names: OwnedNames,
        write_back: Callable[[DiscoveryInstance], bool],
        refused: Callable[[], None],
    ) -> None:
        self.layout = layout
        self.buckets = buckets
        self.interval = interval
        self._owned = owned
        self._names = names
        self._write_back = write_back
        self._refused = refused
        # monotonic time when the last beat that touched every file it could began (None: none yet)
        self.beaten_at: float | None = None

    def beat(self) -> None:
        """Touch every file of this client; write back the ones that are gone."""
        began = time.monotonic()
        owned = self._owned()
        self._names.prune(owned)
        by_kind: dict[RecordKind, list[tuple[str, DiscoveryInstance]]] = {}
        for instance_id, instance in owned.items():
            by_kind.setdefault(instance_id.kind, []).append((self._names(instance_id), instance))
        gone: list[DiscoveryInstance] = []
        for kind, files in by_kind.items():
            with self.buckets[kind].use() as dir_fd:
                gone += _touch(dir_fd, files, self._refused)
        for instance in gone:
            if self._write_back(instance):
                log.warning(
                    "record %s was removed from the store while this client is alive; wrote it again",
                    self.layout.path_of(instance.id()),
                )
        self.beaten_at = began

    def error(self, exc: BaseException) -> bool:
        """Log a failed beat; retried every interval (a record outlives a few: ttl = 3 intervals at least)."""
        log_retry(f"the heartbeat of the file store at {self.layout.root}", exc, self.interval)
        return isinstance(exc, Exception)


def _touch(
    dir_fd: int, files: list[tuple[str, DiscoveryInstance]], refused: Callable[[], None]
) -> list[DiscoveryInstance]:
    """Touch each file (:func:`.wire.touch_record`, looked up here on every call so that tests
    can replace it); the records whose file is gone."""
    gone = []
    for name, instance in files:
        try:
            if not touch_record(dir_fd, name):
                gone.append(instance)
        except PermissionError:  # someone else's file under our name: the rescan writes ours back
            refused()
    return gone
