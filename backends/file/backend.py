"""The file-system backend: one directory tree shared by every client on a host (or an NFS mount).

Threads of a client, all named and daemonic, all stopped by ``shutdown()``:

* ``discovery-sync-file-heartbeat``: touches this client's files so readers see them alive,
  and writes back any that were swept while the client stalled;
* ``discovery-sync-file-rescan``: rescans every bucket, reconciles watches (missed changes,
  then ``Resync``), warns about unreadable files and deletes dead records;
* the watchdog observer (started with the first watch): re-reads files as they change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from discovery_sync.broadcast import FeedSet
from discovery_sync.discovery import Discovery
from discovery_sync.errors import BackendUnavailable, DiscoveryError, ValidationError
from discovery_sync.events import DiscoveryEvent
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance, instance_from_json, instance_to_json
from discovery_sync.pathcodec import decode
from discovery_sync.periodic import PeriodicThread
from discovery_sync.queries import Query
from discovery_sync.watch import WatchFeed

from .doctor import diagnose_store
from .layout import StoreLayout
from .locks import StoreLocks
from .mounts import choose_modes, mount_of, store_cache_window
from .notify import DirectoryNotifier
from .records import REFERENCE_TTL, read_open, read_record, refresh_listing, remove_record, touch_record, write_record
from .softlock import DEFAULT_STALE_AFTER
from .view import BucketView, Entry, Version

log = logging.getLogger("discovery_sync.backends.file")

DEFAULT_TTL = 10.0
MAX_CONSECUTIVE_SCAN_ERRORS = 3
MAX_REMEMBERED_REMOVALS = 10_000
NOTICE_GRACE = 1.0  # seconds a notification may lag a rescan before the change counts as missed
MAX_NOTICE_GRACE = 3.0


class FileDiscovery(Discovery):
    """Discovery on a directory tree laid out like the reference runtime's FileStore.

    :param root: the store directory (created if missing).
    :param ttl: seconds a record survives without a heartbeat (as judged by each reader).
    :param observer: ``inotify`` (one host) or ``polling`` (network filesystems); default: polling
        on a network filesystem (nfs, cifs, fuse.sshfs, …, from /proc/self/mountinfo), else inotify.
    :param lock: ``hard`` (flock) or ``soft`` (O_EXCL marker files, for network filesystems);
        default: soft on a network filesystem, else hard.
    :param rescan_interval: seconds between full rescans (default: min(2, ttl/3)).
    :param poll_interval: seconds between directory polls of the polling observer.
    :param lock_timeout: seconds to wait for a store lock before LockTimeout (default 10 s for hard
        locks, 3 x ``lock_stale`` for soft ones, so a waiter outlives a dead holder's marker).
    :param lock_stale: seconds an unchanged soft-lock marker is respected before it is broken.
    :param cache_window: seconds this host may see other hosts' changes late (attribute and
        listing caches of a network mount); default: read from the mount's options. A record is
        judged dead after ``ttl + cache_window`` seconds without a visible heartbeat.
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
        instance_id: int | None = None,
    ) -> None:
        super().__init__()
        if not ttl > 0:
            raise ValidationError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if cache_window is not None and not cache_window >= 0:
            raise ValidationError(f"cache_window must be a number of seconds >= 0, got {cache_window!r}")
        self.layout = StoreLayout(root)
        self.ttl = float(ttl)
        self.heartbeat_interval = max(min(self.ttl, REFERENCE_TTL) / 3, 0.25)
        self.rescan_interval = rescan_interval if rescan_interval is not None else min(2.0, self.ttl / 3)
        self._instance_id = instance_id if instance_id is not None else secrets.randbits(64)
        mount = mount_of(self.layout.root)
        observer, lock = choose_modes(self.layout.root, observer, lock, mount)
        self.cache_window = store_cache_window(mount, cache_window)
        # a heartbeat may reach this host's view a cache window late
        self.dead_after = self.ttl + self.cache_window
        if lock_timeout is None:
            lock_timeout = 3 * lock_stale if lock == "soft" else 10.0
        self._locks = StoreLocks(lock, lock_timeout, lock_stale)
        self._notifier = DirectoryNotifier(observer, poll_interval)
        self._poll_interval = poll_interval
        self._notice_grace = notice_grace(observer, poll_interval)
        try:
            self.layout.ensure()
        except OSError as exc:
            raise BackendUnavailable(f"cannot create the file store at {self.layout.root}: {exc}") from exc
        self._feeds = FeedSet()
        self._views = {
            kind: BucketView(
                kind, self.layout.buckets[kind], self.dead_after, self._feeds.publish, settle=self.cache_window
            )
            for kind in RecordKind
        }
        self._start_lock = threading.Lock()
        self._stopping = threading.Event()
        self._removed_lock = threading.Lock()
        self._removed_by_rescan: list[str] = []  # reported by the next collect_garbage()
        self._scan_errors = 0
        # content changes a rescan found that notifications had not delivered yet, by bucket:
        # name -> (version, when first found)
        self._suspects: dict[RecordKind, dict[str, tuple[Version | None, float]]] = {kind: {} for kind in RecordKind}
        self._heartbeat = PeriodicThread(
            "discovery-sync-file-heartbeat", self.heartbeat_interval, self._beat, on_error=self._heartbeat_error
        )
        self._rescanner = PeriodicThread(
            "discovery-sync-file-rescan", self.rescan_interval, self.rescan, on_error=self._rescan_error
        )
        self._heartbeat.start()
        self._rescanner.start()

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
        raw = read_record(self.layout.path_of(instance_id))
        if raw is None:
            return None
        try:
            return instance_from_json(raw)
        except ValidationError:
            log.warning("the stored record %s is unreadable; treating it as absent", instance_id.to_path())
            return None

    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        instance_id = instance.id()
        name = self.layout.file_name(instance_id)
        directory = self.layout.buckets[instance.kind]
        if self._write(directory, name, instance, create_only=True):
            return None
        existing = self._get(instance_id)
        if existing is None:
            raise DiscoveryError(
                f"{instance.kind.value} {instance_id.to_path()} exists in the store but cannot be read; "
                f"delete {directory / name} or run 'discovery-sync gc'"
            )
        return existing

    def _replace(self, instance: DiscoveryInstance) -> None:
        self._write(
            self.layout.buckets[instance.kind], self.layout.file_name(instance.id()), instance, create_only=False
        )

    def _write(self, directory: Path, name: str, instance: DiscoveryInstance, *, create_only: bool) -> bool:
        try:
            return write_record(directory, name, instance_to_json(instance), create_only=create_only)
        except OSError as exc:
            raise BackendUnavailable(f"cannot write {directory / name}: {exc}") from exc

    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        try:
            remove_record(self.layout.path_of(instance_id))
        except OSError as exc:
            raise BackendUnavailable(f"cannot delete {instance_id.to_path()}: {exc}") from exc

    def _list(self, query: Query) -> list[DiscoveryInstance]:
        view = self._views[query.kind]
        prefix = self.layout.name_prefix(query)
        try:
            if self.cache_window:  # make this host's listing current: see other hosts' writes now
                with contextlib.suppress(OSError):  # a read-only mount: the caches decide
                    refresh_listing(view.directory)
            view.refresh(prefix, quick=self._locks.mode == "hard")
        except OSError as exc:
            raise BackendUnavailable(f"cannot read {view.directory}: {exc}") from exc
        return view.valid(prefix, skip=self._owned_names(query.kind))

    @contextlib.contextmanager
    def _store_lock(self, kind: RecordKind, key: str) -> Iterator[None]:
        # the whole bucket, as reference workers lock it for every change they make
        directory = self.layout.buckets[kind]
        with self._locks.hold(directory, self.layout.lock_path(kind.bucket)):
            if self._locks.mode == "soft":
                refresh_listing(directory)
            yield

    def _open_feed(self, feed: WatchFeed) -> None:
        self._ensure_notifier()
        view = self._views[feed.query.kind]
        prefix = self.layout.name_prefix(feed.query)
        with view.lock:  # no change may be published between the snapshot and the subscription
            view.refresh(prefix)
            feed.start(view.valid(prefix, skip=self._owned_names(feed.query.kind)))
            self._feeds.add(feed)

    def _probe(self) -> None:
        for directory in self.layout.buckets.values():
            if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
                raise BackendUnavailable(f"the file store directory {directory} is missing or not writable")
        try:
            with os.scandir(self.layout.buckets[RecordKind.ENDPOINT]):
                pass
        except OSError as exc:
            raise BackendUnavailable(f"cannot read the file store at {self.layout.root}: {exc}") from exc

    def _diagnose(self, report: dict[str, Any]) -> None:
        details = diagnose_store(
            self.layout,
            self._notifier.kind,
            self._locks.mode,
            self.ttl,
            self.cache_window,
            self._poll_interval,
        )
        report["problems"].extend(details.pop("problems"))
        report.update(details)

    def collect_garbage(self) -> list[str]:
        """Watch the store for one TTL plus the cache window (liveness is judged on this reader's
        clock), then remove the records nobody touched meanwhile; return their store keys.
        Leftover temp and hidden files as still as that are removed too (and logged)."""
        self._check_open()
        with self._removed_lock:
            self._removed_by_rescan.clear()
        for view in self._views.values():
            view.refresh()
        self._stopping.wait(self.dead_after + self.rescan_interval)
        removed: list[str] = []
        for view in self._views.values():
            view.refresh()
            removed += self._collect_garbage(view)
        with self._removed_lock:
            removed += self._removed_by_rescan
            self._removed_by_rescan.clear()
        return sorted(set(removed))

    def _close(self) -> None:
        self._stopping.set()
        self._heartbeat.stop()
        self._rescanner.stop()
        self._notifier.stop()
        self._locks.close()
        self._feeds.close_all()

    # -- notification -----------------------------------------------------------------------------------
    def _ensure_notifier(self) -> None:
        with self._start_lock:
            if self._notifier.started:
                return
            callbacks = {
                self.layout.buckets[kind]: (lambda name, view=view: view.refresh_name(name))
                for kind, view in self._views.items()
            }
            try:
                self._notifier.start(callbacks, self._notification_error)
            except OSError as exc:
                raise BackendUnavailable(f"cannot watch the file store at {self.layout.root}: {exc}") from exc

    def _notification_error(self, exc: BaseException) -> None:
        log.warning("error while handling a file notification (the next rescan repairs it): %s", exc)
        self._rescanner.wake()

    # -- heartbeat --------------------------------------------------------------------------------------
    def _beat(self) -> None:
        # dict() copies atomically under the GIL, without waiting for a long API call's lock
        for instance_id, instance in dict(self._owned).items():
            path = self.layout.path_of(instance_id)
            if touch_record(path) or self._closed:
                continue
            with self._api_lock:
                if self._owned.get(instance_id) is not instance or self._closed:
                    continue  # unregistered meanwhile
                write_record(path.parent, path.name, instance_to_json(instance), create_only=True)
                log.warning("record %s was removed from the store while this client is alive; wrote it again", path)

    def _heartbeat_error(self, exc: BaseException) -> bool:
        log.error("heartbeat of the file store at %s failed: %s", self.layout.root, exc)
        return isinstance(exc, (OSError, DiscoveryError))

    # -- rescan -----------------------------------------------------------------------------------------
    def rescan(self) -> None:
        """Rescan every bucket now: publish missed changes (then Resync), delete dead records."""
        if self._notifier.started and not self._notifier.is_alive():
            log.warning("the file-store observer stopped; restarting it and resynchronising")
            self._notifier.stop()
            self._ensure_notifier()
        for kind, view in self._views.items():
            missed: list[tuple[DiscoveryEvent, DiscoveryInstance | None]] = []
            previous, current = self._suspects[kind], {}
            self._suspects[kind] = current
            scanned_at = time.monotonic()
            view.refresh(
                publish=lambda event, instance, into=missed: into.append((event, instance)),
                gate=lambda name, version, seen=previous, now=current, at=scanned_at: _confirm(
                    name, version, seen, now, at, self._notice_grace
                ),
            )
            self._feeds.publish_missed(kind, missed)
            view.warn_pending()
            removed = self._collect_garbage(view)
            if removed:
                with self._removed_lock:
                    self._removed_by_rescan.extend(removed[:MAX_REMEMBERED_REMOVALS])
                    del self._removed_by_rescan[:-MAX_REMEMBERED_REMOVALS]
        self._scan_errors = 0

    def _collect_garbage(self, view: BucketView) -> list[str]:
        removed = []
        for name, entry in view.dead(self._owned_names(view.kind)):
            path = view.directory / name
            if name.startswith("."):  # a leftover temp or hidden file: not a record
                if _still_unchanged(path, entry) and remove_record(path):
                    log.info("removed the leftover file %s: unchanged for %.1f s", path, view.dead_after)
                view.forget_leftover(name)
                continue
            if _still_unchanged(path, entry) and remove_record(path):
                log.info("removed %s/%s: no heartbeat for %.1f s", view.kind.bucket, name, view.dead_after)
                removed.append(f"{view.kind.bucket}/{decode(name)}")
            view.refresh_name(name)
        return removed

    def _rescan_error(self, exc: BaseException) -> bool:
        if isinstance(exc, OSError):
            self._scan_errors += 1
            log.warning("rescan of %s failed (%d in a row): %s", self.layout.root, self._scan_errors, exc)
            if self._scan_errors < MAX_CONSECUTIVE_SCAN_ERRORS:
                return True
        self._feeds.fail(exc)
        return isinstance(exc, OSError)

    def _owned_names(self, kind: RecordKind) -> frozenset[str]:
        return frozenset(self.layout.file_name(i) for i in dict(self._owned) if i.kind is kind)


