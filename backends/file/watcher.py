"""Watch producer of the file backend: changed names in bucket directories, from inotify or watchdog's polling.

Every notification means only "re-read this file": the view decides what changed. inotify
(the default) serves one host: :class:`InotifyReader`, one thread that reads the kernel's events
and reports each name itself; the polling observer (watchdog's) also sees other hosts' writes on
network filesystems. Neither is trusted to be complete, so the backend's periodic rescan remains
the safety net; an inotify queue overflow is reported at once (``on_error``: a deep rescan now).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import select
import struct
import threading
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from watchdog.events import (
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

# inotify(7)
IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x8, 0x40, 0x80, 0x100, 0x200
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_DONT_FOLLOW, IN_MASK_ADD = 0x02000000, 0x20000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
#: what a bucket reports: an entry linked, renamed in or out, removed, or a file written in place closed
BUCKET_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE
CLOSE_EVENTS = IN_CLOSE_WRITE  # the owners' lock directory: an owner file closed after a write
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name, NUL-padded)
READ_SIZE = 64 * 1024  # bytes per read(2) of the inotify descriptor


class EventsLost(RuntimeError):
    """The kernel's inotify queue overflowed: changes happened that no notification reports."""


class _BucketHandler(FileSystemEventHandler):
    """The polling observer's events -> names (hidden names, temporary files, skipped)."""

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


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, with inotify(7)'s calls; OSError (ENOSYS) where there is none."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise OSError(errno.ENOSYS, "this system has no inotify: use observer=polling")
    return libc


