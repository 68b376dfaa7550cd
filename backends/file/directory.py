"""A directory of the store (a bucket, or the soft-lock directory), held open by descriptor.

Nothing below the store root is ever followed through a symlink: each directory is opened one
component at a time from the root with ``O_DIRECTORY | O_NOFOLLOW``, and every read, stat,
write and unlink of its files is done relative to that descriptor (``dir_fd=``). A bucket
swapped for a symlink after it was opened therefore cannot redirect a read or a deletion: the
descriptor still names the directory that was checked. The root itself may be a symlink the
user chose.

The path stays the truth, though: :meth:`StoreDirectory.revalidate` (every scan) reopens it and
follows a directory that was replaced by another real directory (a store removed and created
again), and refuses one replaced by a symlink. Descriptors are reference-counted, so one a
thread is using is never closed under it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from discovery_sync.errors import BackendUnavailable

log = logging.getLogger("discovery_sync.backends.file")

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: the mode of the directories this library creates, whatever the umask: every local user can
#: list the store, only its creator can change it (see shared_child_mode for shared stores)
DIRECTORY_MODE = 0o755


class SymlinkRefused(BackendUnavailable):
    """A directory below the store root is a symlink (or not a directory at all)."""


class DirectoryClosed(BackendUnavailable):
    """A store directory that is not open (closed, or never opened: a read-only client's
    bucket that does not exist) was used."""


def shared_child_mode(parent: os.stat_result) -> int | None:
    """The mode a new directory gets below ``parent``: the parent's own permission bits when it
    is a deliberately shared directory (group- or world-writable with the sticky bit, as an
    administrator sets up a store for several users), else None (use DIRECTORY_MODE)."""
    mode = stat.S_IMODE(parent.st_mode)
    if mode & stat.S_ISVTX and mode & (stat.S_IWGRP | stat.S_IWOTH):
        return mode
    return None


def _open_child(parent_fd: int, name: str, display: Path, *, create: bool) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise SymlinkRefused(
            f"{display} is {what}: the file store never follows symlinks below its root (a symlinked "
            "bucket could make clients read or delete files elsewhere); replace it with a real directory, "
            "or point the store URL at the real location"
        ) from None
    mode = shared_child_mode(os.fstat(parent_fd)) or DIRECTORY_MODE
    with contextlib.suppress(FileExistsError):  # another client created it meanwhile
        os.mkdir(name, mode, dir_fd=parent_fd)
        child = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        try:
            if stat.S_IMODE(os.fstat(child).st_mode) != mode:  # the umask took bits away
                os.fchmod(child, mode)
        finally:
            os.close(child)
    return _open_child(parent_fd, name, display, create=False)


def open_root(root: Path, *, create: bool) -> int:
    """Open the store root (a symlink the user chose is followed), creating it if asked."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise
    root.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, DIRECTORY_MODE)
        os.chmod(root, DIRECTORY_MODE)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_below(root: Path, relative: str, *, create: bool = False) -> int:
    """Open ``root/relative`` without following a symlink below ``root``; SymlinkRefused when a
    component is a symlink, FileNotFoundError when one is missing (unless ``create``)."""
    fd = open_root(root, create=create)
    display = root
    try:
        for part in relative.split("/"):
            display = display / part
            child = _open_child(fd, part, display, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def listing(dir_fd: int) -> Iterator[Iterator[os.DirEntry[str]]]:
    """``os.scandir`` of an open directory through a descriptor of its own.

    ``os.scandir(fd)`` reads through a duplicate of ``fd``, which shares its read position:
    two threads listing one directory that way would each see part of it.
    """
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            yield entries
    finally:
        os.close(fd)


class _Handle:
    __slots__ = ("fd", "identity", "retired", "users")

    def __init__(self, fd: int) -> None:
        st = os.fstat(fd)
        self.fd = fd
        self.identity = (st.st_dev, st.st_ino)
        self.users = 0
        self.retired = False


class StoreDirectory:
    """One directory of the store: ``root/relative``, held open, never through a symlink.

    Use :meth:`use` to get its descriptor for a sequence of operations. All methods are
    thread-safe.
    """

    def __init__(self, root: Path, relative: str) -> None:
        self.root = root
        self.relative = relative
        self.path = root / relative
        self._lock = threading.Lock()
        self._handle: _Handle | None = None

    @property
    def is_open(self) -> bool:
        """Whether the directory is open (it may have been removed since: see :meth:`revalidate`)."""
        return self._handle is not None

    def open(self, *, create: bool) -> None:
        """Open (and with ``create`` make) the directory; SymlinkRefused, or OSError."""
        handle = _Handle(open_below(self.root, self.relative, create=create))
        self._swap(handle)

    @contextlib.contextmanager
    def use(self) -> Iterator[int]:
        """The directory's descriptor, valid for the body of the ``with``."""
        with self._lock:
            handle = self._handle
            if handle is None:
                raise DirectoryClosed(f"the store directory {self.path} is not open")
            handle.users += 1
        try:
            yield handle.fd
        finally:
            with self._lock:
                handle.users -= 1
                if handle.retired and handle.users == 0:
                    os.close(handle.fd)

    def revalidate(self) -> bool:
        """Reopen the path: True when it now names another directory (which is used from now on).
        SymlinkRefused when it became a symlink, FileNotFoundError when it is gone."""
        fd = open_below(self.root, self.relative)
        handle = _Handle(fd)
        current = self._handle
        if current is not None and current.identity == handle.identity:
            os.close(fd)
            return False
        if current is not None:
            log.warning("the store directory %s was replaced by another directory; following the new one", self.path)
        self._swap(handle)
        return current is not None

    def close(self) -> None:
        self._swap(None)

    def _swap(self, handle: _Handle | None) -> None:
        with self._lock:
            old, self._handle = self._handle, handle
            if old is not None:
                old.retired = True
                if old.users == 0:
                    os.close(old.fd)
