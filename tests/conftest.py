from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.etcd_server import EtcdServer
from tests.peer import Peer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One real etcd for the whole session, started on first use."""
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    """Peer processes started by a test; any still running are killed at teardown."""
    started: list[Peer] = []
    yield started
    for peer in started:
        if peer.process.poll() is None:
            peer.kill()
