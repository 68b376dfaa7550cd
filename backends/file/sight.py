"""Whether a file-store client can judge liveness now, or must judge nobody dead.

A client whose own heartbeat fails or stalls (a frozen mount), or whose store is mounted
read-only here (no heartbeat through this mount can move a record), cannot tell a stale store
from an unreachable one: every view goes *blind* (judges nothing dead), unless files of the
store keep changing meanwhile (others write to it through another mount: the clock is fair).
Seeing again, each view gives every record a full TTL (docs/design.md §6). A read-only client
has no heartbeat to tell it: it judges by the clock and its scans.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from discovery_sync.clock import SYSTEM, Clock

from .mounts import read_only_filesystem
from .view import BucketView
from .wire import REFERENCE_TTL

log = logging.getLogger("discovery_sync.backends.file")


class Sight:
    """Judged once per rescan (:meth:`judge`). ``trouble(now)`` is the heartbeat's
    (:meth:`.liveness.Heartbeat.trouble`), None for a read-only client; ``shown_within``: seconds
    in which a write of another client shows in this client's views (a full scan and the cache
    window)."""

    def __init__(
        self,
        root: Path,
        views: Iterable[BucketView],
        trouble: Callable[[float], str | None] | None,
        shown_within: float,
        clock: Clock = SYSTEM,
    ) -> None:
        self.root = root
        self._views = list(views)
        self._trouble = trouble
        self._shown_within = shown_within
        self._clock = clock
        self._trouble_since: float | None = None  # when judge() first found a reason to be blind

    def judge(self) -> None:
        """Make every view blind, or seeing again, as the module docstring says."""
        now = self._clock.monotonic()
        reason = self._reason(now)
        for view in self._views:
            view.mtimes_needed = reason is not None
        others_write = False
        if reason is None:
            self._trouble_since = None
        elif self._trouble_since is None:
            self._trouble_since = now
        else:
            # a change seen after every write made before the trouble began has had a full scan
            # to show, and lately (a heartbeat comes every 3.33 s at most): others' heartbeats
            # reach the store (through another mount), the clock is fair
            shown_within = self._shown_within
            since = max(self._trouble_since + shown_within, now - shown_within - REFERENCE_TTL / 3)
            others_write = max(view.moved_at for view in self._views) > since
        if reason is not None and not others_write:
            self._go_blind(reason)
        elif any(view.blind is not None for view in self._views):
            self._see_again(reason, others_write)

    def _reason(self, now: float) -> str | None:
        if self._trouble is None:
            return None
        reason = self._trouble(now)
        if reason is None and read_only_filesystem(self.root):
            reason = "the store's filesystem is mounted read-only here"
        return reason

    def _go_blind(self, reason: str) -> None:
        if not any(view.blind is not None for view in self._views):
            log.warning("the file store at %s: %s; no record is judged dead meanwhile", self.root, reason)
        for view in self._views:
            view.pause_judging(reason)

    def _see_again(self, reason: str | None, others_write: bool) -> None:
        if others_write:
            log.warning("the file store at %s: %s, but others write to it; liveness is judged again", self.root, reason)
        else:
            log.warning("the file store at %s: liveness is judged again, after a full TTL", self.root)
        for view in self._views:
            view.resume_judging(restart=not others_write)
