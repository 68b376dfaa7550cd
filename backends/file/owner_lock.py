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
- **vacant**: no process holds it and it was a failover cohort's (its content says so): the
  member that held it is dead, but the logical id is meant to outlive its members, so the
  mtime rule decides, which gives a standby the TTL to take the records over in place;
- **unknown**: there is no owner file, it is not a regular file, or it names another kernel or
  device than the reader's (a client of another host of a network store, a reference worker):
  the mtime rule decides.

A lock speaks only for records of its own user: a reader applies a probe to a record only when
the owner file's uid is the record file's (:class:`OwnerProbe`), so another user of a shared
store can neither keep a dead writer's records alive nor make a live one's dead by planting an
owner file under its name.

The file's content (JSON) names the kernel (its boot id) and the device the lock was taken on,
the process and the instance id; a lock is trusted only on the same kernel and device, as the
failover lock's markers are (:mod:`.failover`). A forked child must not keep its parent alive:
the descriptor is opened close-on-exec and closed in every child at fork
(``os.register_at_fork``), since a ``flock`` belongs to the open file, which a child shares.

**Taking the name.** :meth:`OwnerLock.acquire` writes and locks a file of its own under a
temporary name, then renames it over the owner name: the newest writer of an instance id owns
the name, whatever an older one (a frozen predecessor of a cohort, an earlier process of the same
id) still holds. The older one keeps its lock on a file no name leads to any more, so readers,
who probe by name, see only the newest. A reader never sees the name on a file not yet locked.
:meth:`OwnerLock.release` (at ``shutdown()``, after the records are gone) removes the name if it
still leads to its file, and drops the lock. :func:`remove_released` lets the reader that swept a
dead owner's records remove its file.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import logging
import os
import secrets
import socket
import stat
import threading
import weakref
from typing import NamedTuple

import orjson

from .directory import DirectoryClosed, StoreDirectory
from .failover import kernel_id

log = logging.getLogger("discovery_sync.backends.file")

OWNER_PREFIX = "owner."
#: bytes of an owner file read at most (its JSON is about 150 bytes)
MAX_OWNER_BYTES = 4096
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


def owner_name(instance_id: int) -> str:
    """The owner file's name of the writer whose instance id is ``instance_id``."""
    return f"{OWNER_PREFIX}{instance_id:016x}"


class OwnerState(str, enum.Enum):
    """What a reader's probe of an owner file found (see the module docstring)."""

    HELD = "held"
    RELEASED = "released"
    VACANT = "vacant"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class OwnerProbe(NamedTuple):
    """A probe's answer: the lock's ``state`` and the owner file's ``uid`` (None: no file)."""

    state: OwnerState
    uid: int | None = None


_UNKNOWN = OwnerProbe(OwnerState.UNKNOWN)


# every lock held by this process, closed in each child at fork
_HELD: weakref.WeakSet[OwnerLock] = weakref.WeakSet()


def _close_in_child() -> None:
    for lock in list(_HELD):
        lock._forget_in_child()


os.register_at_fork(after_in_child=_close_in_child)


class OwnerLock:
    """The owner lock of the writer ``instance_id`` in the store's lock directory ``lock_dir``."""

    def __init__(self, lock_dir: StoreDirectory, instance_id: int, *, cohort: bool = False) -> None:
        """``cohort``: ``instance_id`` is a failover cohort's logical id (its release is vacant)."""
        self.lock_dir = lock_dir
        self.instance_id = instance_id
        self.cohort = cohort
        self.name = owner_name(instance_id)
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None  # the file's device and inode
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Write and lock a file of this client, then rename it over the owner name (see the
        module docstring); the lock lives until :meth:`release` or the process's end. OSError
        when the store refuses (the caller goes on without: the mtime rule then decides)."""
        with self._lock:
            if self._fd is not None:
                return
            temporary = f"{self.name}.new.{secrets.token_hex(6)}"
            with self.lock_dir.use() as dir_fd:
                fd = os.open(temporary, _WRITE_FLAGS | os.O_EXCL, 0o644, dir_fd=dir_fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file nobody else knows: never contended
                    status = os.fstat(fd)
                    _write_content(fd, self.instance_id, status.st_dev, self.cohort)
                    os.rename(temporary, self.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(temporary, dir_fd=dir_fd)
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


def _write_content(fd: int, instance_id: int, device: int, cohort: bool) -> None:
    content = {
        "instance_id": f"{instance_id:016x}",
        "cohort": cohort,
        "kernel": kernel_id(),
        "device": device,
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    data = orjson.dumps(content) + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def probe_owner(lock_dir: StoreDirectory, instance_id: int) -> OwnerState:
    """Whether the writer ``instance_id`` is alive, as the kernel knows it: :func:`probe_owner_file`'s state."""
    return probe_owner_file(lock_dir, instance_id).state


