"""Store locks guarding read-modify-write sequences, with a timeout and a clear error.

``hard`` locks take ``flock(2)`` on the bucket directory itself, exactly as reference workers
do before every change they make, so Python and Rust writers exclude each other. Reference
workers give up after about one second of trying and never retry, so holds must stay short.
``soft`` locks are marker files created with O_EXCL in ``root/.locks/`` (:mod:`.softlock`), for
network filesystems where flock is not shared between hosts; a marker its holder stops
refreshing is broken after ``stale_after`` seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from discovery_sync.errors import LockTimeout, ValidationError

from .directory import StoreDirectory
from .softlock import DEFAULT_STALE_AFTER, SoftLocks

LOCK_MODES = ("hard", "soft")
RETRY_INTERVAL = 0.002


class StoreLocks:
    def __init__(self, mode: str = "hard", timeout: float = 10.0, stale_after: float = DEFAULT_STALE_AFTER) -> None:
        if mode not in LOCK_MODES:
            raise ValidationError(f"lock mode {mode!r} is not valid: use one of {', '.join(LOCK_MODES)}")
        if not stale_after > 0:
            raise ValidationError(f"lock_stale must be a positive number of seconds, got {stale_after!r}")
        self.mode = mode
        self.timeout = timeout
        self.stale_after = stale_after
        self._soft_locks = SoftLocks(timeout, stale_after) if mode == "soft" else None

    def close(self) -> None:
        if self._soft_locks is not None:
            self._soft_locks.close()

    @contextlib.contextmanager
    def hold(self, bucket: StoreDirectory, lock_dir: StoreDirectory, marker: str) -> Iterator[None]:
        """Lock ``bucket`` (hard) or the marker file named ``marker`` in ``lock_dir`` (soft)."""
        if self._soft_locks is not None:
            with lock_dir.use() as dir_fd, self._soft_locks.hold(lock_dir.path / marker, dir_fd):
                yield
            return
        with bucket.use() as dir_fd, self._flock(dir_fd, bucket.path):
            yield

    @contextlib.contextmanager
    def _flock(self, dir_fd: int, directory: Path) -> Iterator[None]:
        # a descriptor of its own: flock belongs to an open file description, shared by dups
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._timeout(directory) from None
                    time.sleep(RETRY_INTERVAL)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _timeout(self, path: Path) -> LockTimeout:
        return LockTimeout(
            f"could not lock {path} within {self.timeout:g} s: another process holds it "
            "(a dead holder frees a hard lock at once)"
        )
