"""The intervals and deadlines of one file-store client, all derived from its options.

``dead_after`` (a record is dead after its mtime stood still this long on the reader's clock) is
the TTL plus the mount's cache window: a heartbeat may reach this host's view that late. Rescans
run every ``rescan_interval``; with inotify most of them compare only the directory listing, and
full scans (a ``stat`` of every file: liveness) run every ``full_scan_interval``, half of
``dead_after``, which is as often as liveness needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .liveness import Patience, heartbeat_interval


@dataclass(frozen=True, slots=True)
class Timing:
    ttl: float
    cache_window: float
    heartbeat_interval: float
    rescan_interval: float
    full_scan_interval: float
    dead_after: float
    longest_dead_after: float  # dead_after plus the slack of the slowest writer's heartbeat


def timing(
    ttl: float, rescan_interval: float | None, cache_window: float, *, polling: bool, patience: Patience | None
) -> Timing:
    """The timing of a client with this TTL, rescan interval (None: the default, min(2, ttl/3)),
    cache window, observer (``polling`` or not) and patience for slower writers (None: none)."""
    rescan_every = rescan_interval or min(2.0, ttl / 3)
    dead_after = ttl + cache_window
    return Timing(
        ttl=ttl,
        cache_window=cache_window,
        heartbeat_interval=heartbeat_interval(ttl),
        rescan_interval=rescan_every,
        full_scan_interval=rescan_every if polling else max(rescan_every, dead_after / 2),
        dead_after=dead_after,
        longest_dead_after=dead_after + (patience.slack(0) if patience is not None else 0.0),
    )
