"""Store locks guarding read-modify-write sequences, with a timeout and a clear error.

``hard`` locks are ``filelock.FileLock`` (fcntl/flock: per host); ``soft`` locks are
``filelock.SoftFileLock`` (an O_EXCL marker file), which also works where flock is not shared
between hosts, such as NFS or sshfs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import filelock

from discovery_sync.errors import LockTimeout, ValidationError

LOCK_MODES = ("hard", "soft")


class StoreLocks:
    def __init__(self, mode: str = "hard", timeout: float = 10.0) -> None:
        if mode not in LOCK_MODES:
            raise ValidationError(f"lock mode {mode!r} is not valid: use one of {', '.join(LOCK_MODES)}")
        self.mode = mode
        self.timeout = timeout
        self._factory = filelock.SoftFileLock if mode == "soft" else filelock.FileLock

    @contextlib.contextmanager
    def hold(self, path: Path, what: str) -> Iterator[None]:
        lock = self._factory(str(path), timeout=self.timeout, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise LockTimeout(
                f"could not lock {what} within {self.timeout:g} s ({path}); another process holds it. "
                "If its holder died, the lock frees itself (hard locks) or must be removed by hand (soft locks)"
            ) from None
        try:
            yield
        finally:
            lock.release()
