"""Owner locks (docs/design.md §6): a writer's flock on ``.locks/owner.{id}``, which the kernel
releases the instant its process dies, and the reader's probe that never blocks. Real processes,
real ``kill -9`` and a real ``fork``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from discovery_sync.backends.file.failover import kernel_id
from discovery_sync.backends.file.owner_lock import OwnerLock, OwnerLockRefused, OwnerState, owner_name, probe_owner

ID = 0x1234ABCD


def holder(root: Path, instance_id: int, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """A process holding the owner lock of ``instance_id``; what it printed once it held it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.owner_holder", str(root), f"{instance_id:x}", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("held"), line
    return process, line


def test_a_held_lock_is_held_and_a_killed_holder_releases_it_at_once(lock_dir, tmp_path):
    process, _ = holder(tmp_path, ID)
    try:
        assert probe_owner(lock_dir, ID) is OwnerState.HELD
        content = orjson.loads((tmp_path / ".locks" / owner_name(ID)).read_bytes())
        assert content["kernel"] == kernel_id() and content["pid"] == process.pid
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        assert probe_owner(lock_dir, ID) is OwnerState.RELEASED  # the file stays: the kernel dropped the lock
    finally:
        process.kill()


def test_a_forked_child_does_not_keep_its_dead_parent_alive(lock_dir, tmp_path):
    process, line = holder(tmp_path, ID, "--fork")
    child = int(line.split()[1])
    try:
        assert probe_owner(lock_dir, ID) is OwnerState.HELD
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        os.kill(child, 0)  # the child lives on
        assert probe_owner(lock_dir, ID) is OwnerState.RELEASED
    finally:
        process.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_release_removes_the_file_and_the_lock(lock_dir, tmp_path):
    process, _ = holder(tmp_path, ID)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("\n")
    process.stdin.flush()
    assert process.stdout.readline().strip() == "released"
    process.wait(10)
    assert not (tmp_path / ".locks" / owner_name(ID)).exists()
    assert probe_owner(lock_dir, ID) is OwnerState.UNKNOWN


def test_a_second_writer_with_the_same_id_is_refused_while_the_first_lives(lock_dir, tmp_path):
    process, _ = holder(tmp_path, ID)
    try:
        with pytest.raises(OwnerLockRefused, match="locked by another live process"):
            OwnerLock(lock_dir, ID).acquire()
    finally:
        process.kill()
        process.wait(10)
    lock = OwnerLock(lock_dir, ID)  # its file left behind by the killed one is taken over
    lock.acquire()
    assert probe_owner(lock_dir, ID) is OwnerState.HELD
    lock.release()


def test_what_others_plant_under_an_owner_name_is_unknown_and_never_blocks(lock_dir, tmp_path):
    locks = tmp_path / ".locks"
    os.mkfifo(locks / owner_name(1))
    (locks / "elsewhere").write_text("{}")
    (locks / owner_name(2)).symlink_to(locks / "elsewhere")
    other_kernel = {"kernel": "0123456789abcdef", "device": os.stat(locks).st_dev, "pid": 1}
    (locks / owner_name(3)).write_bytes(orjson.dumps(other_kernel))
    (locks / owner_name(4)).write_bytes(b"\xff" * 10_000)
    for instance_id in (1, 2, 3, 4, 5):
        assert probe_owner(lock_dir, instance_id) is OwnerState.UNKNOWN
    with pytest.raises(OSError):
        OwnerLock(lock_dir, 1).acquire()  # a FIFO: refused at once, not waited on
    with pytest.raises(OSError):
        OwnerLock(lock_dir, 2).acquire()  # a symlink is never followed
