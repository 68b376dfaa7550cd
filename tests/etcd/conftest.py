"""Fixtures of the etcd backend tests (the etcd server itself is the session's, in tests/conftest.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def prefix(etcd_prefix: str) -> str:
    """A key prefix of this test's own (tests/conftest.py's ``etcd_prefix``), so tests share one etcd safely."""
    return etcd_prefix


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers: what a
    hung etcd member looks like to a client."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]
