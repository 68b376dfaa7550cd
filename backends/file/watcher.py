"""Watch producer of the file backend: watchdog observers report changed names in bucket directories.

Every notification means only "re-read this file": the view decides what changed. inotify
(the default) serves one host; the polling observer also sees other hosts' writes on network
filesystems. Neither is trusted to be complete — watchdog drops inotify queue overflows — so
the backend's periodic rescan remains the safety net.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from discovery_sync.errors import BackendUnavailable, DiscoveryError, ValidationError
from discovery_sync.identity import RecordKind
from discovery_sync.threads import guarded

from .directory import StoreDirectory

log = logging.getLogger("discovery_sync.backends.file")

OBSERVER_KINDS = ("inotify", "polling")


class _BucketHandler(FileSystemEventHandler):
    def __init__(self, on_name: Callable[[str], None], on_error: Callable[[BaseException], None]) -> None:
        self._on_name = on_name
        self._on_error = on_error

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            for path in (event.src_path, getattr(event, "dest_path", "")):
                if path:
                    name = os.path.basename(os.fsdecode(path))
                    if name and not name.startswith("."):
                        self._on_name(name)
        except Exception as exc:  # never let an error kill watchdog's dispatch thread silently
            self._on_error(exc)


def _guard(thread: threading.Thread, on_crash: Callable[[BaseException], None]) -> None:
    """Make an exception ending one of watchdog's threads (not started yet) take our one path
    (:mod:`discovery_sync.threads`): logged with the thread's name, then ``on_crash``, which makes
    the next rescan restart the observer. Only this object is wrapped, not watchdog's classes."""
    thread.run = guarded(thread.run, on_crash)  # type: ignore[method-assign]


def _name_reader_thread(emitter: threading.Thread, name: str) -> None:
    """Name the thread that watchdog 6 (what Python 3.10 gets) starts per inotify emitter to read
    events; it creates it in the emitter's ``on_thread_start``, which runs inside ``start()``
    before the emitter's own thread exists. Later watchdogs read in the observer's thread."""
    start = getattr(emitter, "on_thread_start", None)
    if start is None:
        return

    def on_thread_start() -> None:
        start()
        reader = getattr(emitter, "_inotify", None)
        if isinstance(reader, threading.Thread):
            reader.name = name

    emitter.on_thread_start = on_thread_start  # type: ignore[attr-defined]


DISPATCHER_WAIT = 5.0  # seconds a new inotify reader may take to start its dispatcher thread


def _name_dispatcher(reader: threading.Thread, name: str) -> None:
    """Name the thread to which watchdog 7's inotify reader hands what it reads: the reader
    starts it first thing in its ``run()``, already under way when the observer's ``schedule()``
    returns, so it is found (by its target) once it exists, waiting at most DISPATCHER_WAIT.
    Older watchdogs have no such thread."""
    target = getattr(reader, "_dispatch_raw_buffers", None)
    if target is None:
        return
    deadline = time.monotonic() + DISPATCHER_WAIT
    while True:
        for thread in threading.enumerate():
            if getattr(thread, "_target", None) == target:
                thread.name = name
                return
        if not reader.is_alive() or time.monotonic() > deadline:
            return
        time.sleep(0.001)  # only while a new reader starts: microseconds


class DirectoryNotifier:
    """Watches several directories (non-recursively) and reports changed file names."""

    def __init__(self, kind: str = "inotify", poll_interval: float = 0.5) -> None:
        if kind not in OBSERVER_KINDS:
            raise ValidationError(f"observer {kind!r} is not valid: use one of {', '.join(OBSERVER_KINDS)}")
        self.kind = kind
        self.poll_interval = poll_interval
        self._observer: BaseObserver | None = None

    def start(
        self,
        directories: Mapping[Path, Callable[[str], None]],
        on_error: Callable[[BaseException], None],
        closes: Mapping[Path, Callable[[str], None]] | None = None,
    ) -> None:
        """Watch ``directories`` (name -> callback); ``closes``: directories whose files' closes
        after a write alone are reported (inotify only: the polling observer sees no close)."""
        observer = self._make_observer()
        if self.kind == "inotify":
            # attribute changes (heartbeat touches) and bare modifications of half-written files are skipped
            wanted = [FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent]
        else:
            wanted = [FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileModifiedEvent]
        for directory, on_name in directories.items():
            observer.schedule(_BucketHandler(on_name, on_error), str(directory), recursive=False, event_filter=wanted)
        for directory, on_name in (closes or {}).items() if self.kind == "inotify" else ():
            handler = _BucketHandler(on_name, on_error)
            observer.schedule(handler, str(directory), recursive=False, event_filter=[FileClosedEvent])
        observer.name = f"discovery-sync-file-{self.kind}"
        observer.daemon = True
        for index, emitter in enumerate(observer.emitters):  # created by schedule(), started by start()
            emitter.name = f"discovery-sync-file-{self.kind}-emitter-{index}"
            _guard(emitter, on_error)
            _name_reader_thread(emitter, f"discovery-sync-file-inotify-buffer-{index}")
        _guard(observer, on_error)
        # watchdog's inotify observer starts a reader thread of its own when it is created
        reader = getattr(observer, "_inotify_fd", None)
        if isinstance(reader, threading.Thread):
            reader.name = "discovery-sync-file-inotify-reader"
        try:
            observer.start()
        except BaseException:
            observer.stop()  # also stops that reader thread
            raise
        if isinstance(reader, threading.Thread):
            _name_dispatcher(reader, "discovery-sync-file-inotify-dispatcher")
        self._observer = observer

    def _make_observer(self) -> BaseObserver:
        if self.kind == "polling":
            from watchdog.observers.polling import PollingObserver

            return PollingObserver(timeout=self.poll_interval)
        from watchdog.observers.inotify import InotifyObserver

        return InotifyObserver()

    def is_alive(self) -> bool:
        if self._observer is None:
            return False
        reader = getattr(self._observer, "_inotify_fd", None)  # watchdog 7: one reader per observer
        if isinstance(reader, threading.Thread) and not reader.is_alive():
            return False
        return self._observer.is_alive() and all(e.is_alive() for e in self._observer.emitters)

    @property
    def started(self) -> bool:
        return self._observer is not None

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(5.0)


