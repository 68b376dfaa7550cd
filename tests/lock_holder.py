"""A process that takes one soft lock and holds it until told (or killed): ``python -m tests.lock_holder MARKER STALE``.

It prints ``held`` once the lock is taken, releases it when a line arrives on stdin, prints
``released`` and exits.
"""

from __future__ import annotations

import sys
from pathlib import Path

from discovery_sync.backends.file.softlock import SoftLocks


def main() -> None:
    marker, stale = Path(sys.argv[1]), float(sys.argv[2])
    locks = SoftLocks(timeout=60, stale_after=stale)
    held = locks.acquire(marker)
    print("held", flush=True)
    sys.stdin.readline()
    locks.release(held)
    locks.close()
    print("released", flush=True)


if __name__ == "__main__":
    main()
