"""Things other users and tools leave in a shared store, made for real, for the hostile-store tests."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import discovery_sync as ds

T = TypeVar("T")
#: an hour ago: a file a sweeper may judge dead as soon as it has watched it for a TTL
OLD = time.time() - 3600


def hand_written(store: Path, endpoint: str, instance_id: int, *, mode: int | None = None) -> tuple[ds.Endpoint, Path]:
    """An endpoint record written straight into the bucket, as another process would; with
    ``mode``, it appears in the bucket with that mode already (written beside the store, chmod-ed,
    then renamed in), so no reader can catch it in between."""
    record = ds.Endpoint("ns", "backend", endpoint, instance_id, ds.Transport.tcp("127.0.0.1:1"))
    path = store / "v1" / "instances" / f"ns%2Fbackend%2F{endpoint}%2F{instance_id:x}"
    if mode is None:
        path.write_bytes(ds.instance_to_json(record))
        return record, path
    staged = store.parent / f"staged-{path.name}"
    staged.write_bytes(ds.instance_to_json(record))
    os.chmod(staged, mode)
    os.rename(staged, path)
    return record, path


def make_file(path: Path | bytes, content: bytes = b"", *, old: bool = True) -> None:
    """A regular file; ``path`` may be bytes, for names that are not UTF-8."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)
    if old:
        os.utime(path, (OLD, OLD))


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    """A listening unix socket at ``path`` (bound on a short path first: sun_path holds 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="sock") as short:
        bound = os.path.join(short, "s")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(bound)
        server.listen()
        os.rename(bound, path)
        server.close()  # the socket file stays; connecting to it is refused


def make_device(path: Path) -> None:
    """A character device reading endless zeros, as /dev/zero (needs root)."""
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))


def make_huge(path: Path, size: int = 1 << 30) -> None:
    """A sparse file of ``size`` bytes: costs no disk, but a reader that reads it whole pays."""
    with open(path, "wb") as huge:
        huge.truncate(size)


class Outside:
    """A directory outside the store with what a followed symlink would expose: a document, a
    valid record under its record name, a leftover's name and a subdirectory, all with old mtimes
    (a sweeper would delete them). ``assert_untouched`` compares every entry's inode, mode, mtime
    and bytes with what they were."""

    RECORD = ds.Endpoint("ns", "backend", "outside", 1, ds.Transport.tcp("127.0.0.1:1"))
    RECORD_NAME = "ns%2Fbackend%2Foutside%2F1"

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "nested").mkdir(parents=True)
        make_file(path / "thesis.tex", b"\\documentclass{article}")
        make_file(path / self.RECORD_NAME, ds.instance_to_json(self.RECORD))
        make_file(path / ".tmp_00000000000000ff", b"{")
        make_file(path / "nested" / "notes", b"keep")
        for directory in (path / "nested", path):
            os.utime(directory, (OLD, OLD))
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, tuple[int, int, int, bytes]]:
        found = {}
        for directory, subdirectories, files in os.walk(self.path):
            for name in [".", *subdirectories, *files]:
                path = os.path.join(directory, name)
                st = os.lstat(path)
                data = Path(path).read_bytes() if stat.S_ISREG(st.st_mode) else b""
                found[os.path.relpath(path, self.path)] = (st.st_ino, st.st_mode, st.st_mtime_ns, data)
        return found

    def assert_untouched(self) -> None:
        assert self.snapshot() == self.before, "a file outside the store was touched"


def within(seconds: float, action: Callable[[], T]) -> T:
    """Run ``action`` in a thread; fail the test when it has not returned after ``seconds``.
    Its exception, if any, is raised here."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="test-bounded-call", daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{action} still blocked after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("discovery-sync-")]


@contextlib.contextmanager
def umask(mask: int):  # type: ignore[no-untyped-def]
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
