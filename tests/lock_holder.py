"""A process that takes one lock and holds it until told (or killed).

``python -m tests.lock_holder MARKER STALE`` takes the soft lock ``MARKER``;
``python -m tests.lock_holder --flock DIRECTORY`` takes ``flock(LOCK_EX)`` on ``DIRECTORY``, as a
reference worker does before a change. It prints ``held`` once the lock is taken, releases it
when a line arrives on stdin, prints ``released`` and exits.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from discovery_sync.backends.file.softlock import SoftLocks


def hold_soft(marker: Path, stale: float) -> None:
    locks = SoftLocks(timeout=60, stale_after=stale)
    held = locks.acquire(marker)
    print("held", flush=True)
    sys.stdin.readline()
    locks.release(held)
    locks.close()


def hold_flock(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        sys.stdin.readline()
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def main() -> None:
    if sys.argv[1] == "--flock":
        hold_flock(Path(sys.argv[2]))
    else:
        hold_soft(Path(sys.argv[1]), float(sys.argv[2]))
    print("released", flush=True)


if __name__ == "__main__":
    main()
