"""A small real disk for one test: a tmpfs of its own, made full or read-only on demand (this suite
runs as root, as CI does; a mount that fails fails the test)."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def keep_locks_apart(store: Path) -> None:
    """Mount a small tmpfs of its own at ``store/.locks``. A live writer of a store with hard locks
    holds its owner file there open for writing (docs/design.md §6), and the kernel refuses to
    remount a filesystem read-only while a file on it is open for writing (EBUSY); only its own
    remount on errors (``errors=remount-ro``) does not ask. A test that turns a store read-only
    under a live writer keeps the lock directory apart, as that remount leaves it usable."""
    locks = store / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(locks)], check=True, capture_output=True
    )


class SmallDisk:
    """A tmpfs mounted for one test (1 MiB, 256 inodes), made full or read-only on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = path / "store"
        self.filler = path / "filler"

    def mount(self) -> None:
        self.path.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=256,mode=0755", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
        )
        self.filler.mkdir()

    def unmount(self) -> None:
        subprocess.run(["umount", "--lazy", str(self.path)], check=True, capture_output=True)  # and what is below

    def keep_locks_apart(self) -> None:
        """:func:`keep_locks_apart` for the store of this disk."""
        keep_locks_apart(self.store)

    def fill(self, what: str) -> None:
        """Leave no free ``space`` (every page taken) or no free ``inodes`` on the disk."""
        if what == "space":
            with open(self.filler / "space", "wb", buffering=0) as filler, pytest.raises(OSError) as full:
                while True:
                    filler.write(b"\0" * 65536)
        else:
            with pytest.raises(OSError) as full:
                for number in range(100_000):
                    (self.filler / f"inode-{number}").touch()
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(OSError, match="No space left"):  # not even one byte fits in a new file
            (self.path / "one-byte").write_bytes(b"x")
        (self.path / "one-byte").unlink(missing_ok=True)

    def free(self) -> None:
        for path in self.filler.iterdir():
            path.unlink()

    def read_only(self, on: bool) -> None:
        subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.path)], check=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    small = SmallDisk(tmp_path / "disk")
    small.mount()
    try:
        yield small
    finally:
        small.unmount()


class BindMount:
    """``source`` bind-mounted at ``path``: the mount at ``path`` is made read-only and writable
    again while ``source`` stays writable (another host's view of the same files, a hand that
    deletes files through it). Made by :func:`bind_mounted`; the store's lock directory,
    ``source/store/.locks``, is a mount of its own (:func:`keep_locks_apart`), bound with it."""

    def __init__(self, tmp_path: Path) -> None:
        self.source, self.path = tmp_path / "source", tmp_path / "mount"

    def read_only(self, on: bool) -> None:
        subprocess.run(["mount", "-o", f"remount,bind,{'ro' if on else 'rw'}", str(self.path)], check=True)


@contextlib.contextmanager
def bind_mounted(mount: BindMount) -> Iterator[BindMount]:
    """``mount`` made (its two directories created) for the block, unmounted after it."""
    mount.source.mkdir()
    mount.path.mkdir()
    keep_locks_apart(mount.source / "store")
    subprocess.run(["mount", "--rbind", str(mount.source), str(mount.path)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount.path)], check=True)
        subprocess.run(["umount", "--lazy", str(mount.source / "store" / ".locks")], check=True)
