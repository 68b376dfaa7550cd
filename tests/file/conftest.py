from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

PEER = Path(__file__).with_name("peer.py")
REPO = Path(__file__).resolve().parents[2]


class Peer:
    """A peer process (see peer.py); ``info`` is what it printed once its records were stored."""

    def __init__(self, url: str, count: int, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(PEER), url, str(count), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(10)
            raise RuntimeError(f"peer exited with {self.process.returncode} before registering")
        self.info = orjson.loads(line)

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no cleanup of any kind
        self.process.wait(10)

    def stop(self) -> int:
        self.process.stdin.close()
        return self.process.wait(30)


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        if peer.process.poll() is None:
            peer.kill()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"
