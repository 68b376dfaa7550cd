"""Store locks guarding read-modify-write sequences, with a timeout and a clear error.

``hard`` locks take ``flock(2)`` on the bucket directory itself, exactly as reference workers
do before every change they make, so Python and Rust writers exclude each other. Reference
workers give up after about one second of trying and never retry, so holds must stay short.
``soft`` locks are ``filelock.SoftFileLock`` marker files (O_EXCL) in ``root/.locks/``, for
network filesystems where flock is not shared between hosts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from discovery_sync.errors import LockTimeout, ValidationError

LOCK_MODES = ("hard", "soft")
RETRY_INTERVAL = 0.002


class StoreLocks:
    def __init__(self, mode: str = "hard", timeout: float = 10.0) -> None:
        if mode not in LOCK_MODES:
            raise ValidationError(f"lock mode {mode!r} is not valid: use one of {', '.join(LOCK_MODES)}")
        self.mode = mode
        self.timeout = timeout

    def hold(self, directory: Path, marker: Path) -> contextlib.AbstractContextManager[None]:
        """Lock the bucket ``directory`` (hard) or the marker file ``marker`` (soft)."""
        return self._flock(directory) if self.mode == "hard" else self._soft(marker)

    @contextlib.contextmanager
    def _flock(self, directory: Path) -> Iterator[None]:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
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

    @contextlib.contextmanager
    def _soft(self, marker: Path) -> Iterator[None]:
        lock = filelock.SoftFileLock(str(marker), timeout=self.timeout, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise self._timeout(marker) from None
        try:
            yield
        finally:
            lock.release()

    def _timeout(self, path: Path) -> LockTimeout:
        return LockTimeout(
            f"could not lock {path} within {self.timeout:g} s: another process holds it. "
            "A dead holder frees a hard lock at once; a soft lock marker of a dead holder must be removed"
        )
