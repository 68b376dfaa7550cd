"""Soft locks for network filesystems, where flock is not shared between hosts: marker files.

A lock is held by creating its marker: the marker's whole content is written to a file of the
acquisition's own beside it, which is then hard-linked to the marker's name (``link(2)`` fails
when the name exists: atomic on the file server, NFS and SFTP alike, as ``O_EXCL`` is), and the
file of its own removed. So no client of ours ever leaves an empty or partial marker, even when
the disk is full; an attempt that fails leaves nothing. The marker says who holds it — host,
pid, wall time of acquisition (for people reading it), a token unique to the acquisition — and a
refresh counter. While a lock is held, the owner's refresher thread rewrites the marker every
``stale_after / 4`` seconds: a new file renamed over it, or, when the filesystem has no room for
a new file (ENOSPC, EDQUOT), the marker's own bytes overwritten in place.

A waiter judges a marker on its own monotonic clock, never by comparing times written by another
host: a marker whose bytes have not changed for ``stale_after`` seconds of the waiter's clock
belongs to a dead (or hung) holder and is broken with a warning (an empty or unreadable one, as
other tools or older clients leave, too: it names an unknown holder). Breaking renames the marker
to a name of the waiter's own, checks that what it renamed is what it judged stale, and deletes
it; had the marker changed meanwhile (refreshed, or released and taken again), it is put back.

Markers are of fixed length so that a host whose attribute cache keeps an old size still reads
the bytes the server has now. Given the lock directory's descriptor, every marker operation is
relative to it (a lock directory swapped for a symlink redirects nothing), and a marker is read
only when it is a regular file of bounded size (a FIFO planted as a marker blocks nobody).

:class:`SoftLocks` raises the operating system's errors (:class:`.locks.StoreLocks` turns them
into ``BackendUnavailable``), except that a release never raises: a marker it cannot remove is
logged, and broken by waiters once stale.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from stat import S_ISREG

import orjson

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import LockTimeout
from discovery_sync.retry import Retry
from discovery_sync.threads import log_retry, start_thread

from .oserrors import NO_ROOM, storage_error
from .wire import RecordTooLarge, read_file, stat_entry

log = logging.getLogger("discovery_sync.backends.file")

DEFAULT_STALE_AFTER = 10.0
RETRY_START, RETRY_MAX = 0.001, 0.05
REFRESHER_THREAD = "discovery-sync-file-lock-refresh"
MARKER_SIZE = 256
MAX_REFUSALS = 5  # EPERMs in a row, with no marker to explain them, before a create counts as refused


class _Held:
    """One acquisition: its marker (a path, or a name in ``dir_fd``) and token, when it was
    taken and how often refreshed."""

    def __init__(self, marker: Path, dir_fd: int | None, token: str, acquired: float) -> None:
        self.marker = marker
        self.dir_fd = dir_fd
        self.token = token
        self.acquired = acquired
        self.refreshes = 0


def marker_bytes(token: str, refreshes: int, acquired: float, extra: Mapping[str, object] | None = None) -> bytes:
    """The marker's content, padded to :data:`MARKER_SIZE` bytes (``extra``: more fields, after
    the token, for locks that say more about their holder)."""
    holder = {"host": socket.gethostname()[:64], "pid": os.getpid(), "acquired": round(acquired, 3)}
    data = orjson.dumps({"refreshes": refreshes, **holder, "token": token, **(extra or {})})
    return data.ljust(MARKER_SIZE - 1) + b"\n"


def describe_holder(content: bytes | None) -> str:
    """``host … pid … since …`` from a marker's content, for messages."""
    try:
        data = orjson.loads(content or b"")
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(data["acquired"])))
        return f"host {data['host']} pid {data['pid']} (since {since} by its clock)"
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError):
        return "an unknown holder (unreadable marker)"


def _token_of(content: bytes | None) -> str | None:
    try:
        token: str | None = orjson.loads(content or b"").get("token")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return token


def _where(marker: Path, dir_fd: int | None) -> str:
    """The name to pass with ``dir_fd`` (the whole path without one)."""
    return str(marker) if dir_fd is None else marker.name


def _read(marker: Path, dir_fd: int | None) -> bytes | None:
    """The marker's bytes; None when it is missing. Anything but a regular file of marker size
    reads as garbage (so it looks held by an unknown holder and is broken once stale)."""
    try:
        content = read_file(dir_fd, _where(marker, dir_fd), 4 * MARKER_SIZE)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, RecordTooLarge) as exc:
        return f"unreadable: {exc}".encode()
    return b"not a regular file" if content is None and _exists(marker, dir_fd) else content


def _exists(marker: Path, dir_fd: int | None) -> bool:
    return stat_entry(dir_fd, _where(marker, dir_fd)) is not None


def _own_file(marker: Path, dir_fd: int | None, token: str) -> str:
    """The name (as :func:`_where`) of the file of the acquisition ``token`` beside ``marker``."""
    return _where(marker.with_name(f".{marker.name}.{token}.tmp"), dir_fd)


