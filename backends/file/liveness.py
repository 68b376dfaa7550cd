"""Liveness of the file backend: the heartbeat that touches this client's record files.

Readers judge a record dead when its mtime has not moved for ``dead_after`` seconds of their own
clock (:mod:`.view`), and sweep it then (:mod:`.sweep`). So every interval this client touches
each file it owns; a file that is gone (swept while the client stalled, or removed by hand) is
written back. A file it may not touch is someone else's under our name: the rescan, which writes
back replaced records, is woken instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.threads import log_retry

from .directory import StoreDirectory
from .layout import StoreLayout
from .wire import touch_record

log = logging.getLogger("discovery_sync.backends.file")


class Heartbeat:
    """The job of the backend's ``discovery-sync-file-heartbeat`` thread: :meth:`beat`, and :meth:`error`.

    :param owned: this client's records now (a copy, taken without waiting for the API lock).
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
        write_back: Callable[[DiscoveryInstance], bool],
        refused: Callable[[], None],
    ) -> None:
        self.layout = layout
        self.buckets = buckets
        self.interval = interval
        self._owned = owned
        self._write_back = write_back
        self._refused = refused

    def beat(self) -> None:
        """Touch every file of this client; write back the ones that are gone."""
        for instance_id, instance in self._owned().items():
            name = self.layout.file_name(instance_id)
            try:
                with self.buckets[instance_id.kind].use() as dir_fd:
                    if touch_record(dir_fd, name):
                        continue
            except PermissionError:  # someone else's file under our name: the rescan writes ours back
                self._refused()
                continue
            if self._write_back(instance):
                log.warning(
                    "record %s was removed from the store while this client is alive; wrote it again",
                    self.layout.path_of(instance_id),
                )

    def error(self, exc: BaseException) -> bool:
        """Log a failed beat; retried every interval (a record outlives a few: ttl = 3 intervals at least)."""
        log_retry(f"the heartbeat of the file store at {self.layout.root}", exc, self.interval)
        return isinstance(exc, Exception)