def _checked(result: int, what: str, path: Path | None = None) -> int:
    """``result`` of a libc call, or the OSError its errno names."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", None if path is None else str(path))
    return result


def parse_events(data: bytes) -> list[tuple[int, int, bytes]]:
    """``(wd, mask, name)`` of each ``struct inotify_event`` in what one read(2) returned."""
    events = []
    offset, end = 0, len(data)
    while offset + _HEADER.size <= end:
        wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
        offset += _HEADER.size
        events.append((wd, mask, data[offset : offset + length].split(b"\0", 1)[0]))
        offset += length
    return events


class InotifyReader:
    """One inotify instance watching directories (non-recursively), and the one thread that reads
    it and calls the callbacks itself: a name is reported as soon as the kernel queues the event
    that can carry complete content, with no hand-off between threads.

    Each callback gets the names (not hidden: temporary files are skipped unread) whose events
    match its mask, in the kernel's order; events of directories are not reported. Between two
    callbacks the thread empties the kernel's queue into its own (unbounded), so a burst does not
    overflow the kernel's 16,384 events while callbacks run. An overflow, or an error raised by a
    callback, goes to ``on_error``; a directory whose watch the kernel dropped (removed,
    unmounted) makes :meth:`is_alive` false, as does the thread's end.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._fd = _checked(_libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        try:
            self._wake_r, self._wake_w = os.pipe()  # stop() wakes the thread through it
        except OSError:
            os.close(self._fd)
            raise
        self._callbacks: dict[int, list[tuple[int, Callable[[str], None]]]] = {}
        self._lock = threading.Lock()  # the descriptors' closing against stop()'s wake-up
        self._closed = False
        self._lost = False  # a watched directory's watch was dropped by the kernel
        self._thread: threading.Thread | None = None
        self._on_error: Callable[[BaseException], None] = lambda exc: None

    def watch(self, directory: Path, mask: int, on_name: Callable[[str], None]) -> None:
        """Report the names of ``directory`` whose events match ``mask`` to ``on_name``
        (before :meth:`start`); OSError when the directory cannot be watched."""
        flags = mask | IN_DONT_FOLLOW | IN_MASK_ADD  # a directory watched twice keeps both masks
        path = os.fsencode(directory)
        wd = _checked(_libc().inotify_add_watch(self._fd, path, flags), "inotify_add_watch", directory)
        self._callbacks.setdefault(wd, []).append((mask, on_name))

    def start(self, on_error: Callable[[BaseException], None]) -> None:
        """Start the thread; a crash of it is logged and told to ``on_error``."""
        self._on_error = on_error
        thread = threading.Thread(target=guarded(self._run, on_error), name=self.name, daemon=True)
        thread.start()
        self._thread = thread

    def is_alive(self) -> bool:
        """The thread runs and every directory is still watched."""
        return self._thread is not None and self._thread.is_alive() and not self._lost

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (at most ``timeout`` seconds) and close the inotify instance."""
        with self._lock:
            if not self._closed:
                os.write(self._wake_w, b"!")
        thread = self._thread
        if thread is None:
            self._close()
        elif thread is not threading.current_thread():
            thread.join(timeout)

    def _close(self) -> None:
        """Close the descriptors once (the thread's last act, or stop() of a thread never started)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for fd in (self._fd, self._wake_r, self._wake_w):
                    os.close(fd)

    def _run(self) -> None:
        """Wait for events, take every one the kernel holds, report them in order; after each
        callback, take what came meanwhile. Ends when :meth:`stop` writes to the wake pipe."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        pending: deque[tuple[int, int, bytes]] = deque()
        try:
            while True:
                if any(fd == self._wake_r for fd, _ in poller.poll()):
                    return
                self._drain(pending)
                while pending:
                    if self._deliver(*pending.popleft()):
                        self._drain(pending)
        finally:
            self._close()

    def _drain(self, pending: deque[tuple[int, int, bytes]]) -> None:
        """Move every event the kernel holds now to ``pending`` (hidden names left out)."""
        while True:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                return
            pending.extend(e for e in parse_events(data) if not e[2].startswith(b"."))

    def _deliver(self, wd: int, mask: int, name: bytes) -> bool:
        """Report one event; True when a callback ran (time passed: more may have come)."""
        if mask & IN_Q_OVERFLOW:
            self._on_error(EventsLost("the kernel's inotify queue overflowed: file notifications were lost"))
            return True
        if mask & IN_IGNORED:
            if self._callbacks.pop(wd, None) is not None:
                self._lost = True
            return False
        if not name or mask & IN_ISDIR:
            return False
        ran = False
        for wanted, on_name in self._callbacks.get(wd, ()):
            if mask & wanted:
                ran = True
                try:
                    on_name(os.fsdecode(name))
                except Exception as exc:  # one name's failure: the next rescan repairs it
                    self._on_error(exc)
        return ran


class DirectoryNotifier:
    """Watches several directories (non-recursively) and reports changed file names: with
    ``kind`` "inotify" an :class:`InotifyReader`, with "polling" watchdog's polling observer
    (every ``poll_interval`` seconds)."""

    def __init__(self, kind: str = "inotify", poll_interval: float = 0.5) -> None:
        if kind not in OBSERVER_KINDS:
            raise ValidationError(f"observer {kind!r} is not valid: use one of {', '.join(OBSERVER_KINDS)}")
        self.kind = kind
        self.poll_interval = poll_interval
        self._observer: BaseObserver | None = None
        self._reader: InotifyReader | None = None

    def start(
        self,
        directories: Mapping[Path, Callable[[str], None]],
        on_error: Callable[[BaseException], None],
        closes: Mapping[Path, Callable[[str], None]] | None = None,
    ) -> None:
        """Watch ``directories`` (name -> callback); ``closes``: directories whose files' closes
        after a write alone are reported (inotify only: the polling observer sees no close).
        A bucket's name is reported when it is created, linked or renamed in (the writers' way:
        complete content at once), renamed out or removed, and closed after a write in place
        (what its creation showed may have been half-written: the view never serves that and
        re-reads it then); attribute changes (heartbeat touches) and bare writes are not.
        OSError when a directory cannot be watched."""
        if self.kind == "inotify":
            self._reader = self._start_reader(directories, on_error, closes or {})
            return
        from watchdog.observers.polling import PollingObserver

        observer = PollingObserver(timeout=self.poll_interval)
        wanted = [FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileModifiedEvent]
        for directory, on_name in directories.items():
            observer.schedule(_BucketHandler(on_name, on_error), str(directory), recursive=False, event_filter=wanted)
        observer.name = "discovery-sync-file-polling"
        observer.daemon = True
        for index, emitter in enumerate(observer.emitters):  # created by schedule(), started by start()
            emitter.name = f"discovery-sync-file-polling-emitter-{index}"
            _guard(emitter, on_error)
        _guard(observer, on_error)
        try:
            observer.start()
        except BaseException:
            observer.stop()
            raise
        self._observer = observer

    @staticmethod
    def _start_reader(
        directories: Mapping[Path, Callable[[str], None]],
        on_error: Callable[[BaseException], None],
        closes: Mapping[Path, Callable[[str], None]],
    ) -> InotifyReader:
        """An :class:`InotifyReader` of ``directories`` and ``closes``, started."""
        reader = InotifyReader("discovery-sync-file-inotify")
        try:
            for directory, on_name in directories.items():
                reader.watch(directory, BUCKET_EVENTS, on_name)
            for directory, on_name in closes.items():
                reader.watch(directory, CLOSE_EVENTS, on_name)
            reader.start(on_error)
        except BaseException:
            reader.stop()
            raise
        return reader

    def is_alive(self) -> bool:
        """Every directory is still watched and every thread runs (false: restart it)."""
        if self._reader is not None:
            return self._reader.is_alive()
        if self._observer is None:
            return False
        return self._observer.is_alive() and all(e.is_alive() for e in self._observer.emitters)

    @property
    def started(self) -> bool:
        return self._observer is not None or self._reader is not None

    def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.stop()
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
