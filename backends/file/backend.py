"""The file-system backend: one directory tree shared by every client on a host (or an NFS mount).

Threads of a client, all named and daemonic, all stopped by ``shutdown()``:

* ``discovery-sync-file-heartbeat``: touches this client's files so readers see them alive,
  and writes back any that were swept while the client stalled (:mod:`.liveness`); not started
  by a read-only client, which owns nothing;
* ``discovery-sync-file-rescan``: rescans every bucket, reconciles watches (missed changes,
  then ``Resync``), warns about files it skips, deletes dead records and writes back this
  client's records when another writer replaced them (:mod:`.rescan`; a read-only client
  deletes and writes nothing: it reports dead records Removed and leaves them, and follows
  buckets that appear);
* the watchdog observer (started with the first watch): re-reads files as they change;
* ``discovery-sync-file-link``: tells when the heartbeat has stalled or stopped keeping the
  records alive, from in-memory timestamps alone (:mod:`.link`); not started by a read-only
  client, whose rescans tell its connection state.

Every change a scan or a notification finds reaches the watches through one path: the view
applies it and returns it, and the caller publishes it holding the view's ``publishing`` lock.
Time (TTLs, schedules, graces) comes from the client's ``clock`` (:mod:`discovery_sync.clock`).

A read-only client (``read_only=True``) never changes the store: it creates no directory, writes,
touches, locks or deletes no file. A store (or a bucket) that does not exist is empty to it, and
its watches see the buckets writers create later.

The store is shared with whoever can write to it, so nothing in it is trusted: directories are
never followed through symlinks (:mod:`.directory`), only records are deleted (:mod:`.sweep`),
files are judged by name and type before they are read (:mod:`.names`, :mod:`.view`), and who
else can change the store is checked on connect (:mod:`.permissions`).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from discovery_sync.broadcast import FeedSet
from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.discovery import CollectedGarbage, Discovery
from discovery_sync.errors import BackendUnavailable, DiscoveryError
from discovery_sync.failover import FailoverLock, check_stale_after
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.logical_id import member_instance_id
from discovery_sync.metrics import BackendFigures
from discovery_sync.model import DiscoveryInstance
from discovery_sync.periodic import PeriodicThread
from discovery_sync.queries import Query
from discovery_sync.watch import WatchFeed

from .card_change import CardChanges
from .cohort import CohortFence, OutsideCohorts
from .doctor import diagnose_store
from .failover import FileFailoverLock
from .garbage import GarbageCollector, Removals
from .health import figures, thread_health
from .layout import StoreDirectories, StoreLayout
from .link import Link, lose_after
from .liveness import Fencing, Heartbeat, OwnedNames, Patience
from .locks import StoreLocks
from .missed import notice_grace
from .mounts import choose_modes, mount_of, store_cache_window
from .options import DEFAULT_TTL, OPTIONS, store_path
from .own import OwnFiles
from .owners import KernelRule, liveness_rules
from .rescan import Owned, Rescans, RescanSchedule
from .sight import Sight
from .softlock import DEFAULT_STALE_AFTER
from .sweep import Sweeper
from .timing import timing
from .view import DEEP, BucketView, bucket_views
from .watcher import DirectoryNotifier, StoreWatcher
from .wire import DEFAULT_MAX_RECORD_BYTES, refresh_listing

log = logging.getLogger("discovery_sync.backends.file")

T = TypeVar("T")


class FileDiscovery(Discovery):
    """Discovery on a directory tree laid out like the reference runtime's FileStore.

    :param root: the store directory (created if missing, mode 0755, unless ``read_only``; see
        docs/decisions.md).
    :param ttl: seconds a record survives without a heartbeat (as judged by each reader).
    :param observer: ``inotify`` (one host) or ``polling`` (network filesystems); default: polling
        on a network filesystem (nfs, cifs, fuse.sshfs, …, from /proc/self/mountinfo), else inotify.
    :param lock: ``hard`` (flock) or ``soft`` (O_EXCL marker files, for network filesystems);
        default: soft on a network filesystem, else hard.
    :param rescan_interval: seconds between rescans (default: min(2, ttl/3)). With the polling
        observer each is a full scan; with inotify full scans (a ``stat`` of every file: liveness)
        run every ``full_scan_interval`` = max(rescan_interval, dead_after/2), and the rescans in
        between compare only the directory listing, while a watch runs (:mod:`.rescan`).
    :param poll_interval: seconds between directory polls of the polling observer.
    :param lock_timeout: seconds to wait for a store lock before LockTimeout (default 10 s for hard
        locks, 3 x ``lock_stale`` for soft ones, so a waiter outlives a dead holder's marker).
    :param lock_stale: seconds an unchanged soft-lock marker is respected before it is broken.
    :param cache_window: seconds this host may see other hosts' changes late (attribute and
        listing caches of a network mount); default: read from the mount's options. A record is
        judged dead after ``ttl + cache_window`` seconds without a visible heartbeat.
    :param max_record_bytes: files larger than this are never read (default 4 MiB); registering
        a larger record is refused.
    :param permissions: ``warn`` (default) logs, and ``refuse`` raises BackendUnavailable, when
        another local user can change the store (a directory owned by another user, or group- or
        world-writable without the sticky bit).
    :param instance_id: this client's instance id (default: a random u64).
    :param logical_instance_id: the failover cohort's shared id (1..2**64-1) when this client is
        a cohort member: its instance id (``instance_id``, if given, must be the same).
    :param uniform_ttl: every writer of this store uses this client's TTL or a shorter one (a test
        rig, a deployment with one TTL): judge every record by this TTL alone. By default a client
        whose TTL is under 10 s waits for a record as long as its writer's heartbeat asks (up to
        10 s, and 10 s until it has seen the record's mtime move once): see docs/design.md §6.
    :param read_only: never change the store: every write raises ValidationError; nothing is
        created, locked, written, touched or deleted (a missing store lists as empty); dead records
        are reported Removed but stay on disk; a cached mount shows other hosts' writes up to
        ``cache_window`` late (see the module docstring).
    :param clock: where TTLs, schedules, graces and lock timeouts take their time from (default:
        the real clock; tests pass a :class:`discovery_sync.testing.ManualClock`).
    """

    backend_name = "file"

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        ttl: float = DEFAULT_TTL,
        observer: str | None = None,
        lock: str | None = None,
        rescan_interval: float | None = None,
        poll_interval: float = 0.5,
        lock_timeout: float | None = None,
        lock_stale: float = DEFAULT_STALE_AFTER,
        cache_window: float | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        permissions: str = "warn",
        instance_id: int | None = None,
        read_only: bool = False,
        uniform_ttl: bool = False,
        logical_instance_id: int | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        given = {
            "ttl": ttl, "observer": observer, "lock": lock, "rescan_interval": rescan_interval,
            "poll_interval": poll_interval, "lock_timeout": lock_timeout, "lock_stale": lock_stale,
            "cache_window": cache_window, "max_record_bytes": max_record_bytes, "permissions": permissions,
            "instance_id": instance_id, "read_only": read_only, "uniform_ttl": uniform_ttl,
            "logical_instance_id": logical_instance_id, "clock": clock,
        }  # fmt: skip
        option = OPTIONS.parse(given)  # the same checks whether the values came from a URL or not
        member_id = member_instance_id(
            option["instance_id"], option["logical_instance_id"], read_only=option["read_only"], owner=OPTIONS.owner
        )
        super().__init__(read_only=option["read_only"], logical_instance_id=option["logical_instance_id"])
        self._clock: Clock = option["clock"]
        self.layout = StoreLayout(store_path(root))
        self.max_record_bytes = option["max_record_bytes"]
        self._instance_id = member_id if member_id is not None else secrets.randbits(64)
        self._configure(option)
        self._assemble(option)
        if not self.read_only:  # it owns nothing to keep alive
            self._heartbeat.start()
        self._link.start()
        self._rescans.thread.start()
        if self._kernel is not None:  # a cohort member holds its owner lock from its claim on
            self._kernel.start(hold=not self.read_only and self._cohort is None)

    def _configure(self, option: dict[str, Any]) -> None:
        """The modes (observer, lock), timing, directories and bucket views of this client."""
        mount = mount_of(self.layout.root)
        observer, lock = choose_modes(self.layout.root, option["observer"], option["lock"], mount)
        ttl = option["ttl"]
        # a writer whose heartbeat is slower than this TTL asks for more (docs/design.md §6, "Mixed TTLs")
        self._patience = Patience(ttl) if Patience.needed(ttl) and not option["uniform_ttl"] else None
        cache_window = store_cache_window(mount, option["cache_window"])
        self.timing = t = timing(
            ttl, option["rescan_interval"], cache_window, polling=observer == "polling", patience=self._patience
        )
        self.ttl, self.cache_window, self.dead_after = t.ttl, t.cache_window, t.dead_after
        self.heartbeat_interval, self.rescan_interval = t.heartbeat_interval, t.rescan_interval
        self.full_scan_interval, self.longest_dead_after = t.full_scan_interval, t.longest_dead_after
        self._locks = StoreLocks.of_store(lock, option["lock_timeout"], option["lock_stale"], clock=self._clock)
        self._poll_interval = option["poll_interval"]
        self._notifier = DirectoryNotifier(observer, self._poll_interval)
        self._dirs = StoreDirectories(self.layout, read_only=self.read_only)
        self._dirs.open(option["permissions"])
        self._buckets, self._lock_dir = self._dirs.buckets, self._dirs.lock_dir
        outside = OutsideCohorts(self._lock_dir, self._instance_id, self._taken_by_cohort)
        self._outside = outside if self._cohort is None and not self.read_only else None
        self._feeds = FeedSet()
        self._views = bucket_views(
            self._buckets, self.dead_after, settle=self.cache_window, max_record_bytes=self.max_record_bytes,
            clock=self._clock, missing_is_empty=self.read_only, subscribed=lambda kind: bool(self._feeds.current(kind)),
            patience=self._patience,
        )  # fmt: skip

    def _assemble(self, option: dict[str, Any]) -> None:
        """The parts: views, own files, threads (not started)."""
        clock, t = self._clock, self.timing
        self._own = OwnFiles(self._buckets, OwnedNames(self.layout), self.max_record_bytes)
        self._changes = CardChanges(self._own)  # a card changed under one id reaches reference frontends
        self._fence_check = (
            None if self._cohort is None else CohortFence(self._cohort, self._lock_dir, self._own, self._fence, clock)
        )
        self._stopping = threading.Event()
        removals = Removals()
        self._kernel = KernelRule.for_store(  # liveness from the kernel (docs/design.md §6)
            self._locks.mode, self._lock_dir, self._instance_id, self._views.values(), cohort=self._cohort is not None,
            interval=self._poll_interval if self._notifier.kind == "polling" else t.rescan_interval,
            sweep=lambda: self._rescans.sweep_dead(), cleans=not self.read_only, on_crash=self._thread_crashed,
            clock=clock,
        )  # fmt: skip
        sweeper = Sweeper(clock, probe=None if self._kernel is None else self._kernel.probe)
        self._liveness = Heartbeat(
            self.layout, self._buckets, t.heartbeat_interval, owned=self._owned_now, files=self._own.by_kind,
            write_back=self._write_back, refused=lambda: self._rescans.full_now(), clock=clock,
            fenced=None if self._fence_check is None else Fencing(self._fence_check.still_claimed, self._own.written),
            starting=lambda: self._link.timing_changed(), ended=lambda: self._link.judge(),
        )  # fmt: skip
        self._heartbeat = PeriodicThread(
            "discovery-sync-file-heartbeat", t.heartbeat_interval, self._liveness.beat,
            on_error=self._liveness.error, on_crash=self._thread_crashed, clock=clock,
        )  # fmt: skip
        self._link = Link(
            self._connection, self.layout.root, heartbeat=None if self.read_only else self._liveness,
            rescans=lambda: self._rescans, owned=self._owned_now, lose_after=lose_after(t.ttl), clock=clock,
        )  # fmt: skip
        self._watcher = StoreWatcher(
            self._notifier, self.layout.root, self._buckets, self._notified,
            lambda exc: self._rescans.notification_failed(exc), read_only=self.read_only,
            owners=None if self._kernel is None else self._kernel.notifications(),
        )  # fmt: skip
        trouble = None if self.read_only else self._liveness.trouble
        sight = Sight(self.layout.root, self._views.values(), trouble, t.full_scan_interval + t.cache_window, clock)
        self._rescans = Rescans(
            self.layout.root, self._views, self._feeds, timing=t,
            schedule=RescanSchedule(t, polling=self._notifier.kind == "polling", clock=clock),
            grace=notice_grace(self._notifier.kind, self._poll_interval), watcher=self._watcher, sight=sight,
            sweeper=sweeper, removals=removals, owned=lambda: self._own.by_kind(self._owned_now()),
            touched=lambda owned: self._own.touched(owned, self._liveness.beaten_at),
            restore=self._restore_replaced, read_only=self.read_only, on_crash=self._thread_crashed,
            report=self._link.scanned, progress=self._link.timing_changed, clock=clock,
        )  # fmt: skip
        self._collector = GarbageCollector(
            self._views, self._feeds, sweeper, removals, t, self._owned_names, self._stopping, clock
        )

    @property
    def instance_id(self) -> int:
        return self._instance_id

    @property
    def root(self) -> Path:
        return self.layout.root

    @property
    def observer_kind(self) -> str:
        return self._notifier.kind

    @property
    def lock_mode(self) -> str:
        return self._locks.mode

    # -- storage primitives ---------------------------------------------------------------------------
    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        instance, problem = self._dirs.read(instance_id, self.layout.file_name(instance_id), self.max_record_bytes)
        if problem is not None:
            log.warning("the stored record %s is unusable, treating it as absent: %s", instance_id.to_path(), problem)
        return instance

    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        instance_id = instance.id()
        if self._outside is not None:
            self._outside.check()
        self._changes.settle(instance)
        if self._own.write(instance, create_only=True):
            return None
        existing, problem = self._dirs.read(instance_id, self.layout.file_name(instance_id), self.max_record_bytes)
        if existing is None:
            path = self.layout.path_of(instance_id)
            raise DiscoveryError(
                f"{instance.kind.value} {instance_id.to_path()} cannot be registered: {path} exists but is not a "
                f"usable record ({problem or 'it vanished while it was read'}); remove it (or run 'discovery-sync gc' "
                "if its writer died)"
            )
        self._own.adopt(instance_id)
        return existing

    def _replace(self, instance: DiscoveryInstance) -> None:
        if self._fence_check is not None and not self._fence_check.still_current(instance.id()):  # under the store lock
            self._fence_check.cohort.check()
        self._own.write(instance, create_only=False)

    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        if self._fence_check is None:
            self._changes.unlink(instance_id, self._owned.get(instance_id))
            return
        with self._record_lock(instance_id):
            if not self._fence_check.still_current(instance_id):
                self._fence_check.cohort.check()  # a successor's now: InstanceReplaced, nothing removed
            self._changes.unlink(instance_id, self._owned.get(instance_id))

    def _list_ordered(self, query: Query) -> builtins.list[DiscoveryInstance]:
        """Every :meth:`list` reads the directory (a write finished before the call is in its
        result); files whose directory entry shows what the view knows are not read again, and
        when the bucket did not change the ordered result of the last call of the same query is
        reused (:meth:`BucketView.listed`)."""
        view, prefix = self._refreshed(query)
        return builtins.list(view.listed(prefix, query, skip=self._owned_names(query.kind)))

    def _list(self, query: Query) -> builtins.list[DiscoveryInstance]:
        view, prefix = self._refreshed(query)
        return view.valid(prefix, skip=self._owned_names(query.kind))

    def _refreshed(self, query: Query) -> tuple[BucketView, str]:
        """The view of ``query``'s bucket, after reading the directory (names under its prefix)."""
        view = self._views[query.kind]
        prefix = self.layout.name_prefix(query)
        try:
            # make this host's listing current: see other hosts' writes now (by writing: not read-only)
            if self.cache_window and not self.read_only:
                with contextlib.suppress(OSError), view.directory.use() as dir_fd:  # read-only: caches decide
                    refresh_listing(dir_fd)
            with view.publishing:  # a network mount's directory mtime says nothing of other hosts' writes
                if self._locks.mode == "soft" or not view.unchanged(prefix):
                    self._feeds.publish_all(view.scan_deep(prefix))
        except OSError as exc:
            raise BackendUnavailable(f"cannot read {view.directory.path}: {exc}") from exc
        view.warn_pending()  # a one-shot list() says what it skipped, as a rescan would
        return view, prefix

    @contextlib.contextmanager
    def _store_lock(self, kind: RecordKind, key: str) -> Iterator[None]:
        # the whole bucket, as reference workers lock it for every change they make
        with self._locks.hold(self._buckets[kind], self._lock_dir, self.layout.lock_name(kind.bucket)):
            yield

    def _record_lock(self, instance_id: DiscoveryInstanceId) -> contextlib.AbstractContextManager[None]:
        return self._store_lock(instance_id.kind, _key(instance_id))

    def _open_feed(self, feed: WatchFeed) -> None:
        self._watcher.ensure()
        view = self._views[feed.query.kind]
        prefix = self.layout.name_prefix(feed.query)
        with view.publishing:  # no change may be published between the snapshot and the subscription
            try:
                self._feeds.publish_all(view.scan_deep(prefix))
            except OSError as exc:
                raise BackendUnavailable(f"cannot read {view.directory.path}: {exc}") from exc
            feed.start(view.valid(prefix, skip=self._owned_names(feed.query.kind)))
            self._feeds.add(feed)
        if self._kernel is not None:  # whose records it saw first: probed now, not at the next round
            self._kernel.watch.thread.wake()

    def status(self) -> dict[str, Any]:
        """:meth:`Discovery.status`, with the store, the modes and the health of the threads
        (:func:`.health.thread_health`)."""
        return {
            **super().status(),
            "root": str(self.layout.root),
            "instance_id": self.instance_id,
            "observer": self._notifier.kind,
            "observer_alive": self._notifier.is_alive() if self._notifier.started else None,
            "lock": self._locks.mode,
            "liveness_paused": self._views[RecordKind.ENDPOINT].blind,
            "liveness": liveness_rules(self._kernel, self._locks.mode),
            **thread_health(None if self.read_only else self._heartbeat, self._rescans),
        }

    def _backend_metrics(self) -> BackendFigures:
        return figures(None if self.read_only else self._heartbeat, self._rescans, self._watcher)

    def _probe(self) -> None:
        self._dirs.probe()

    def _diagnose(self, report: dict[str, Any]) -> None:
        modes = (self._notifier.kind, self._locks.mode, self.ttl, self.cache_window, self._poll_interval)
        details = diagnose_store(self.layout, *modes, self.max_record_bytes, read_only=self.read_only)
        report["problems"].extend(details.pop("problems"))
        report.update(details)
        report["liveness"] = liveness_rules(self._kernel, self._locks.mode, rescan=self.rescan)

    def _collect_garbage(self, dry_run: bool, progress: Callable[[float, float], None] | None) -> CollectedGarbage:
        """See :mod:`.garbage`: dead records the store does not let this user delete (a read-only
        mount, another user's file in a sticky directory) stay, in the result's ``not_removed``."""
        return self._collector.collect(dry_run, progress)

    def _close(self) -> None:
        self._stopping.set()
        self._heartbeat.stop()
        if self._kernel is not None:  # after the records (shutdown() removed them): readers sweep what is left
            self._kernel.stop()
        self._link.stop()
        self._rescans.thread.stop()
        self._notifier.stop()
        self._locks.close()
        self._feeds.close_all()
        self._dirs.close()

    # -- notifications, heartbeat, rescans (:mod:`.watcher`, :mod:`.liveness`, :mod:`.rescan`) --------
    def _notified(self, kind: RecordKind, name: str) -> None:
        view = self._views[kind]
        with view.publishing:
            self._feeds.publish_all(view.read_name(name))

    def _thread_crashed(self, exc: BaseException) -> None:
        """A heartbeat or rescan thread ended (only a BaseException such as SystemExit ends one):
        no watch of this client can be trusted any longer."""
        self._feeds.fail(exc, None)

    def _owned_now(self) -> dict[DiscoveryInstanceId, DiscoveryInstance]:
        # dict() copies atomically under the GIL, without waiting for a long API call's lock
        return dict(self._owned)

    def _owned_names(self, kind: RecordKind) -> frozenset[str]:
        names = self._own.names
        return frozenset(names(i) for i in self._owned_now() if i.kind is kind)

    def _write_back(self, instance: DiscoveryInstance) -> bool:
        """Write a record of this client whose file is gone again (unless it was unregistered
        meanwhile, the client is closing or the file is back); True when it was written. Gone may
        mean taken over and removed by a successor: a cohort member asks its claim first."""
        if self._closed:  # shutdown() holds the API lock while it stops this thread
            return False
        with self._api_lock:
            if self._owned.get(instance.id()) is not instance or self._closed:
                return False
            written = bool(self._while_current(instance.id(), lambda: self._own.write(instance, create_only=True)))
        if written:
            self._link.written_back(_key(instance.id()))
        return written

    def _restore_replaced(self, view: BucketView, owned: Owned) -> None:
        """Write back this client's records (``owned``: id -> name) whose file a stranger replaced
        (a successor's takeover is respected)."""
        for instance_id in self._own.replaced(view, owned):
            with self._api_lock:
                instance = self._owned.get(instance_id)
                if instance is None or self._closed:
                    continue
                if self._while_current(instance_id, partial(self._own.restore, instance)):
                    self._link.written_back(_key(instance_id))

    def _while_current(self, instance_id: DiscoveryInstanceId, action: Callable[[], T]) -> T | None:
        """``action()``; for a cohort member, under the store lock and only while no successor took
        ``instance_id`` over; for another client, only while no cohort claims its id (else None)."""
        if self._fence_check is None:
            return action() if self._outside is None or self._outside.allows() else None
        with self._record_lock(instance_id):
            return action() if self._fence_check.still_current(instance_id) else None

    def rescan(self, *, scan: str = DEEP) -> None:
        """Rescan every bucket now: publish missed changes (then Resync), delete dead records,
        write back this client's records that another writer replaced. A bucket that cannot be
        read fails the watches of its kind only; the other buckets are scanned all the same.

        ``scan`` (the rescan thread chooses, see :mod:`.rescan`): ``deep`` (the default) stats
        every file and re-reads each whose version changed; ``full`` does not re-read a file
        whose mtime alone moved; ``listing`` reads nothing while the directory did not change,
        and neither judges liveness nor sweeps nor writes anything back (see :mod:`.view`)."""
        self._rescans.rescan(scan)

    # -- failover cohorts (docs/design.md §4.1; claims and fencing: :mod:`.cohort`) --------------------
    def _claim(self, cohort: object) -> None:
        assert self._fence_check is not None  # only a cohort member claims
        self._fence_check.claim()
        if self._kernel is not None:  # the logical id's name: a frozen predecessor's lock counts no longer
            self._kernel.hold()

    def _take_over(self, instance: DiscoveryInstance) -> None:
        self._changes.take_over(instance, self._get)

    def _failover_lock(self, name: str, stale_after: float | None) -> FailoverLock:
        stale_after = self._locks.stale_after if stale_after is None else check_stale_after(stale_after)
        return FileFailoverLock(
            name, self._lock_dir, mode=self._locks.mode, stale_after=stale_after, store_root=self.root,
            clock=self._clock,
        )  # fmt: skip


def _key(instance_id: DiscoveryInstanceId) -> str:
    """A record's store key (docs/design.md §3)."""
    return instance_id.kind.bucket + "/" + instance_id.to_path()
