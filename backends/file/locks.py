"""Store locks guarding read-modify-write sequences, with a timeout and a clear error.

``hard`` locks take ``flock(2)`` on the bucket directory itself, exactly as reference workers
do before every change they make, so Python and Rust writers exclude each other. The lock is
taken with ``filelock.lock_descriptor`` on a descriptor of our own: we open the bucket directory
relative to the store's directory descriptor (``O_RDONLY | O_DIRECTORY | O_CLOEXEC``, so no
path is resolved again and no symlink followed), and filelock only locks and unlocks that
descriptor. The deadline is ours: non-blocking attempts every ``RETRY_INTERVAL`` until
``timeout``, then :class:`LockTimeout`, naming the holder where this host can know it (Linux
lists flock holders in ``/proc/locks`` by pid and device:inode). Reference workers give up after
about one second of trying and never retry, so holds must stay short.

``soft`` locks are marker files created atomically (written whole, then linked into place) in
``root/.locks/`` (:mod:`.softlock`), for network filesystems where flock is not shared between
hosts; a marker its holder stops refreshing is broken after ``stale_after`` seconds. They are not
filelock's soft locks: see docs/decisions.md.

A lock that cannot be taken for another reason than a holder (a full disk, a read-only
filesystem, …) is a ``BackendUnavailable`` saying so (:func:`.oserrors.storage_error`), and
leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from filelock import lock_descriptor, unlock_descriptor

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import LockTimeout, ValidationError
from discovery_sync.retry import Retry

from .directory import StoreDirectory
from .oserrors import storage_error
from .softlock import DEFAULT_STALE_AFTER, SoftLocks
from .wire import refresh_listing

LOCK_MODES = ("hard", "soft")
RETRY_INTERVAL = 0.002
PROC_LOCKS = Path("/proc/locks")


class StoreLocks:
    """The store's locks in ``mode`` (``hard`` or ``soft``), waited for up to ``timeout`` seconds of
    ``clock``, which also judges soft markers (stale after ``stale_after`` seconds) and stamps them."""

    def __init__(
        self,
        mode: str = "hard",
        timeout: float = 10.0,
        stale_after: float = DEFAULT_STALE_AFTER,
        *,
        clock: Clock = SYSTEM,
    ) -> None:
        if mode not in LOCK_MODES:
            raise ValidationError(f"lock mode {mode!r} is not valid: use one of {', '.join(LOCK_MODES)}")
        if not stale_after > 0:
            raise ValidationError(f"lock_stale must be a positive number of seconds, got {stale_after!r}")
        self.mode = mode
        self.timeout = timeout
        self.stale_after = stale_after
        self.clock = clock
        self._soft_locks = SoftLocks(timeout, stale_after, clock=clock) if mode == "soft" else None

    @classmethod
    def of_store(cls, mode: str, timeout: float | None, stale_after: float, *, clock: Clock = SYSTEM) -> StoreLocks:
        """A client's store locks; ``timeout`` None: 10 s for hard locks, ``3 * stale_after`` for
        soft ones (a waiter outlives a dead holder's marker)."""
        if timeout is None:
            timeout = 3 * stale_after if mode == "soft" else 10.0
        return cls(mode, timeout, stale_after, clock=clock)

    def close(self) -> None:
        if self._soft_locks is not None:
            self._soft_locks.close()

    @contextlib.contextmanager
    def hold(self, bucket: StoreDirectory, lock_dir: StoreDirectory, marker: str) -> Iterator[None]:
        """Lock ``bucket`` (hard) or the marker file named ``marker`` in ``lock_dir`` (soft; then the
        bucket's listing is refreshed under the lock: a network mount's may be stale)."""
        if self._soft_locks is not None:
            path = lock_dir.path / marker
            with lock_dir.use() as dir_fd:
                try:
                    held = self._soft_locks.acquire(path, dir_fd)
                except OSError as exc:  # not the body's errors: those are the caller's
                    raise storage_error(exc, f"cannot take the soft lock {path}") from exc
                try:
                    _refresh(bucket)
                    yield
                finally:
                    self._soft_locks.release(held)
            return
        with bucket.use() as dir_fd, self._flock(dir_fd, bucket.path):
            yield

    @contextlib.contextmanager
    def _flock(self, dir_fd: int, directory: Path) -> Iterator[None]:
        # a descriptor of its own: flock belongs to an open file description, shared by dups
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            retry = Retry(RETRY_INTERVAL, RETRY_INTERVAL, jitter=0, timeout=self.timeout, clock=self.clock)
            while not lock_descriptor(fd, blocking=False):
                if not retry.wait():  # polling: flock(2) has no timeout of its own
                    raise self._timeout(directory, fd)
            try:
                yield
            finally:
                unlock_descriptor(fd)
        finally:
            os.close(fd)

    def _timeout(self, path: Path, fd: int) -> LockTimeout:
        return LockTimeout(
            f"could not lock {path} within {self.timeout:g} s: {describe_flock_holders(fd)}; "
            "a dead holder frees a hard lock at once"
        )


def describe_flock_holders(fd: int) -> str:
    """Who holds a flock on the file open as ``fd``, as far as this host can tell, for messages."""
    try:
        status = os.fstat(fd)
        text = PROC_LOCKS.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        return f"another process holds it (its holder is unknown: /proc/locks is unreadable: {exc.strerror})"
    pids = flock_holders(text, status.st_dev, status.st_ino)
    if not pids:
        return (
            "another process holds it (its holder is unknown: /proc/locks lists no flock on it here, so it "
            "is held from another host or by a process in a pid namespace this one cannot see, or was "
            "released meanwhile)"
        )
    return "it is held by " + ", ".join(_describe_pid(pid) for pid in pids)


def flock_holders(proc_locks: str, device: int, inode: int) -> list[int]:
    """The pids holding ``flock`` locks on ``device``/``inode`` in ``/proc/locks`` text (waiters,
    the ``->`` lines, are left out). A pid of 0 is a holder this pid namespace cannot see."""
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    pids = []
    for line in proc_locks.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5497251 0 EOF"; a waiter has "->" after the number
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != wanted:
            continue
        with contextlib.suppress(ValueError):
            pids.append(int(fields[4]))
    return pids


def _describe_pid(pid: int) -> str:
    if pid <= 0:
        return "a process whose pid is not visible here (another pid namespace, or a holder whose pid has exited)"
    try:
        name = Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return f"pid {pid} (its name is unknown: it has exited or is not visible)"
    return f"pid {pid} ({name}{', this process' if pid == os.getpid() else ''})"


def _refresh(bucket: StoreDirectory) -> None:
    """Refresh the mount's cached listing of ``bucket`` (:func:`.wire.refresh_listing`)."""
    try:
        with bucket.use() as dir_fd:
            refresh_listing(dir_fd)
    except OSError as exc:
        raise storage_error(exc, f"cannot refresh the listing of {bucket.path} under its lock") from exc
