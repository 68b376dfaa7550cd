"""The records a reader serves, kept per worker so that one change costs only what it touches.

The rule (the same for a full rebuild and for one change): this pod's own records always win;
otherwise a record comes from the first served worker by CR name that holds its id. A worker is
handed in only while it is served (ready, owned, unambiguous: :func:`~.liveness.is_served`).
"""

from __future__ import annotations

from collections.abc import Mapping

from discovery_sync.identity import DiscoveryInstanceId
from discovery_sync.model import DiscoveryInstance

from .liveness import WorkerEntry

#: a served record and the CR resourceVersion it first appeared at (None: not comparable)
Candidate = tuple[DiscoveryInstance, "int | None"]


class ServedSet:
    """Served workers and local records, indexed by record id; see the module docstring."""

    def __init__(self, exclude: str | None = None) -> None:
        self.exclude = exclude  # this pod's CR name: its records come from ``set_local`` instead
        self._workers: dict[str, WorkerEntry] = {}
        self._holders: dict[DiscoveryInstanceId, set[str]] = {}
        self._local: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._local_seen: dict[DiscoveryInstanceId, int | None] = {}

    def set_worker(self, name: str, entry: WorkerEntry | None) -> set[DiscoveryInstanceId]:
        """Serve ``entry`` as worker ``name`` (None: stop serving it); the ids whose record may have changed."""
        touched: set[DiscoveryInstanceId] = set()
        old = self._workers.pop(name, None)
        if old is not None:
            for key in old.records:
                holders = self._holders[key]
                holders.discard(name)
                if not holders:
                    del self._holders[key]
                touched.add(key)
        if entry is not None and name != self.exclude:
            self._workers[name] = entry
            for key in entry.records:
                self._holders.setdefault(key, set()).add(name)
                touched.add(key)
        return touched

    def set_local(
        self, records: Mapping[DiscoveryInstanceId, DiscoveryInstance], seen: Mapping[DiscoveryInstanceId, int | None]
    ) -> set[DiscoveryInstanceId]:
        """Replace this pod's own records; the ids whose record may have changed."""
        touched = set(self._local) | set(records)
        self._local, self._local_seen = dict(records), dict(seen)
        return touched

    def candidate(self, key: DiscoveryInstanceId) -> Candidate | None:
        """The record served under ``key`` and its first-seen version, or None when nobody serves it."""
        if key in self._local:
            return self._local[key], self._local_seen.get(key)
        holders = self._holders.get(key)
        if not holders:
            return None
        entry = self._workers[min(holders)]
        return entry.records[key], entry.first_seen.get(key)

    def clear_workers(self) -> set[DiscoveryInstanceId]:
        """Stop serving every worker (before a rebuild); the ids they held."""
        touched = set(self._holders)
        self._workers.clear()
        self._holders.clear()
        return touched
