"""A writer's owner lock held by a process of its own, until it is told to let go (or killed).

``python -m tests.owner_holder ROOT INSTANCE_ID [--fork]`` takes the owner lock of ``INSTANCE_ID``
(hex) in ``ROOT/.locks`` (:mod:`discovery_sync.backends.file.owner_lock`); with ``--fork`` it then
forks a child that lives on (it waits on stdin) and prints its pid. It prints ``held [CHILD PID]``,
releases the lock when a line arrives on stdin, prints ``released`` and exits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from discovery_sync.backends.file.directory import StoreDirectory
from discovery_sync.backends.file.owner_lock import OwnerLock


def main() -> None:
    root, instance_id = Path(sys.argv[1]), int(sys.argv[2], 16)
    lock_dir = StoreDirectory(root, ".locks")
    lock_dir.open(create=True)
    lock = OwnerLock(lock_dir, instance_id)
    lock.acquire()
    child = ""
    if "--fork" in sys.argv[3:]:
        ready, told = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child lives on; its fork hooks have run once fork() returned here
            os.write(told, b"!")
            sys.stdin.readline()
            os._exit(0)
        os.read(ready, 1)  # the child runs: whatever it keeps of its parent's, it keeps now
        child = f" {pid}"
    print(f"held{child}", flush=True)
    sys.stdin.readline()
    lock.release()
    print("released", flush=True)


if __name__ == "__main__":
    main()
