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
from pathlib import Path
from typing import Any

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import DiscoveryError
from discovery_sync.periodic import PeriodicThread

from .directory import StoreDirectory
from .failover import kernel_id
from .owner_lock import OwnerLock, OwnerProbe, OwnerState, owner_id_of, probe_owner_file, remove_released
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
        probes = {owner: probe_owner_file(self._lock_dir, owner) for owner in owners}
        states = {owner: probe.state for owner, probe in probes.items()}
        self.states = states
        died = [view.judge_owners(probes, probed_at) for view in self._views]
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


class KernelRule:
    """One client's side of the kernel's rule: its own owner lock (held while it writes) and the
    :class:`OwnerWatch` of the records it sees. :meth:`for_store` makes one where the rule applies."""

    def __init__(self, lock: OwnerLock, watch: OwnerWatch) -> None:
        self.lock, self.watch = lock, watch

    @classmethod
    def for_store(
        cls,
        lock_mode: str,
        lock_dir: StoreDirectory,
        instance_id: int,
        views: Iterable[BucketView],
        *,
        cohort: bool,
        interval: float,
        sweep: Callable[[], None],
        cleans: bool,
        on_crash: Callable[[BaseException], None],
        clock: Clock = SYSTEM,
    ) -> KernelRule | None:
        """The rule for a client of a store with ``lock_mode`` locks (None: the mtime rule alone,
        since clients of a ``soft`` store may be on other hosts); ``cohort``: ``instance_id`` is a
        cohort's logical id; the rest as :class:`OwnerWatch` takes it."""
        if lock_mode != "hard" or kernel_id() is None:
            return None
        watch = OwnerWatch(
            lock_dir, views, interval=interval, sweep=sweep, cleans=cleans, on_crash=on_crash, clock=clock
        )
        return cls(OwnerLock(lock_dir, instance_id, cohort=cohort), watch)

    def start(self, *, hold: bool) -> None:
        """Start probing; ``hold``: hold this client's owner lock first."""
        if hold:
            self.hold()
        self.watch.thread.start()

    def hold(self) -> None:
        """Hold this client's owner lock (idempotent); a store that refuses leaves this client's
        records to the mtime rule (said in a warning)."""
        if self.lock.held:
            return
        try:
            self.lock.acquire()
        except (OSError, DiscoveryError) as exc:
            log.warning(
                "cannot hold the owner lock of %016x in %s (readers judge this client's records by their "
                "mtimes instead): %s", self.lock.instance_id, self.lock.lock_dir.path, exc,
            )  # fmt: skip

    def probe(self, instance_id: int) -> OwnerProbe:
        return probe_owner_file(self.lock.lock_dir, instance_id)

    def notifications(self) -> tuple[Path, Callable[[str], None]]:
        """The directory whose files' closes tell of an owner's death, and whom to tell."""
        return self.lock.lock_dir.path, self.watch.notified

    def rules(self) -> dict[str, str]:
        """:meth:`OwnerWatch.rules`, this client's own lock included."""
        owners = self.watch.rules()
        if self.lock.held:
            owners[f"{self.lock.instance_id:016x}"] = "kernel: held (this client)"
        return owners

    def stop(self) -> None:
        """Release the owner lock (the records are gone: readers sweep what is left) and stop probing."""
        self.lock.release()
        self.watch.thread.stop()


def liveness_rules(
    rule: KernelRule | None, lock_mode: str, *, rescan: Callable[[], None] | None = None
) -> dict[str, Any]:
    """What ``status()`` and ``doctor`` say of liveness: the rule, and which one judges each owner
    (``rescan``: for ``doctor``, read the store and probe every owner first)."""
    if rule is not None and rescan is not None:
        rescan()
        rule.watch.check()
    if rule is None:
        why = "soft locks: clients may be on other hosts" if lock_mode == "soft" else "no kernel id"
        return {"rule": f"mtime ({why})", "owners": {}}
    return {"rule": "kernel where an owner holds its lock, else mtime", "owners": rule.rules()}


def _rule(state: OwnerState) -> str:
    if state is OwnerState.UNKNOWN:
        return "mtime"
    return "mtime (a cohort's vacant id)" if state is OwnerState.VACANT else f"kernel: {state}"
