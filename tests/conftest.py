from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.etcd_server import EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One real etcd for the whole session, started on first use."""
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()
