"""A process that takes a file store's failover lock, for tests of what other processes see.

``python -m tests.failover_holder ROOT NAME MODE STALE`` takes the failover lock ``NAME`` of the
store at ``ROOT`` (``MODE`` hard or soft, ``STALE`` its stale_after) and prints ``held``. When it
learns it lost the lock, its ``on_lost`` callback prints ``lost thread=… held=… wait_lost=…``.
A line ``release`` on stdin (or the end of stdin) releases it: it prints ``released held=…`` and
exits. Its log (warnings) goes to stderr.

``python -m tests.failover_holder ROOT NAME MODE STALE --cycles N INSIDE`` takes and releases
the lock ``N`` times, once a line arrives on stdin (it prints ``ready`` first); each time it
holds it, it creates the file ``INSIDE`` with ``O_EXCL`` (so two holders at once make the second
fail), waits a little and removes it. It prints ``done``, or ``overlap`` and exits with status 1
when another holder was inside.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

from discovery_sync.backends.file.directory import StoreDirectory
from discovery_sync.backends.file.failover import FileFailoverLock

from discovery_sync.failover import FailoverLock

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def hold(lock: FileFailoverLock) -> None:
    def lost(which: FailoverLock) -> None:
        say(f"lost thread={threading.current_thread().name} held={which.held} wait_lost={which.wait_lost(0)}")

    lock.on_lost(lost)
    lock.acquire()
    say("held")
    for line in sys.stdin:
        if line.strip() == "release":
            break
    lock.release()
    say(f"released held={lock.held}")


def cycle(lock: FileFailoverLock, cycles: int, inside: Path) -> int:
    say("ready")
    sys.stdin.readline()  # "go": every process starts at once
    for _ in range(cycles):
        with lock:
            try:
                fd = os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                say("overlap")
                return 1
            os.close(fd)
            time.sleep(0.005)  # widen the window another holder would need
            os.unlink(inside)
        time.sleep(0.01)  # let the others in (a releasing holder would otherwise win every time)
    say("done")
    return 0


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
    root, name, mode, stale = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    lock_dir = StoreDirectory(root, ".locks")
    lock_dir.open(create=True)
    lock = FileFailoverLock(name, lock_dir, mode=mode, stale_after=stale, store_root=root)
    try:
        if len(sys.argv) > 5 and sys.argv[5] == "--cycles":
            return cycle(lock, int(sys.argv[6]), Path(sys.argv[7]))
        hold(lock)
        return 0
    finally:
        lock.close()
        lock_dir.close()


if __name__ == "__main__":
    sys.exit(main())