def probe_owner_file(lock_dir: StoreDirectory, instance_id: int) -> OwnerProbe:
    """Whether the writer ``instance_id`` is alive, as the kernel knows it (see the module
    docstring), and whose file says so. Never blocks: a FIFO, a symlink or a file of another
    kernel is UNKNOWN."""
    try:
        with lock_dir.use() as dir_fd:
            opened = _open_owner_file(dir_fd, instance_id)
    except DirectoryClosed:
        return _UNKNOWN  # a closed client
    if opened is None:
        return _UNKNOWN
    fd, status, content = opened
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return OwnerProbe(OwnerState.HELD, status.st_uid)
        except OSError:
            return _UNKNOWN
        fcntl.flock(fd, fcntl.LOCK_UN)
        return OwnerProbe(OwnerState.VACANT if content.get("cohort") is True else OwnerState.RELEASED, status.st_uid)
    finally:
        os.close(fd)


def _open_owner_file(dir_fd: int, instance_id: int) -> tuple[int, os.stat_result, dict[str, object]] | None:
    """The owner file of ``instance_id`` opened read-only (never blocking, no symlink followed),
    its stat and content, when it is a regular file whose content names this kernel and device;
    else None (none, a symlink, a FIFO, junk, another kernel's). The caller closes the descriptor."""
    kernel = kernel_id()
    if kernel is None:
        return None
    try:
        fd = os.open(owner_name(instance_id), _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        content = _content_of_this_kernel(fd, kernel, status.st_dev) if stat.S_ISREG(status.st_mode) else None
    except OSError:
        content = None
    if content is None:
        os.close(fd)
        return None
    return fd, status, content


def _content_of_this_kernel(fd: int, kernel: str, device: int) -> dict[str, object] | None:
    """The owner file's content, if it says its lock was taken on this kernel and device."""
    try:
        content = orjson.loads(os.pread(fd, MAX_OWNER_BYTES, 0))
    except (OSError, orjson.JSONDecodeError):
        return None
    if isinstance(content, dict) and content.get("kernel") == kernel and content.get("device") == device:
        return content
    return None


def owner_id_of(name: str) -> int | None:
    """The instance id an owner file's name stands for (None: not an owner file's name)."""
    digits = name[len(OWNER_PREFIX) :] if name.startswith(OWNER_PREFIX) else ""
    if len(digits) != 16 or digits.strip("0123456789abcdef"):
        return None
    return int(digits, 16)


def remove_released(lock_dir: StoreDirectory, instance_id: int) -> bool:
    """Remove the owner file of ``instance_id`` if no process holds its lock (its owner is dead
    and its records were swept); True when removed. The lock is taken while the file is removed,
    and only the file locked is removed: a new owner's file renamed over the name meanwhile
    stays (a rename between the check and the unlink, microseconds, would lose the new owner's
    name, and its readers would fall back on the mtime rule)."""
    if not lock_dir.is_open:
        return False
    with lock_dir.use() as dir_fd:
        opened = _open_owner_file(dir_fd, instance_id)
        if opened is None:
            return False
        fd, status, _ = opened
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # held again: a new owner
            now = os.stat(owner_name(instance_id), dir_fd=dir_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (status.st_dev, status.st_ino):
                return False
            os.unlink(owner_name(instance_id), dir_fd=dir_fd)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
