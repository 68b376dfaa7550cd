from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.etcd_server import EtcdServer
from tests.helpers import LogCatcher, caught_logs
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


@pytest.fixture
def escaped() -> Iterator[list[threading.ExceptHookArgs]]:
    """Exceptions that ended a thread through ``threading.excepthook`` during the test (there
    must be none: every thread of ours handles its own); the previous hook is restored after."""
    caught: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = caught.append
    try:
        yield caught
    finally:
        threading.excepthook = previous


@pytest.fixture
def thread_log() -> Iterator[LogCatcher]:
    """Warnings and errors of every discovery_sync logger during the test."""
    with caught_logs("discovery_sync") as catcher:
        yield catcher
