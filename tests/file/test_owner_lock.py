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
from discovery_sync.backends.file.failover import kernel_id
from discovery_sync.backends.file.owner_lock import (
    OwnerLock,
    OwnerState,
    owner_id_of,
    owner_name,
    probe_owner,
    remove_released,
)

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


def test_the_newest_writer_of_an_id_owns_the_name_and_the_older_one_cannot_take_it_back(lock_dir, tmp_path):
    process, _ = holder(tmp_path, ID)  # an older writer of the id, alive (a frozen predecessor)
    assert process.stdin is not None and process.stdout is not None
    try:
        lock = OwnerLock(lock_dir, ID)
        lock.acquire()  # the successor
        content = orjson.loads((tmp_path / ".locks" / owner_name(ID)).read_bytes())
        assert content["pid"] == os.getpid()
        process.stdin.write("\n")  # the older one releases: the name is not its file any more
        process.stdin.flush()
        assert process.stdout.readline().strip() == "released"
        process.wait(10)
        assert probe_owner(lock_dir, ID) is OwnerState.HELD
        lock.release()
        assert probe_owner(lock_dir, ID) is OwnerState.UNKNOWN
        assert os.listdir(tmp_path / ".locks") == []  # no temporary file is left
    finally:
        process.kill()
        process.wait(10)


def test_a_dead_owners_file_is_removed_and_a_live_ones_never(lock_dir, tmp_path):
    process, _ = holder(tmp_path, ID)
    try:
        assert not remove_released(lock_dir, ID)
        assert probe_owner(lock_dir, ID) is OwnerState.HELD
    finally:
        process.kill()
        process.wait(10)
    assert remove_released(lock_dir, ID)
    assert not (tmp_path / ".locks" / owner_name(ID)).exists()
    assert not remove_released(lock_dir, ID)  # gone already


def test_owner_names_are_told_from_other_names():
    assert owner_id_of(owner_name(ID)) == ID
    for name in ("owner.", "owner.12", f"{owner_name(ID)}.new.0a1b", "owner.ABCDEF0123456789", "x" + owner_name(1)):
        assert owner_id_of(name) is None


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
        assert not remove_released(lock_dir, instance_id)  # none of them is a dead owner's file
    for instance_id in (1, 2):  # the name is taken over by a rename: no FIFO is opened, no link followed
        lock = OwnerLock(lock_dir, instance_id)
        lock.acquire()
        assert probe_owner(lock_dir, instance_id) is OwnerState.HELD
        lock.release()
    assert (locks / "elsewhere").read_text() == "{}"
