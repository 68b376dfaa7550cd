"""The file-system backend: one directory tree shared by every client on a host (or an NFS mount).

Threads of a client, all named and daemonic, all stopped by ``shutdown()``:

* ``discovery-sync-file-heartbeat``: touches this client's files so readers see them alive,
  and writes back any that were swept while the client stalled (:mod:`.liveness`); not started
  by a read-only client, which owns nothing;
* ``discovery-sync-file-rescan``: rescans every bucket, reconciles watches (missed changes,
  then ``Resync``), warns about files it skips, deletes dead records and writes back this
  client's records when another writer replaced them (with inotify most rescans only compare
  the directory listing; full scans run as often as liveness needs: ``_scheduled_rescan``; a
  read-only client deletes and writes nothing: it reports dead records Removed and leaves them,
  and follows buckets that appear);
* the watchdog observer (started with the first watch): re-reads files as they change.

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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from discovery_sync.broadcast import FeedSet
from discovery_sync.cohort import CohortMembership
from discovery_sync.discovery import CollectedGarbage, Discovery
from discovery_sync.errors import BackendUnavailable, DiscoveryError, ValidationError
from discovery_sync.events import DiscoveryEvent
from discovery_sync.failover import FailoverLock
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.logical_id import member_instance_id
from discovery_sync.model import DiscoveryInstance, instance_to_json
from discovery_sync.periodic import PeriodicThread
from discovery_sync.queries import Query
from discovery_sync.watch import WatchFeed

from .cohort import claim_name, read_claim, write_claim
from .directory import DirectoryClosed, StoreDirectory, SymlinkRefused, listing
from .doctor import diagnose_store
from .failover import FileFailoverLock
from .layout import LOCK_DIRNAME, StoreLayout
from .liveness import Fencing, Heartbeat, OwnedNames, Patience, heartbeat_interval
from .locks import StoreLocks
from .missed import Suspects, notice_grace
from .mounts import choose_modes, mount_of, read_only_filesystem, store_cache_window
from .names import describe_entry, record_from
from .options import DEFAULT_TTL, OPTIONS, store_path
from .oserrors import storage_error
from .permissions import unsafe
from .softlock import DEFAULT_STALE_AFTER
from .sweep import Sweeper
from .view import BucketView, Touched
from .watcher import DirectoryNotifier
from .wire import (
    DEFAULT_MAX_RECORD_BYTES,
    REFERENCE_TTL,
    RecordTooLarge,
    read_file,
    refresh_listing,
    remove_record,
    stat_entry,
    unread_reason,
    write_record,
)

PROGRESS_INTERVAL = 0.25  # seconds between two progress reports of collect_garbage()

log = logging.getLogger("discovery_sync.backends.file")

MAX_CONSECUTIVE_SCAN_ERRORS = 3
MAX_REMEMBERED_REMOVALS = 10_000
#: with inotify, full scans re-read files whose mtime alone moved (taken for heartbeats) only every
#: this many full scans (and after a notification failed or the observer restarted): see BucketView
DEEP_EVERY = 10
#: kinds of rescan, cheapest first (see FileDiscovery.rescan)
LISTING, FULL, DEEP = "listing", "full", "deep"


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
        between compare only the directory listing, while a watch runs (see ``_scheduled_rescan``).
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
    :param read_only: never change the store (see the module docstring): every write raises
        ValidationError; no directory is created (a missing store or bucket lists as empty, and
        watches pick it up once a writer creates it), no lock taken, no file written, touched or
        deleted. Dead records are left out of lists and reported Removed to watches but stay on
        disk; ``collect_garbage(dry_run=True)`` reports them. On a network mount with caches,
        ``list()`` of a read-only client sees other hosts' writes up to ``cache_window`` late
        (a writer refreshes the mount's listing by writing a temp file first).
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
    ) -> None:
        given = {
            "ttl": ttl, "observer": observer, "lock": lock, "rescan_interval": rescan_interval,
            "poll_interval": poll_interval, "lock_timeout": lock_timeout, "lock_stale": lock_stale,
            "cache_window": cache_window, "max_record_bytes": max_record_bytes, "permissions": permissions,
            "instance_id": instance_id, "read_only": read_only, "uniform_ttl": uniform_ttl,
            "logical_instance_id": logical_instance_id,
        }  # fmt: skip
        option = OPTIONS.parse(given)  # the same checks whether the values came from a URL or not
        logical_instance_id = option["logical_instance_id"]
        instance_id = member_instance_id(
            option["instance_id"], logical_instance_id, read_only=option["read_only"], owner=OPTIONS.owner
        )
        super().__init__(read_only=option["read_only"], logical_instance_id=logical_instance_id)
        self.layout = StoreLayout(store_path(root))
        self.ttl = option["ttl"]
        self.max_record_bytes = option["max_record_bytes"]
        self.heartbeat_interval = heartbeat_interval(self.ttl)
        self.rescan_interval = option["rescan_interval"] or min(2.0, self.ttl / 3)
        self._instance_id = instance_id if instance_id is not None else secrets.randbits(64)
        mount = mount_of(self.layout.root)
        observer, lock = choose_modes(self.layout.root, option["observer"], option["lock"], mount)
        self.cache_window = store_cache_window(mount, option["cache_window"])
        # a heartbeat may reach this host's view a cache window late
        self.dead_after = self.ttl + self.cache_window
        # a writer whose heartbeat is slower than this TTL asks for more (docs/design.md §6, "Mixed TTLs")
        patience = Patience(self.ttl) if Patience.needed(self.ttl) and not option["uniform_ttl"] else None
        self.longest_dead_after = self.dead_after + (patience.slack(0) if patience is not None else 0.0)
        # seconds between full scans (stat of every file: liveness); in between, with inotify, the
        # rescans only compare the directory listing (names and inodes) with the view
        if observer == "polling":
            self.full_scan_interval = self.rescan_interval
        else:
            self.full_scan_interval = max(self.rescan_interval, self.dead_after / 2)
        lock_timeout, lock_stale = option["lock_timeout"], option["lock_stale"]
        if lock_timeout is None:
            lock_timeout = 3 * lock_stale if lock == "soft" else 10.0
        self._locks = StoreLocks(lock, lock_timeout, lock_stale)
        poll_interval = option["poll_interval"]
        self._notifier = DirectoryNotifier(observer, poll_interval)
        self._poll_interval = poll_interval
        self._buckets = {kind: StoreDirectory(self.layout.root, kind.bucket) for kind in RecordKind}
        self._lock_dir = StoreDirectory(self.layout.root, LOCK_DIRNAME)
        self._open_directories(option["permissions"])
        self._feeds = FeedSet()
        self._views = {
            kind: BucketView(
                kind,
                self._buckets[kind],
                self.dead_after,
                self._feeds.publish,
                settle=self.cache_window,
                max_record_bytes=max_record_bytes,
                missing_is_empty=self.read_only,
                subscribed=lambda kind: bool(self._feeds.current(kind)),
                patience=patience,
            )
            for kind in RecordKind
        }
        self._sweeper = Sweeper()
        self._names = OwnedNames(self.layout)  # file names of this client's records
        self._start_lock = threading.Lock()
        self._stopping = threading.Event()
        self._removed_lock = threading.Lock()
        self._removed_by_rescan: list[str] = []  # reported by the next collect_garbage()
        self._dry_runs = 0  # collect_garbage(dry_run=True) calls under way: rescans delete nothing meanwhile
        self._notified: frozenset[RecordKind] = frozenset()  # the buckets the notifier watches
        self._scan_errors = dict.fromkeys(RecordKind, 0)
        self._last_scan_error: dict[RecordKind | None, str | None] = {}
        # the inode of each record this client wrote (or adopted): a different one means another
        # writer replaced it
        self._written: dict[DiscoveryInstanceId, int] = {}
        self._replaced_warned: set[tuple[DiscoveryInstanceId, int]] = set()
        # content changes a rescan found that notifications had not delivered yet, by bucket
        grace = notice_grace(observer, poll_interval)
        self._suspects = {kind: Suspects(grace) for kind in RecordKind}
        # full scans until the next deep one (see DEEP_EVERY); 0: the next one is deep
        self._shallow_left = 0
        self._next_full = 0.0  # monotonic time when the rescan thread's next full scan is due
        self._trouble_since: float | None = None  # when _judge_sight() first found a reason to be blind
        self._rescanner = PeriodicThread(
            "discovery-sync-file-rescan",
            self.rescan_interval,
            self._scheduled_rescan,
            on_error=self._rescan_error,
            on_crash=self._thread_crashed,
        )
        self._liveness = liveness = Heartbeat(
            self.layout,
            self._buckets,
            self.heartbeat_interval,
            owned=self._owned_now,
            names=self._names,
            write_back=self._write_back,
            refused=self._full_scan_now,
            fenced=None if self._cohort is None else Fencing(self._still_claimed, self._written),
        )
        self._heartbeat = PeriodicThread(
            "discovery-sync-file-heartbeat",
            self.heartbeat_interval,
            liveness.beat,
            on_error=liveness.error,
            on_crash=self._thread_crashed,
        )
        if not self.read_only:  # it owns nothing to keep alive
            self._heartbeat.start()
        self._rescanner.start()

    def _open_directories(self, permissions: str) -> None:
        """Open (a writer: create) the store's directories, and judge who else can change them.
        A read-only client opens those that exist (a symlinked one is refused all the same: the
        writers would refuse the store); the buckets that do not are opened once they appear."""
        try:
            for directory in [*self._buckets.values(), self._lock_dir]:
                try:
                    directory.open(create=not self.read_only)
                except FileNotFoundError:
                    if not self.read_only:
                        raise
        except SymlinkRefused:
            self._close_directories()
            raise
        except OSError as exc:
            self._close_directories()
            doing = "read" if self.read_only else "create"
            raise BackendUnavailable(f"cannot {doing} the file store at {self.layout.root}: {exc}") from exc
        problems = unsafe(self.layout.root, self.layout.relatives())
        if problems and permissions == "refuse":
            self._close_directories()
            raise BackendUnavailable("refusing the file store (permissions=refuse): " + "; ".join(problems))
        for problem in problems:
            log.warning("the file store is not safe from other local users: %s", problem)

    def _close_directories(self) -> None:
        for directory in [*self._buckets.values(), self._lock_dir]:
            directory.close()

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
    def _read_stored(self, instance_id: DiscoveryInstanceId) -> tuple[DiscoveryInstance | None, str | None]:
        """The stored record with this id, or None and why it cannot be served (None: absent)."""
        name = self.layout.file_name(instance_id)
        directory = self._buckets[instance_id.kind]
        try:
            if self.read_only and not directory.is_open:
                directory.revalidate()  # a bucket that did not exist at the last look may exist now
            with directory.use() as dir_fd:
                raw = read_file(dir_fd, name, self.max_record_bytes)
                if raw is None:
                    return None, (None if stat_entry(dir_fd, name) is None else "not a regular file")
        except DirectoryClosed:  # a read-only client's bucket that went away meanwhile
            if not self.read_only:
                raise
            return None, None
        except (OSError, RecordTooLarge) as exc:
            if self.read_only and isinstance(exc, FileNotFoundError):
                return None, None  # no such bucket (yet, or any longer): nothing is stored under the id
            return None, unread_reason(exc)
        try:
            return record_from(raw, instance_id.kind, name), None
        except ValidationError as exc:
            return None, str(exc)

    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        instance, problem = self._read_stored(instance_id)
        if problem is not None:
            log.warning("the stored record %s is unusable, treating it as absent: %s", instance_id.to_path(), problem)
        return instance

    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        instance_id = instance.id()
        if self._write(instance, create_only=True):
            return None
        existing, problem = self._read_stored(instance_id)
        if existing is None:
            path = self.layout.path_of(instance_id)
            raise DiscoveryError(
                f"{instance.kind.value} {instance_id.to_path()} cannot be registered: {path} exists but is not a "
                f"usable record ({problem or 'it vanished while it was read'}); remove it (or run 'discovery-sync gc' "
                "if its writer died)"
            )
        self._adopt(instance_id)
        return existing

    def _replace(self, instance: DiscoveryInstance) -> None:
        if self._cohort is not None and not self._still_current(instance.id()):  # under the store lock
            self._cohort.check()
        self._write(instance, create_only=False)

    def _write(self, instance: DiscoveryInstance, *, create_only: bool) -> bool:
        """Write ``instance`` to its file; False when ``create_only`` and the file exists."""
        instance_id = instance.id()
        name = self.layout.file_name(instance_id)
        data = instance_to_json(instance)
        if len(data) > self.max_record_bytes:
            raise ValidationError(
                f"{instance.kind.value} {instance_id.to_path()} is {len(data)} bytes as JSON, more than "
                f"max_record_bytes={self.max_record_bytes}: readers would skip it; store less in it"
            )
        directory = self._buckets[instance.kind]
        try:
            with directory.use() as dir_fd:
                inode = write_record(dir_fd, name, data, create_only=create_only)
        except OSError as exc:
            raise storage_error(exc, f"cannot write {directory.path / name}") from exc
        if inode is None:
            return False
        self._written[instance_id] = inode
        return True

    def _adopt(self, instance_id: DiscoveryInstanceId) -> None:
        """Take the file now stored under ``instance_id`` as this client's (create-if-absent kept it)."""
        with self._buckets[instance_id.kind].use() as dir_fd:
            st = stat_entry(dir_fd, self.layout.file_name(instance_id))
        if st is not None:
            self._written[instance_id] = st.st_ino

    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        if self._cohort is not None:
            with self._store_lock(instance_id.kind, instance_id.kind.bucket + "/" + instance_id.to_path()):
                if not self._still_current(instance_id):
                    self._cohort.check()  # a successor's now: InstanceReplaced, nothing removed
                self._unlink(instance_id)
            return
        self._unlink(instance_id)

    def _unlink(self, instance_id: DiscoveryInstanceId) -> None:
        self._written.pop(instance_id, None)
        try:
            with self._buckets[instance_id.kind].use() as dir_fd:
                remove_record(dir_fd, self.layout.file_name(instance_id))
        except OSError as exc:
            raise storage_error(exc, f"cannot delete {instance_id.to_path()}") from exc

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
            view.refresh(prefix, quick=self._locks.mode == "hard")
        except OSError as exc:
            raise BackendUnavailable(f"cannot read {view.directory.path}: {exc}") from exc
        view.warn_pending()  # a one-shot list() says what it skipped, as a rescan would
        return view, prefix

    @contextlib.contextmanager
    def _store_lock(self, kind: RecordKind, key: str) -> Iterator[None]:
        # the whole bucket, as reference workers lock it for every change they make
        bucket = self._buckets[kind]
        with self._locks.hold(bucket, self._lock_dir, self.layout.lock_name(kind.bucket)):
            if self._locks.mode == "soft":
                try:
                    with bucket.use() as dir_fd:
                        refresh_listing(dir_fd)
                except OSError as exc:
                    raise storage_error(exc, f"cannot refresh the listing of {bucket.path} under its lock") from exc
            yield

    def _open_feed(self, feed: WatchFeed) -> None:
        self._ensure_notifier()
        view = self._views[feed.query.kind]
        prefix = self.layout.name_prefix(feed.query)
        with view.lock:  # no change may be published between the snapshot and the subscription
            try:
                view.refresh(prefix)
            except OSError as exc:
                raise BackendUnavailable(f"cannot read {view.directory.path}: {exc}") from exc
            feed.start(view.valid(prefix, skip=self._owned_names(feed.query.kind)))
            self._feeds.add(feed)

    def status(self) -> dict[str, Any]:
        """This client's store, records and the health of its threads. ``connected`` is False
        while the last heartbeat or rescan failed (each retries every interval)."""
        heartbeat = None if self.read_only else self._heartbeat.health()  # a read-only client has none
        rescan = self._rescanner.health()
        return {
            "root": str(self.layout.root),
            "instance_id": self.instance_id,
            "read_only": self.read_only,
            "records": 0 if self.replaced is not None else len(self._owned),
            "observer": self._notifier.kind,
            "observer_alive": self._notifier.is_alive() if self._notifier.started else None,
            "lock": self._locks.mode,
            "heartbeat": heartbeat,
            "rescan": rescan,
            "liveness_paused": self._views[RecordKind.ENDPOINT].blind,
            "logical_instance_id": None if self._cohort is None else self._cohort.logical_instance_id,
            "replaced": None if self.replaced is None else str(self.replaced),
            "connected": not (heartbeat and heartbeat["failures"]) and not rescan["failures"],
        }

    def _probe(self) -> None:
        """Every bucket can be listed (for a read-only client: every bucket that exists)."""
        for directory in self._buckets.values():
            try:
                directory.revalidate()
                with directory.use() as dir_fd, listing(dir_fd):
                    pass
            except FileNotFoundError as exc:
                if not self.read_only:
                    raise BackendUnavailable(f"cannot read the file store directory {directory.path}: {exc}") from exc
            except OSError as exc:
                raise BackendUnavailable(f"cannot read the file store directory {directory.path}: {exc}") from exc

    def _diagnose(self, report: dict[str, Any]) -> None:
        details = diagnose_store(
            self.layout,
            self._notifier.kind,
            self._locks.mode,
            self.ttl,
            self.cache_window,
            self._poll_interval,
            self.max_record_bytes,
            read_only=self.read_only,
        )
        report["problems"].extend(details.pop("problems"))
        report.update(details)

    def _collect_garbage(self, dry_run: bool, progress: Callable[[float, float], None] | None) -> CollectedGarbage:
        """Watch the store for one TTL plus the cache window (liveness is judged on this reader's
        clock), then remove the records nobody touched meanwhile; return their store keys.
        Leftover temp and hidden files as still as that are removed too (and logged). Dead records
        the store does not let this user delete (a read-only mount, another user's file in a
        sticky directory) stay, listed in the result's ``not_removed`` with the reason.

        A dry run removes nothing, and neither do this client's rescans while it runs: their
        dead records are only reported Removed to watches (as a read-only client's always are)."""
        with self._removed_lock:
            self._removed_by_rescan.clear()
            if dry_run:
                self._dry_runs += 1
        try:
            return self._judge_garbage(dry_run, progress)
        finally:
            if dry_run:
                with self._removed_lock:
                    self._dry_runs -= 1

    def _judge_garbage(self, dry_run: bool, progress: Callable[[float, float], None] | None) -> CollectedGarbage:
        for view in self._views.values():
            self._refresh_quietly(view)
        judged_after = self.longest_dead_after + self.rescan_interval
        self._wait_reporting(judged_after, progress)
        if any(view.blind is not None for view in self._views.values()):
            # judging is paused (_judge_sight): give others' writes the time to show, if there are any
            shown_within = self.full_scan_interval + self.cache_window + REFERENCE_TTL / 3 + self.rescan_interval
            self._wait_reporting(shown_within, progress)
        result = CollectedGarbage()
        for view in self._views.values():
            self._refresh_quietly(view)
            swept = self._sweeper.sweep(view, self._owned_names(view.kind), retry=True, dry_run=dry_run)
            result += swept
            result.not_removed.update(swept.not_removed)
        if not dry_run:
            with self._removed_lock:
                result += self._removed_by_rescan
                self._removed_by_rescan.clear()
        return CollectedGarbage(sorted(set(result)), result.not_removed)

    def _wait_reporting(self, seconds: float, progress: Callable[[float, float], None] | None) -> None:
        """Wait ``seconds`` (less if the client shuts down), telling ``progress`` every quarter second."""
        start = time.monotonic()
        while not self._stopping.is_set():
            elapsed = time.monotonic() - start
            if progress is not None:
                progress(min(elapsed, seconds), seconds)
            if elapsed >= seconds:
                return
            self._stopping.wait(min(PROGRESS_INTERVAL, seconds - elapsed))

    def _refresh_quietly(self, view: BucketView) -> None:
        try:
            view.refresh()
        except OSError as exc:
            raise BackendUnavailable(f"cannot read {view.directory.path}: {exc}") from exc

    def _close(self) -> None:
        self._stopping.set()
        self._heartbeat.stop()
        self._rescanner.stop()
        self._notifier.stop()
        self._locks.close()
        self._feeds.close_all()
        self._close_directories()

    # -- notification -----------------------------------------------------------------------------------
    def _ensure_notifier(self) -> None:
        with self._start_lock:
            if self._notifier.started:
                return
            self._start_notifier(self._present_buckets() if self.read_only else frozenset(RecordKind))

    def _start_notifier(self, kinds: frozenset[RecordKind]) -> None:
        """Start the notifier on the buckets of ``kinds`` (with ``_start_lock`` held)."""
        callbacks = {self.layout.buckets[kind]: self._views[kind].refresh_name for kind in kinds}
        try:
            self._notifier.start(callbacks, self._notification_error)
        except OSError as exc:
            raise BackendUnavailable(f"cannot watch the file store at {self.layout.root}: {exc}") from exc
        self._notified = kinds

    def _present_buckets(self) -> frozenset[RecordKind]:
        """Read-only clients: the buckets that exist now (opened; a missing one is closed). A
        bucket that cannot be judged now (unreadable, a symlink) keeps its place: the scan of it
        reports the problem."""
        present = set(self._notified)
        for kind, directory in self._buckets.items():
            try:
                directory.revalidate()
            except FileNotFoundError:
                directory.close()
                present.discard(kind)
            except (OSError, DiscoveryError):
                continue
            else:
                present.add(kind)
        return frozenset(present)

    def _follow_buckets(self) -> None:
        """Read-only clients, every rescan: watch the buckets that exist now. When buckets
        appeared or went away the notifier restarts on the new set and every bucket is rescanned
        at once, publishing what it finds as ordinary events (Added, Removed): records written
        before the watch on a new bucket began reach the watches right away, no Resync."""
        with self._start_lock:
            if not self._notifier.started:
                return  # nothing watches: list() and get() look for themselves
            present = self._present_buckets()
            if present == self._notified:
                return
            log.info(
                "the read-only client of %s now watches %s",
                self.layout.root,
                ", ".join(sorted(kind.bucket for kind in present)) or "no bucket (none exists)",
            )
            self._notifier.stop()
            self._start_notifier(present)
            for view in self._views.values():  # changes made while no notifier ran, as events
                with contextlib.suppress(OSError, DiscoveryError):  # the scan that follows reports it
                    view.refresh()

    def _notification_error(self, exc: BaseException) -> None:
        log.warning("error while handling a file notification (the next rescan repairs it): %s", exc)
        self._shallow_left = self._next_full = 0
        self._rescanner.wake()

    # -- heartbeat (:mod:`.liveness`) -------------------------------------------------------------------
    def _owned_now(self) -> dict[DiscoveryInstanceId, DiscoveryInstance]:
        # dict() copies atomically under the GIL, without waiting for a long API call's lock
        return dict(self._owned)

    def _write_back(self, instance: DiscoveryInstance) -> bool:
        """Write a record of this client whose file is gone again (unless it was unregistered
        meanwhile, the client is closing or the file is back); True when it was written."""
        if self._closed:  # shutdown() holds the API lock while it stops this thread
            return False
        with self._api_lock:
            if self._owned.get(instance.id()) is not instance or self._closed:
                return False
            if self._cohort is None:
                return self._write(instance, create_only=True)
            instance_id = instance.id()
            with self._store_lock(instance_id.kind, instance_id.kind.bucket + "/" + instance_id.to_path()):
                # gone may mean taken over and removed by a successor: its claim tells
                return self._still_current(instance_id) and self._write(instance, create_only=True)

    # -- failover cohorts (docs/design.md §4.1; claims: :mod:`.cohort`) ----------------------------------
    def _claim(self, cohort: CohortMembership) -> None:
        name = claim_name(cohort.logical_instance_id)
        path = self._lock_dir.path / name
        try:
            with self._lock_dir.use() as dir_fd:
                claim = read_claim(dir_fd, name)
                if claim is not None and claim.token == cohort.token:
                    return
                if claim is not None and cohort.claimed:
                    self._fence(claim.describe(), f"its claim {path}")
                    cohort.check()
                if claim is None and cohort.claimed:
                    log.warning("the cohort claim %s of this client is gone or unreadable; writing it again", path)
                write_claim(dir_fd, name, cohort.token)
        except OSError as exc:
            raise storage_error(exc, f"cannot write the cohort claim {path}") from exc

    def _take_over(self, instance: DiscoveryInstance) -> None:
        self._write(instance, create_only=False)

    def _failover_lock(self, name: str, stale_after: float | None) -> FailoverLock:
        stale_after = self._locks.stale_after if stale_after is None else OPTIONS.check("lock_stale", stale_after)
        return FileFailoverLock(
            name, self._lock_dir, mode=self._locks.mode, stale_after=stale_after, store_root=self.root
        )

    def _still_claimed(self) -> bool:
        """Whether this cohort member still is its logical id's current writer: no claim of another
        member stands in the store (a member that has written nothing yet is no writer to fence).
        A claim of another fences this client."""
        cohort = self._cohort
        if cohort is None or cohort.replaced is not None:
            return cohort is None
        if not cohort.claimed:
            return True
        name = claim_name(cohort.logical_instance_id)
        with self._lock_dir.use() as dir_fd:
            claim = read_claim(dir_fd, name)
        if claim is not None and claim.token != cohort.token:
            self._fence(claim.describe(), f"its claim {self._lock_dir.path / name}")
            return False
        return True

    def _still_current(self, instance_id: DiscoveryInstanceId) -> bool:
        """Under the store lock: whether this cohort member may still write, refresh or delete
        ``instance_id``: it is still claimed, and the file under the name is the one this client
        wrote, or no successor's (another user's file, junk: a stranger's, repaired as ever). A
        valid record of this user written by another process is a successor's (a member that
        writes no claim, as the reference's): it fences this client."""
        if not self._still_claimed():
            return False
        name = self._names(instance_id)
        directory = self._buckets[instance_id.kind]
        with directory.use() as dir_fd:
            st = stat_entry(dir_fd, name)
            if st is None or st.st_ino == self._written.get(instance_id) or st.st_uid != os.geteuid():
                return True
            try:
                raw = read_file(dir_fd, name, self.max_record_bytes)
                record_from(raw or b"", instance_id.kind, name)
            except (OSError, RecordTooLarge, ValidationError):
                return True  # not a record: nobody's takeover
        self._fence(f"a process of uid {st.st_uid}", f"its record {directory.path / name}")
        return False

    def _thread_crashed(self, exc: BaseException) -> None:
        """A heartbeat or rescan thread ended (only a BaseException such as SystemExit ends one):
        no watch of this client can be trusted any longer."""
        self._feeds.fail(exc, None)

    # -- rescan -----------------------------------------------------------------------------------------
    def _full_scan_now(self) -> None:
        """Make the rescan thread run a full scan now (a heartbeat was refused on a replaced file)."""
        self._next_full = 0
        self._rescanner.wake()

    def _scheduled_rescan(self) -> None:
        """The rescan thread's job, every ``rescan_interval``.

        With the polling observer (network filesystems) every rescan is deep, as always. With
        inotify, which delivers every write made on this host, a full scan runs every
        ``full_scan_interval`` (dead_after / 2: liveness needs no more), every ``DEEP_EVERY``-th
        of them deep; the rescans in between compare only the directory listing (names and
        inodes: creates, deletes and atomic replaces a lost notification missed), and only while
        a watch needs them (the notifier runs)."""
        now = time.monotonic()
        if self._notifier.kind != "polling" and now < self._next_full:
            if self._notifier.started:
                self.rescan(scan=LISTING)
            return
        # the next one is due an interval later, less half a rescan interval of timer slack
        self._next_full = now + self.full_scan_interval - self.rescan_interval / 2
        if self._notifier.kind == "polling" or self._shallow_left <= 0:
            self._shallow_left = DEEP_EVERY - 1
            self.rescan()
        else:
            self._shallow_left -= 1
            self.rescan(scan=FULL)

    def rescan(self, *, scan: str = DEEP) -> None:
        """Rescan every bucket now: publish missed changes (then Resync), delete dead records,
        write back this client's records that another writer replaced. A bucket that cannot be
        read fails the watches of its kind only; the other buckets are scanned all the same.

        ``scan`` (the rescan thread chooses, see :meth:`_scheduled_rescan`): ``deep`` (the
        default) stats every file and re-reads each whose version changed; ``full`` does not
        re-read a file whose mtime alone moved (:meth:`BucketView.refresh`); ``listing`` stats
        only files whose inode in the listing changed and publishes what changed, but neither
        judges liveness nor sweeps nor writes anything back."""
        if self.read_only:  # first: the emitter of a bucket that went away has stopped
            self._follow_buckets()
        if self._notifier.started and not self._notifier.is_alive():
            log.warning("the file-store observer stopped; restarting it and resynchronising")
            self._notifier.stop()
            self._ensure_notifier()
            scan = DEEP  # what it did not deliver meanwhile
        self._judge_sight()
        owned = self._owned_by_kind() if scan != LISTING else {}
        for kind, view in self._views.items():
            try:
                self._rescan_bucket(kind, view, scan, owned.get(kind, {}))
            except (OSError, DiscoveryError) as exc:
                self._scan_failed(exc, kind)
                continue
            self._scan_errors[kind] = 0
            self._last_scan_error[kind] = None

    def _judge_sight(self) -> None:
        """Make every view blind while this client cannot tell a stale store from an unreachable
        one: its own heartbeat fails or stalls (a frozen mount), or the store is mounted read-only
        here (no heartbeat through this mount can move a record, and one that owns nothing would
        not know), unless files of the store keep changing meanwhile (written through another
        mount). Seeing again, each view gives every record a full TTL (docs/design.md §6). A
        read-only client has no heartbeat to tell it: it judges by the clock and its scans."""
        now = time.monotonic()
        reason = None if self.read_only else self._liveness.trouble(now)
        if reason is None and not self.read_only and read_only_filesystem(self.layout.root):
            reason = "the store's filesystem is mounted read-only here"
        views = self._views.values()
        others_write = False
        if reason is None:
            self._trouble_since = None
        elif self._trouble_since is None:
            self._trouble_since = now
        else:
            # a change seen after every write made before the trouble began has had a full scan
            # to show, and lately (a heartbeat comes every 3.33 s at most): others' heartbeats
            # reach the store (through another mount), the clock is fair
            shown_within = self.full_scan_interval + self.cache_window
            since = max(self._trouble_since + shown_within, now - shown_within - REFERENCE_TTL / 3)
            others_write = max(view.moved_at for view in views) > since
        paused = [view for view in views if view.blind is not None]
        if reason is not None and not others_write:
            if not paused:
                log.warning("the file store at %s: %s; no record is judged dead meanwhile", self.layout.root, reason)
            for view in views:
                view.pause_judging(reason)
        elif paused:
            if others_write:
                log.warning(
                    "the file store at %s: %s, but others write to it; liveness is judged again",
                    self.layout.root,
                    reason,
                )
            else:
                log.warning("the file store at %s: liveness is judged again, after a full TTL", self.layout.root)
            for view in views:
                view.resume_judging(restart=not others_write)

    def _rescan_bucket(
        self, kind: RecordKind, view: BucketView, scan: str, owned: dict[DiscoveryInstanceId, str]
    ) -> None:
        """One bucket: ``owned`` is this client's records in it (id -> file name)."""
        missed: list[tuple[DiscoveryEvent, DiscoveryInstance | None]] = []
        suspects = self._suspects[kind]
        view.refresh(
            publish=lambda event, instance: missed.append((event, instance)),
            gate=suspects.gate(time.monotonic()),
            quick=scan == LISTING,
            deep=scan == DEEP,
            touched=self._touched(owned) if scan == FULL else None,
        )
        suspects.scan_ended(time.monotonic())
        if missed:
            log.info(
                "rescan of %s found %d change(s) no notification delivered in time (then a Resync): %s",
                kind.bucket,
                len(missed),
                ", ".join(f"{type(event).__name__} {_about(event, instance)}" for event, instance in missed),
            )
        self._feeds.publish_missed(kind, missed)
        if suspects:  # a change waits for confirmation: the next scan is deep (reads it, even if only its mtime moves)
            self._shallow_left = self._next_full = 0
        if scan == LISTING:
            return
        view.warn_pending()
        owned_names = frozenset(owned.values())
        if self.read_only or self._dry_runs:  # deletes nothing: watches hear of dead records all the same
            self._sweeper.expire(view, owned_names)
            return
        removed = self._sweeper.sweep(view, owned_names)
        if removed:
            with self._removed_lock:
                self._removed_by_rescan.extend(removed[:MAX_REMEMBERED_REMOVALS])
                del self._removed_by_rescan[:-MAX_REMEMBERED_REMOVALS]
        self._restore_replaced(view, owned)

    def _touched(self, owned: dict[DiscoveryInstanceId, str]) -> Touched | None:
        """This client's files of one bucket as its heartbeat keeps them (``owned``: id -> name),
        for a shallow scan that need not stat them; None before the first completed beat."""
        beaten_at = self._liveness.beaten_at
        if beaten_at is None or not owned:
            return None
        written = self._written  # changed by API calls meanwhile: one get() per record
        return Touched({name: inode for i, name in owned.items() if (inode := written.get(i)) is not None}, beaten_at)

    def _restore_replaced(self, view: BucketView, owned: dict[DiscoveryInstanceId, str]) -> None:
        """Write back this client's records (``owned``: id -> name) whose file another writer
        replaced: another inode, or no regular file at all in the last scan (a FIFO or symlink in
        its place, or gone)."""
        if not owned:
            return
        inodes = view.inodes()
        written = self._written
        for instance_id, name in owned.items():
            inode = written.get(instance_id)
            if inode is None or inodes.get(name) == inode:
                continue
            with self._api_lock:
                instance = self._owned.get(instance_id)
                if instance is None or self._closed:
                    continue
                self._restore(instance, name)

    def _restore(self, instance: DiscoveryInstance, name: str) -> None:
        instance_id = instance.id()
        if self._cohort is not None:
            with self._store_lock(instance_id.kind, instance_id.kind.bucket + "/" + instance_id.to_path()):
                if self._still_current(instance_id):  # else a successor took it over: respected
                    self._restore_foreign(instance, name)
            return
        self._restore_foreign(instance, name)

    def _restore_foreign(self, instance: DiscoveryInstance, name: str) -> None:
        """Write back this client's record that a stranger replaced (see _restore_replaced)."""
        instance_id = instance.id()
        directory = self._buckets[instance_id.kind]
        with directory.use() as dir_fd:
            st = stat_entry(dir_fd, name)
            if st is None or st.st_ino == self._written.get(instance_id):
                return  # gone (the heartbeat writes it again) or ours after all
            try:
                same = read_file(dir_fd, name, self.max_record_bytes) == instance_to_json(instance)
            except (OSError, RecordTooLarge):
                same = False
            if same:  # the same bytes under a new inode (a copy put back): ours all the same
                self._written[instance_id] = st.st_ino
                return
        what = f"{describe_entry(name, st) or 'a file'} of uid {st.st_uid}"
        try:
            self._write(instance, create_only=False)
        except BackendUnavailable as exc:
            if (instance_id, st.st_ino) not in self._replaced_warned:
                self._replaced_warned.add((instance_id, st.st_ino))
                log.error(
                    "record %s of this client was replaced by %s and cannot be written back (%s): "
                    "readers no longer see this client's record",
                    directory.path / name,
                    what,
                    exc.__cause__ or exc,
                )
            return
        log.warning(
            "record %s of this client was replaced by another writer (%s); wrote it back", directory.path / name, what
        )

    def _rescan_error(self, exc: BaseException) -> bool:
        # the observer could not be restarted, or a bug: every watch is concerned
        if not isinstance(exc, OSError | DiscoveryError):
            log.error("thread %s: rescan failed unexpectedly", threading.current_thread().name, exc_info=exc)
        self._scan_failed(exc, None)
        return isinstance(exc, Exception)

    def _scan_failed(self, exc: BaseException, kind: RecordKind | None) -> None:
        """A rescan of ``kind``'s bucket (None: of the whole store) failed. Transient errors are
        retried a few times; then, and at once when the directory is gone or refused, the watches
        concerned fail. The thread goes on, so a store that is repaired serves new watches."""
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and kind is not None:
            self._scan_errors[kind] += 1
            if self._scan_errors[kind] < MAX_CONSECUTIVE_SCAN_ERRORS:
                log.warning("rescan of %s failed (%d in a row): %s", kind.bucket, self._scan_errors[kind], exc)
                return
        if isinstance(exc, OSError):
            exc = BackendUnavailable(f"cannot watch the file store at {self.layout.root}: {exc}")
        if str(exc) != self._last_scan_error.get(kind):  # said once per problem, not every rescan
            log.error("rescan of %s failed; its watches fail: %s", kind.bucket if kind else self.layout.root, exc)
        self._last_scan_error[kind] = str(exc)
        self._feeds.fail(exc, kind)

    def _owned_by_kind(self) -> dict[RecordKind, dict[DiscoveryInstanceId, str]]:
        """This client's records now, by bucket: id -> file name."""
        by_kind: dict[RecordKind, dict[DiscoveryInstanceId, str]] = {}
        names = self._names
        for instance_id in self._owned_now():
            by_kind.setdefault(instance_id.kind, {})[instance_id] = names(instance_id)
        return by_kind

    def _owned_names(self, kind: RecordKind) -> frozenset[str]:
        return frozenset(self._names(i) for i in self._owned_now() if i.kind is kind)


def _about(event: DiscoveryEvent, instance: DiscoveryInstance | None) -> str:
    """The identity path an event is about, for log lines."""
    if instance is not None:
        return instance.id().to_path()
    event_id = getattr(event, "id", None)
    return event_id.to_path() if event_id is not None else "?"
