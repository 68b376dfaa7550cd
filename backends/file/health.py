"""How a file-store client's parts are doing, as ``status()`` and ``metrics()`` report it."""

from __future__ import annotations

from typing import Any

from discovery_sync.metrics import BackendFigures
from discovery_sync.periodic import PeriodicThread

from .rescan import Rescans
from .watcher import StoreWatcher


def thread_health(heartbeat: PeriodicThread | None, rescans: Rescans) -> dict[str, Any]:
    """The heartbeat's (None for a read-only client, which has none) and the rescans' health;
    ``connected`` is False while the last heartbeat or rescan failed (each retries every interval)."""
    beat = None if heartbeat is None else heartbeat.health()
    rescan = rescans.thread.health()
    return {
        "heartbeat": beat,
        "rescan": rescan,
        "connected": not (beat and beat["failures"]) and not rescan["failures"],
    }


def figures(heartbeat: PeriodicThread | None, rescans: Rescans, watcher: StoreWatcher) -> BackendFigures:
    """Heartbeats (none for a read-only client), rescans by scan, records swept, the crashes of
    both threads and the observer's restarts (:mod:`discovery_sync.metrics`)."""
    threads = [rescans.thread] if heartbeat is None else [heartbeat, rescans.thread]
    return BackendFigures(
        heartbeat=None if heartbeat is None else heartbeat.durations,
        rescans=rescans.durations,
        swept=rescans.swept,
        threads=threads,
        restarts=watcher.restarts,
    )
