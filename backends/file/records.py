"""Atomic record files: write a temp file, then link (create-if-absent) or rename (overwrite).

Readers therefore never see a partial record written by this library; names starting with
``.`` are temp files and are never records.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

TEMP_PREFIX = ".tmp_"
#: dot files that outlive their purpose when something dies: temp files of a writer killed
#: mid-write, and the copies network filesystems keep of a file deleted while open
#: (libfuse's ``.fuse_hidden*``, the NFS client's ``.nfs*``)
LEFTOVER_PREFIXES = (TEMP_PREFIX, ".fuse_hidden", ".nfs")
#: reference workers remove every file whose mtime is this far behind their wall clock
REFERENCE_TTL = 10.0
READ_SIZE = 65536


def write_record(directory: Path, name: str, data: bytes, *, create_only: bool) -> bool:
    """Write ``data`` as ``directory/name``. With ``create_only`` an existing file is kept and
    False is returned; otherwise the file is replaced atomically. True when written."""
    temp = directory / f"{TEMP_PREFIX}{secrets.randbits(64):016x}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # no fsync, as the reference: records are leased and die with a crashed host anyway;
            # readers never see partial content because the file is complete before it is linked
        finally:
            os.close(fd)
        target = directory / name
        if not create_only:
            os.replace(temp, target)
            return True
        try:
            os.link(temp, target)
        except FileExistsError:
            return False
        except PermissionError:
            if os.path.lexists(target):  # sshfs reports a lost create race as EPERM
                return False
            raise
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def read_record(path: Path | str) -> bytes | None:
    """The file's bytes, or None when it does not exist (or is not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, IsADirectoryError):
        return None
    try:
        return _read_all(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def read_open(path: str) -> Iterator[tuple[os.stat_result, Callable[[], bytes | None]] | None]:
    """Open a record: its stat and a function reading its bytes, or None when it does not exist
    or is not a regular file (symlinks are not followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        yield None
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink is never a record
            yield None
            return
        raise
    try:
        st = os.fstat(fd)
        yield ((st, lambda: _read_all(fd)) if stat.S_ISREG(st.st_mode) else None)
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes | None:
    try:
        data = os.read(fd, READ_SIZE)
        if len(data) < READ_SIZE:  # records are small: one read is the whole file
            return data
        chunks = [data]
        while chunk := os.read(fd, READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            return None
        raise


def remove_record(path: Path | str) -> bool:
    """Delete the file; False when it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def touch_record(path: Path | str) -> bool:
    """Set the file's mtime to now (its heartbeat); False when the file is gone."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def refresh_listing(directory: Path) -> None:
    """Make this host's next listing of ``directory`` current: create and remove a temp file in it.

    A change made through a network mount invalidates that mount's cached listing of the
    directory (sshfs's dir_cache, the NFS client's directory attributes), so reads under a lock
    see what other hosts wrote just before. Readers ignore the temp name.
    """
    temp = directory / f"{TEMP_PREFIX}{secrets.randbits(64):016x}"
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
