from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testrigs.reference import RustPeer


@pytest.fixture
def file_store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def rust_peers() -> Iterator[Callable[..., RustPeer]]:
    """``start(backend, env, isolate=False, prefix=None)`` starts a reference-runtime peer; all killed at teardown."""
    started: list[RustPeer] = []

    def start(backend: str, env: dict[str, str], *, isolate: bool = False, prefix: list[str] | None = None) -> RustPeer:
        peer = RustPeer(backend, env, isolate=isolate, prefix=prefix)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.kill()


@pytest.fixture
def rust_peer(file_store: Path, rust_peers) -> Callable[[], RustPeer]:
    """Reference peers on the file store, each in a loopback-only network namespace."""
    return lambda: rust_peers("file", {"DYN_FILE_KV": str(file_store)}, isolate=True)


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    """The smallest local model directory the runtime accepts offline: a config.json of {}."""
    directory = tmp_path / "tiny-model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    return directory