def _write_whole(name: str, dir_fd: int | None, content: bytes) -> None:
    """Write ``content`` as the whole of the file ``name`` (created or truncated); on any error
    the file is removed, so a full disk leaves no empty or partial one behind."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise


class SoftLocks:
    """Marker-file locks of one client, with the thread that keeps its held markers fresh.

    :param timeout: seconds an acquisition waits before :class:`LockTimeout`.
    :param stale_after: seconds (of the waiter's clock) an unchanged marker is respected.
    :param clock: the clock of every judgement and wait (the timeout, staleness, the refresher's
        interval) and of the acquisition time written in markers.
    """

    def __init__(self, timeout: float, stale_after: float = DEFAULT_STALE_AFTER, *, clock: Clock = SYSTEM) -> None:
        if not stale_after > 0:
            raise ValueError("stale_after must be positive")
        self.timeout = timeout
        self.stale_after = stale_after
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._held_lock = threading.Lock()
        self._wake = threading.Event()  # ends the refresher's wait (set by close())
        self._closed = False
        self._refresher: threading.Thread | None = None
        self.broken = 0  # markers this client broke

    @contextlib.contextmanager
    def hold(self, marker: Path, dir_fd: int | None = None) -> Iterator[None]:
        """Hold the lock ``marker`` for the body of the ``with``; with ``dir_fd`` (the lock
        directory, open for as long as the hold) the marker is ``marker.name`` in it."""
        held = self.acquire(marker, dir_fd)
        try:
            yield
        finally:
            self.release(held)

    def acquire(self, marker: Path, dir_fd: int | None = None) -> _Held:
        token = secrets.token_hex(16)
        retry = Retry(RETRY_START, RETRY_MAX, jitter=0, timeout=self.timeout, clock=self.clock)
        seen: bytes | None = None
        seen_since = 0.0
        refused = 0
        while True:
            acquired = self.clock.time()
            try:
                created = self._try_create(marker, dir_fd, token, acquired)
            except PermissionError:
                # sshfs answers a lost O_EXCL race with EPERM, and the winner may have released the
                # lock before we look: a refusal is taken for a permission problem only when it repeats
                refused += 1
                if refused >= MAX_REFUSALS:
                    raise
                continue
            refused = 0
            if created:
                held = _Held(marker, dir_fd, token, acquired)
                self._track(held)
                return held
            content = _read(marker, dir_fd)
            if _token_of(content) == token:  # our link was made but its reply lost (NFS): ours
                held = _Held(marker, dir_fd, token, acquired)
                self._track(held)
                return held
            now = self.clock.monotonic()
            if content is None or content != seen:
                seen, seen_since = content, now
            elif now - seen_since >= self.stale_after:
                self._break(marker, dir_fd, content)
                seen = None
                continue
            if not retry.wait():  # polling: a marker on another host gives no notice
                raise LockTimeout(
                    f"could not lock {marker} within {self.timeout:g} s: it is held by {describe_holder(content)}. "
                    f"A holder that stops refreshing it is overruled after {self.stale_after:g} s"
                )

    def release(self, held: _Held) -> None:
        with self._held_lock:  # not while the refresher rewrites it: that would bring it back
            self._held.pop(held.token, None)
            content = _read(held.marker, held.dir_fd)
            if _token_of(content) == held.token:
                try:
                    os.unlink(_where(held.marker, held.dir_fd), dir_fd=held.dir_fd)
                except FileNotFoundError:
                    pass
                except OSError as exc:  # what ran under the lock is done: failing it now would lie
                    log.error(
                        "%s; other writers wait for it to go stale (%g s) and then break it",
                        storage_error(exc, f"cannot remove the soft lock {held.marker} on release"),
                        self.stale_after,
                    )
                return
        log.warning(
            "the soft lock %s was broken while this process held it (now held by %s): a hold outlasted "
            "the stale bound of %g s",
            held.marker,
            describe_holder(content) if content else "nobody",
            self.stale_after,
        )

    def close(self) -> None:
        """Stop the refresher thread (held locks are the caller's to release)."""
        with self._held_lock:
            self._closed = True
        self._wake.set()
        thread = self._refresher
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    # -- internals ----------------------------------------------------------------------------------
    def _try_create(self, marker: Path, dir_fd: int | None, token: str, acquired: float) -> bool:
        """Link a complete marker into place; False when a marker exists. Leaves nothing behind
        when it fails (a full disk fails the write of the file of our own, never the marker)."""
        own = _own_file(marker, dir_fd, token)
        _write_whole(own, dir_fd, marker_bytes(token, 0, acquired))
        try:
            os.link(own, _where(marker, dir_fd), src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except PermissionError:
            # sshfs can answer a lost create race with EPERM instead of EEXIST
            if _exists(marker, dir_fd):
                return False
            raise
        finally:
            # a failure here must not undo a link made: the file of our own is then a mere leftover
            with contextlib.suppress(OSError):
                os.unlink(own, dir_fd=dir_fd)
        return True

    def _break(self, marker: Path, dir_fd: int | None, stale: bytes) -> None:
        if set_aside(marker, dir_fd, lambda aside: _read(aside, dir_fd) == stale, "soft lock"):
            log.warning(
                "broke the soft lock %s held by %s: its marker did not change for %g s (a dead or hung holder)",
                marker,
                describe_holder(stale),
                self.stale_after,
            )
            self.broken += 1

    def _track(self, held: _Held) -> None:
        with self._held_lock:
            self._held[held.token] = held
            if self._refresher is None and not self._closed:
                self._refresher = start_thread(REFRESHER_THREAD, self._refresh_loop, self._refresher_died, start=False)
                self.clock.enroll(self._refresher)  # it waits only through the clock between rounds
                self._refresher.start()

    def _refresh_loop(self) -> None:
        interval = self.stale_after / 4
        while True:
            self.clock.wait(self._wake, interval)
            self._wake.clear()  # close() sets it after _closed, which is checked next
            with self._held_lock:  # release() cannot interleave with a rewrite
                if self._closed:
                    return
                for held in list(self._held.values()):
                    try:
                        self._refresh(held)
                    except Exception as exc:  # the next round tries again; a waiter may break it meanwhile
                        log_retry(f"refreshing the soft lock {held.marker}", exc, interval)

    def _refresher_died(self, exc: BaseException) -> None:
        # markers no longer refreshed are broken by waiters after stale_after: say so once more
        log.error("soft locks held by this process are no longer refreshed and may be broken by other hosts")

    def _refresh(self, held: _Held) -> None:
        """Rewrite a held marker (the caller holds ``_held_lock``, so release() cannot interleave).

        The marker is replaced whole by a rename, so a reader never sees it partial; when the
        filesystem has no room for the new file, its own bytes are overwritten instead (see
        :meth:`_overwrite`). A rewrite that fails leaves the marker as it was and nothing beside it.
        """
        if _token_of(_read(held.marker, held.dir_fd)) != held.token:
            return  # broken: release() reports it
        held.refreshes += 1
        content = marker_bytes(held.token, held.refreshes, held.acquired)
        own = _own_file(held.marker, held.dir_fd, held.token)
        try:
            _write_whole(own, held.dir_fd, content)
            os.replace(own, _where(held.marker, held.dir_fd), src_dir_fd=held.dir_fd, dst_dir_fd=held.dir_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(own, dir_fd=held.dir_fd)
            if exc.errno in NO_ROOM:
                with contextlib.suppress(OSError):
                    if self._overwrite(held, content):
                        return
            raise storage_error(exc, f"cannot refresh the soft lock {held.marker}") from exc

    @staticmethod
    def _overwrite(held: _Held, content: bytes) -> bool:
        """:func:`overwrite_marker` of a held marker."""
        return overwrite_marker(held.marker, held.dir_fd, held.token, content)


def set_aside(
    marker: Path, dir_fd: int | None, judged: Callable[[Path], bool], what: str, label: str = "broken"
) -> bool:
    """Remove ``marker`` if it is the one its caller judged: True when it was removed.

    The marker is renamed to a name of our own (``.{marker}.{label}-{random}``), then
    ``judged(aside)`` looks at what was renamed: when it says yes the file is deleted; when not
    (the marker was refreshed, or released and taken again, since it was judged) it is put back
    under its name. So a marker that changed hands is never deleted, only moved aside for a
    moment; ``what`` names the lock in the error logged when it cannot be put back (a new marker
    was made meanwhile).
    """
    aside = marker.with_name(f".{marker.name}.{label}-{secrets.token_hex(8)}")
    names = (_where(marker, dir_fd), _where(aside, dir_fd))
    try:
        os.rename(*names, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        return False  # released (or broken by another waiter) meanwhile
    if judged(aside):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(names[1], dir_fd=dir_fd)
        return True
    try:  # it was refreshed or taken again just now: put it back
        os.link(names[1], names[0], src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.EPERM):
            raise
        log.error("the %s %s changed hands while it was being broken; two holders may overlap", what, marker)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(names[1], dir_fd=dir_fd)
    return False


def overwrite_marker(marker: Path, dir_fd: int | None, token: str, content: bytes) -> bool:
    """Write ``content`` over the bytes of the marker of the acquisition ``token``, through a
    descriptor on which the marker was checked to be ours and of the same length; False when it
    is not (FileNotFoundError when it is gone).

    A marker is one write within one block (MARKER_SIZE is below any block size) already
    allocated: it needs no new space (copy-on-write filesystems excepted, where it fails like any
    write) and is not cut short. The descriptor is closed at the end, which sends the write to a
    network file server (close-to-open).
    """
    flags = os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    fd = os.open(_where(marker, dir_fd), flags, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode) or st.st_size != len(content):
            return False
        if _token_of(os.pread(fd, len(content) + 1, 0)) != token:
            return False
        written = 0
        while written < len(content):
            written += os.pwrite(fd, content[written:], written)
    finally:
        os.close(fd)
    return True
