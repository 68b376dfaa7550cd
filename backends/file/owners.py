"""The kernel's liveness rule, the reader's side: whose records these are, and whether they live.

On a store whose clients share one kernel (``lock=hard``), every writer holds its owner lock
for its whole life (:mod:`.owner_lock`). The ``discovery-sync-file-owners`` thread of a client
probes the locks of the owners of every record its views hold, and gives each record its
owner's state (:meth:`.view.BucketView.judge_owners`; :attr:`.view.Entry.due` decides):

- a **held** lock keeps its owner's records alive whatever their mtimes say;
- a **released** lock leaves them dead at once: they are swept now (deleted under the store lock
  by a client that deletes, so that reference readers, which judge by mtime, see the deletion),
  or reported Removed by one that does not; then the owner file itself is removed;
- no lock it can trust (no owner file: a reference writer, a writer of another host), or a
  failover cohort's lock that its member released (vacant: a standby takes the logical id over
  in place within the TTL, as on etcd), leaves them to the mtime rule (:mod:`.view`,
  :mod:`.liveness`).

When it probes: at once when the notifier reports that an owner file was closed after being
written (the kernel closes a dead process's files: inotify's ``IN_CLOSE_WRITE``), and every
``interval`` as a backstop: the polling observer reports no close (its poll interval), and a
notification can be lost or come before this client watched (the rescan interval).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import DiscoveryError
from discovery_sync.periodic import PeriodicThread

from .directory import StoreDirectory
from .owner_lock import OwnerState, owner_id_of, probe_owner, remove_released
from .view import BucketView

log = logging.getLogger("discovery_sync.backends.file")

THREAD_NAME = "discovery-sync-file-owners"


class OwnerWatch:
    """Probes the owner locks of the records of ``views`` (see the module docstring).

    ``sweep()``: sweep (or report) the dead records of every view now; ``cleans``: this client
    deletes, so it removes the files of owners whose records are all gone."""

    def __init__(
        self,
        lock_dir: StoreDirectory,
        views: Iterable[BucketView],
        *,
        interval: float,
        sweep: Callable[[], None],
        cleans: bool,
        on_crash: Callable[[BaseException], None],
        clock: Clock = SYSTEM,
    ) -> None:
        self._lock_dir = lock_dir
        self._views = list(views)
        self._sweep = sweep
        self._cleans = cleans
        self._clock = clock
        self.states: dict[int, OwnerState] = {}  # the last probe's, by instance id (status())
        self.thread = PeriodicThread(
            THREAD_NAME, interval, self.check, on_error=self._error, on_crash=on_crash, clock=clock
        )

    def notified(self, name: str) -> None:
        """A file of the lock directory was closed after being written: if an owner's, probe now."""
        if owner_id_of(name) is not None:
            self.thread.wake()

    def check(self) -> None:
        """Probe the owners of every record held, judge their records, sweep the dead ones."""
        if not self._lock_dir.is_open:
            try:  # a read-only client's store may have no lock directory yet
                self._lock_dir.open(create=False)
            except (OSError, DiscoveryError):
                return
        probed_at = self._clock.monotonic()
        owners = set().union(*(view.owner_ids() for view in self._views))
        states = {owner: probe_owner(self._lock_dir, owner) for owner in owners}
        self.states = states
        died = [view.judge_owners(states, probed_at) for view in self._views]
        if any(died):
            self._sweep()
        if self._cleans:
            self._remove_dead_owner_files(states)

    def _remove_dead_owner_files(self, states: dict[int, OwnerState]) -> None:
        """Remove the file of each released owner none of whose records is left."""
        released = {owner for owner, state in states.items() if state in (OwnerState.RELEASED, OwnerState.VACANT)}
        if not released:
            return
        left = set().union(*(view.owner_ids() for view in self._views))
        for owner in released - left:
            if remove_released(self._lock_dir, owner):
                log.info("removed the owner file of %016x: its process ended and its records are gone", owner)

    def rules(self) -> dict[str, str]:
        """Which rule judges each owner of a record this client holds, by instance id (hex):
        ``kernel: held``, ``kernel: released``, ``mtime (a cohort's vacant id)`` or ``mtime``."""
        return {f"{owner:016x}": _rule(state) for owner, state in sorted(self.states.items())}

    def _error(self, exc: BaseException) -> bool:
        """The thread's ``on_error``: a store error waits for the next round; True: it goes on."""
        if isinstance(exc, OSError | DiscoveryError):
            log.warning("probing the owners' locks failed (tried again in %.1f s): %s", self.thread.interval, exc)
        else:
            log.error("thread %s: probing the owners' locks failed unexpectedly", THREAD_NAME, exc_info=exc)
        return isinstance(exc, Exception)


def _rule(state: OwnerState) -> str:
    if state is OwnerState.UNKNOWN:
        return "mtime"
    return "mtime (a cohort's vacant id)" if state is OwnerState.VACANT else f"kernel: {state}"