def _confirm(
    name: str,
    version: Version | None,
    previous: dict[str, tuple[Version | None, float]],
    current: dict[str, tuple[Version | None, float]],
    now: float,
    grace: float,
) -> bool:
    """A rescan publishes a change as missed only when earlier rescans saw the same version for
    ``grace`` seconds without a notification delivering it; otherwise it waits for a later round.
    (Publishing it sooner would turn a notification that is merely slow into a Resync.)"""
    seen = previous.get(name)
    first_seen = seen[1] if seen is not None and seen[0] == version else now
    if now - first_seen >= grace:
        return True
    current[name] = (version, first_seen)
    return False


def notice_grace(observer: str, poll_interval: float) -> float:
    """Seconds a notification may take: a few polls of the polling observer (a poll of a big
    directory over the network takes long), bounded so a stalled observer still gets repaired."""
    if observer == "polling":
        return min(max(3 * poll_interval, NOTICE_GRACE), MAX_NOTICE_GRACE)
    return NOTICE_GRACE


def _still_unchanged(path: Path, entry: Entry) -> bool:
    """Re-check a dead file right before deleting it: same inode, same mtime.

    The file is re-opened and its open handle stat-ed: network filesystems revalidate attributes
    on open (NFS close-to-open) or answer fstat from the server (sshfs), not from a stale cache.
    """
    try:
        with read_open(str(path)) as opened:
            if opened is None:  # gone, or not a regular record any more
                return False
            st = opened[0]
    except OSError:  # unreadable now: not ours to judge
        return False
    return (st.st_ino, st.st_mtime_ns) == (entry.ino, entry.mtime_ns)
