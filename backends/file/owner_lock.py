"""Liveness from the kernel, on a store whose clients share one kernel (``lock=hard``): owner locks.

A writing client holds, for its whole life, an exclusive ``flock`` on an owner file of its own,
``root/.locks/owner.{instance id:016x}`` (outside the record buckets), opened for writing. The
kernel releases the lock the instant the process dies, ``kill -9`` included, and its close of a
file opened for writing reaches inotify (``IN_CLOSE_WRITE``) at every reader of the store. A
reader that tries the lock without blocking (:func:`probe_owner`) then knows, rather than
guesses from mtimes, whether the owner is alive:

- **held**: some process holds it: the owner is alive, whatever its files' mtimes say (a clock
  step, a takeover or a stray ``touch`` cannot make it dead);
- **released**: no process holds it: the owner is dead;
- **unknown**: there is no owner file, it is not a regular file, or it names another kernel or
  device than the reader's (a client of another host of a network store, a reference worker):
  the mtime rule decides.

The file's content (JSON) names the kernel (its boot id) and the device the lock was taken on,
the process and the instance id; a lock is trusted only on the same kernel and device, as the
failover lock's markers are (:mod:`.failover`). A forked child must not keep its parent alive:
the descriptor is opened close-on-exec and closed in every child at fork
(``os.register_at_fork``), since a ``flock`` belongs to the open file, which a child shares.
:meth:`OwnerLock.release` (at ``shutdown()``, after the records are gone) removes the file and
drops the lock.

A reader's probe holds a shared lock for the few microseconds between its attempt and its
release: an owner taking its lock at that very moment tries again (:data:`ACQUIRE_TRIES`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import logging
import os
import socket
import stat
import threading
import time
import weakref

import orjson

from .directory import StoreDirectory
from .failover import kernel_id

log = logging.getLogger("discovery_sync.backends.file")

OWNER_PREFIX = "owner."
#: bytes of an owner file read at most (its JSON is about 150 bytes)
MAX_OWNER_BYTES = 4096
#: attempts to take one's own lock while a reader's probe may hold it for a moment, 5 ms apart
ACQUIRE_TRIES = 20
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


def owner_name(instance_id: int) -> str:
    """The owner file's name of the writer whose instance id is ``instance_id``."""
    return f"{OWNER_PREFIX}{instance_id:016x}"


class OwnerState(str, enum.Enum):
    """What a reader's probe of an owner file found (see the module docstring)."""

    HELD = "held"
    RELEASED = "released"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class OwnerLockRefused(OSError):
    """The owner file is locked by another live process (a client with the same instance id)."""


# every lock held by this process, closed in each child at fork
_HELD: weakref.WeakSet[OwnerLock] = weakref.WeakSet()


def _close_in_child() -> None:
    for lock in list(_HELD):
        lock._forget_in_child()


os.register_at_fork(after_in_child=_close_in_child)


class OwnerLock:
    """The owner lock of the writer ``instance_id`` in the store's lock directory ``lock_dir``."""

    def __init__(self, lock_dir: StoreDirectory, instance_id: int) -> None:
        self.lock_dir = lock_dir
        self.instance_id = instance_id
        self.name = owner_name(instance_id)
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None  # the file's device and inode
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Create (or take over) the owner file and lock it for the life of this client.
        OwnerLockRefused when another live process holds it; OSError when the store refuses."""
        with self._lock:
            if self._fd is not None:
                return
            with self.lock_dir.use() as dir_fd:
                fd = os.open(self.name, _WRITE_FLAGS, 0o644, dir_fd=dir_fd)
                try:
                    status = os.fstat(fd)
                    if not stat.S_ISREG(status.st_mode):
                        raise OwnerLockRefused(errno.EEXIST, f"{self.lock_dir.path / self.name} is not a regular file")
                    _lock_exclusively(fd, self.lock_dir.path / self.name)
                    _write_content(fd, self.instance_id, status.st_dev)
                except BaseException:
                    os.close(fd)
                    raise
            self._fd, self._ident = fd, (status.st_dev, status.st_ino)
            _HELD.add(self)

    def release(self) -> None:
        """Remove the owner file (if it still is this lock's) and drop the lock. Idempotent."""
        with self._lock:
            fd, self._fd = self._fd, None
            _HELD.discard(self)
            if fd is None:
                return
            try:
                with self.lock_dir.use() as dir_fd:
                    status = os.stat(self.name, dir_fd=dir_fd, follow_symlinks=False)
                    if (status.st_dev, status.st_ino) == self._ident:
                        os.unlink(self.name, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    log.warning("could not remove the owner file %s: %s", self.lock_dir.path / self.name, exc)
            finally:
                os.close(fd)

    def _forget_in_child(self) -> None:
        """In a forked child: close the descriptor (the parent's lock stays the parent's alone)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock = threading.Lock()  # another thread of the parent may have held it at fork


def _lock_exclusively(fd: int, path: object) -> None:
    """``flock(LOCK_EX)`` without blocking, tried again for a while (a reader's probe holds a
    shared lock for microseconds); OwnerLockRefused when another process keeps it."""
    for attempt in range(ACQUIRE_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt + 1 < ACQUIRE_TRIES:
                time.sleep(0.005)  # a reader's probe: let it end
    raise OwnerLockRefused(errno.EWOULDBLOCK, f"{path} is locked by another live process with this instance id")


def _write_content(fd: int, instance_id: int, device: int) -> None:
    content = {
        "instance_id": f"{instance_id:016x}",
        "kernel": kernel_id(),
        "device": device,
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    data = orjson.dumps(content) + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def probe_owner(lock_dir: StoreDirectory, instance_id: int) -> OwnerState:
    """Whether the writer ``instance_id`` is alive, as the kernel knows it (see the module
    docstring). Never blocks: a FIFO, a symlink or a file of another kernel is UNKNOWN."""
    kernel = kernel_id()
    if kernel is None:
        return OwnerState.UNKNOWN
    try:
        with lock_dir.use() as dir_fd:
            fd = os.open(owner_name(instance_id), _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return OwnerState.UNKNOWN  # none, a symlink, a FIFO without a writer...
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or not _names_this_kernel(fd, kernel, status.st_dev):
            return OwnerState.UNKNOWN
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return OwnerState.HELD
        except OSError:
            return OwnerState.UNKNOWN
        fcntl.flock(fd, fcntl.LOCK_UN)
        return OwnerState.RELEASED
    finally:
        os.close(fd)


def _names_this_kernel(fd: int, kernel: str, device: int) -> bool:
    """Whether the owner file's content says its lock was taken on this kernel and device."""
    try:
        content = orjson.loads(os.pread(fd, MAX_OWNER_BYTES, 0))
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(content, dict) and content.get("kernel") == kernel and content.get("device") == device