class StoreWatcher:
    """The notifier of one client's store: which buckets it watches. Started with the first watch
    (:meth:`ensure`) on every bucket; a read-only client watches the buckets that exist and
    :meth:`follow`-s them as they appear or go away. ``on_name(kind, name)``: a file of a bucket
    changed; ``on_error``: a notification could not be handled (the next rescan repairs it)."""

    def __init__(
        self,
        notifier: DirectoryNotifier,
        root: Path,
        buckets: Mapping[RecordKind, StoreDirectory],
        on_name: Callable[[RecordKind, str], None],
        on_error: Callable[[BaseException], None],
        *,
        read_only: bool,
        owners: tuple[Path, Callable[[str], None]] | None = None,
    ) -> None:
        """``owners``: the lock directory and what to tell when an owner file there is closed
        after a write (:mod:`.owners`)."""
        self.notifier = notifier
        self.root = root
        self._buckets = buckets
        self._on_name = on_name
        self._on_error = on_error
        self._read_only = read_only
        self._owners = owners
        self._lock = threading.Lock()
        self._watched: frozenset[RecordKind] = frozenset()
        self.restarts = 0  # of a notifier that stopped (metrics)

    def ensure(self) -> None:
        """Start the notifier, unless it runs."""
        with self._lock:
            if not self.notifier.started:
                self._start(self._present() if self._read_only else frozenset(self._buckets))

    def restart_if_dead(self) -> bool:
        """Restart a notifier that stopped (True: restarted; what it did not deliver meanwhile is
        the caller's to rescan)."""
        if not self.notifier.started or self.notifier.is_alive():
            return False
        log.warning("the file-store observer stopped; restarting it and resynchronising")
        self.notifier.stop()
        self.ensure()
        self.restarts += 1
        return True

    def follow(self) -> bool:
        """Read-only clients, every rescan: watch the buckets that exist now. True when buckets
        appeared or went away and the notifier was restarted on the new set: the caller rescans
        every bucket at once, publishing what it finds as ordinary events (Added, Removed), so
        records written before the watch on a new bucket began reach the watches, no Resync."""
        with self._lock:
            if not self.notifier.started:
                return False  # nothing watches: list() and get() look for themselves
            present = self._present()
            if present == self._watched:
                return False
            log.info(
                "the read-only client of %s now watches %s",
                self.root,
                ", ".join(sorted(kind.bucket for kind in present)) or "no bucket (none exists)",
            )
            self.notifier.stop()
            self._start(present)
            return True

    def _start(self, kinds: frozenset[RecordKind]) -> None:
        """Start the notifier on the buckets of ``kinds`` (with the lock held)."""
        callbacks = {self._buckets[kind].path: partial(self._on_name, kind) for kind in kinds}
        closes = {self._owners[0]: self._owners[1]} if self._owners is not None and self._owners[0].is_dir() else {}
        try:
            self.notifier.start(callbacks, self._on_error, closes)
        except OSError as exc:
            raise BackendUnavailable(f"cannot watch the file store at {self.root}: {exc}") from exc
        self._watched = kinds

    def _present(self) -> frozenset[RecordKind]:
        """Read-only clients: the buckets that exist now (opened; a missing one is closed). A
        bucket that cannot be judged now (unreadable, a symlink) keeps its place: the scan of it
        reports the problem."""
        present = set(self._watched)
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
