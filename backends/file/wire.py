"""Wire client of the file backend: record files, read and written relative to an open bucket directory.

Writes are atomic: a temp file, then a link (create-if-absent) or a rename (overwrite), so
readers never see a partial record written by this library; names starting with ``.`` are
temp files and are never records.

Every open of a store file is ``O_NONBLOCK | O_NOFOLLOW`` and is checked with ``fstat`` to be a
regular file before a byte is read: a FIFO, socket, device or symlink planted under any name
can neither block a thread nor redirect a read. Files larger than the caller's bound are never
read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from stat import S_ISREG

TEMP_PREFIX = ".tmp_"
#: dot files that outlive their purpose when something dies: temp files of a writer killed
#: mid-write, and the copies network filesystems keep of a file deleted while open
#: (libfuse's ``.fuse_hidden*``, the NFS client's ``.nfs*``)
LEFTOVER_PREFIXES = (TEMP_PREFIX, ".fuse_hidden", ".nfs")
#: reference workers remove every file whose mtime is this far behind their wall clock
REFERENCE_TTL = 10.0
#: records above this size are never read (the ``max_record_bytes`` option); etcd refuses
#: requests over 1.5 MiB, so no record of the reference comes near it
DEFAULT_MAX_RECORD_BYTES = 4 * 1024 * 1024
#: the mode of the record files this library writes, whatever the umask: readable by every
#: local user (discovery is for everyone on the host), writable by the writer only
RECORD_MODE = 0o644
READ_SIZE = 65536
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_NOT_A_FILE = (errno.ELOOP, errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP, errno.ENOTDIR, errno.EISDIR)


class RecordTooLarge(Exception):
    """A file is larger than the bound the reader set; it was not read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, more than max_record_bytes={limit}")
        self.size = size
        self.limit = limit


def unread_reason(exc: Exception) -> str:
    """Why a file was not read, for messages: too large, or the error reading it."""
    if isinstance(exc, RecordTooLarge):
        return f"too large: {exc}"
    return f"cannot be read: {getattr(exc, 'strerror', None) or exc}"


def _open(dir_fd: int | None, name: str) -> int | None:
    """A read-only descriptor of ``name``, or None when it is missing or cannot be a regular file
    (a symlink, socket, …); never blocks on the file. EACCES, EIO and the like are raised."""
    try:
        return os.open(name, OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            return None
        raise


def read_regular(dir_fd: int | None, name: str, limit: int) -> tuple[os.stat_result, bytes] | None:
    """The ``fstat`` and bytes of ``name`` in ``dir_fd``, or None when it does not exist or is not
    a regular file (symlink, FIFO, socket, device, directory). RecordTooLarge when it holds more
    than ``limit`` bytes; other errors (EACCES, EIO) are raised."""
    try:  # _open() and read_bounded() inlined for the common case: every record read takes this path
        fd = os.open(name, OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            return None
        raise
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode):
            return None
        size = st.st_size
        if size < READ_SIZE and size <= limit:  # one read of one byte more tells the end
            data = os.read(fd, size + 1)
            return st, data if len(data) <= size else _read_rest(fd, [data], len(data), limit)
        return st, read_bounded(fd, size, limit)
    finally:
        os.close(fd)


def stat_regular(dir_fd: int | None, name: str) -> os.stat_result | None:
    """``fstat`` of ``name`` opened (not ``stat``: network filesystems revalidate on open), or
    None when it does not exist or is not a regular file."""
    fd = _open(dir_fd, name)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return st if stat.S_ISREG(st.st_mode) else None


def read_bounded(fd: int, size: int, limit: int) -> bytes:
    """The bytes of an open regular file whose ``fstat`` gave ``size``; RecordTooLarge when the
    file has (or grows to) more than ``limit`` bytes."""
    if size > limit:
        raise RecordTooLarge(size, limit)
    want = size + 1  # one byte more than fstat promised: a file that grew since is read whole
    if want <= READ_SIZE:
        data = os.read(fd, want)
        if len(data) < want:  # short read of a regular file: the end (records are small)
            return data
        return _read_rest(fd, [data], len(data), limit)
    return _read_rest(fd, [], 0, limit)


def _read_rest(fd: int, chunks: list[bytes], total: int, limit: int) -> bytes:
    """``chunks`` (``total`` bytes, read already) and the rest of the file up to its end;
    RecordTooLarge once it holds more than ``limit`` bytes."""
    if total > limit:
        raise RecordTooLarge(total, limit)
    while chunk := os.read(fd, min(READ_SIZE, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise RecordTooLarge(total, limit)
    return b"".join(chunks)


def read_file(dir_fd: int | None, name: str, limit: int = DEFAULT_MAX_RECORD_BYTES) -> bytes | None:
    """The bytes of a regular file, or None when it does not exist or is not a regular file."""
    found = read_regular(dir_fd, name, limit)
    return None if found is None else found[1]


def stat_entry(dir_fd: int | None, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in ``dir_fd`` (symlinks not followed); None when it is missing."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def write_record(dir_fd: int, name: str, data: bytes, *, create_only: bool) -> int | None:
    """Write ``data`` as ``name`` in ``dir_fd`` and return the inode written. With
    ``create_only`` an existing entry is kept and None is returned; otherwise the entry is
    replaced atomically."""
    temp = f"{TEMP_PREFIX}{secrets.randbits(64):016x}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, RECORD_MODE, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # no fsync, as the reference: records are leased and die with a crashed host anyway;
            # readers never see partial content because the file is complete before it is linked
            st = os.fstat(fd)
            if stat.S_IMODE(st.st_mode) != RECORD_MODE:  # a umask took bits away (or added none)
                os.fchmod(fd, RECORD_MODE)
        finally:
            os.close(fd)
        if not create_only:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return st.st_ino
        try:
            os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return None
        except PermissionError:
            if stat_entry(dir_fd, name) is not None:  # sshfs reports a lost create race as EPERM
                return None
            raise
        return st.st_ino
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)


def remove_record(dir_fd: int, name: str) -> bool:
    """Delete the entry; False when it was already gone."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def touch_record(dir_fd: int, name: str) -> bool:
    """Set the entry's mtime to now (its heartbeat; a symlink is not followed); False when it is gone."""
    try:
        os.utime(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def touch_written(dir_fd: int, name: str, inode: int) -> bool | None:
    """Set the mtime of ``name`` to now only while it is still the file ``inode`` (a write of this
    client's): True when touched, False when the name is gone, None when another file holds it
    (it is left alone). The file is opened, checked and touched through its descriptor, so a file
    renamed over the name meanwhile is never touched."""
    fd = _open(dir_fd, name)
    if fd is None:
        return False if stat_entry(dir_fd, name) is None else None
    try:
        st = os.fstat(fd)
        if st.st_ino != inode or not S_ISREG(st.st_mode):  # an inode number is reused by any kind of file
            return None
        os.utime(fd)
        return True
    finally:
        os.close(fd)


def refresh_listing(dir_fd: int) -> None:
    """Make this host's next listing of the directory current: create and remove a temp file in it.

    A change made through a network mount invalidates that mount's cached listing of the
    directory (sshfs's dir_cache, the NFS client's directory attributes), so reads under a lock
    see what other hosts wrote just before. Readers ignore the temp name.
    """
    temp = f"{TEMP_PREFIX}{secrets.randbits(64):016x}"
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp, dir_fd=dir_fd)
