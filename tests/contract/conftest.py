"""The contract suite runs every test against every backend through this fixture.

A ``StoreRig`` stands for one store; ``rig.client()`` connects a new client to it (a separate
process-level peer for the file backend: its own threads, caches and instance id).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import discovery_sync as ds

# how long a test waits for an event that must come, and for silence that must hold
EVENT_TIMEOUT = 10.0


@dataclass
class StoreRig:
    name: str
    connect: Callable[..., ds.Discovery]  # keyword options are connect() options
    quiet_period: float  # long enough for a stray rescan/poll event to show up
    event_timeout: float = EVENT_TIMEOUT  # how long a test waits for an event that must come
    #: connects a read-only client (``read_only=True``; on Kubernetes, one without a pod identity)
    connect_reader: Callable[[], ds.Discovery] | None = None
    clients: list[ds.Discovery] = field(default_factory=list)

    def client(self) -> ds.Discovery:
        client = self.connect()
        self.clients.append(client)
        return client

    def member(self, logical_instance_id: int) -> ds.Discovery:
        """A new client that is a member of the failover cohort ``logical_instance_id``."""
        client = self.connect(logical_instance_id=logical_instance_id)
        self.clients.append(client)
        return client

    def reader(self) -> ds.Discovery:
        assert self.connect_reader is not None, f"the {self.name} rig has no read-only client"
        client = self.connect_reader()
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.shutdown()


def _memory_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
    registry = f"contract-{uuid.uuid4().hex}"
    url = f"memory://{registry}"
    return StoreRig(
        "memory", lambda **kw: ds.connect(url, **kw), 0.2, connect_reader=lambda: ds.connect(url, read_only=True)
    )


def _file_rig(request: pytest.FixtureRequest, tmp_path: Path, observer: str) -> StoreRig:
    # every client of a rig uses one TTL (mixed TTLs: tests/file/test_mixed_ttls.py, tests/interop)
    url = (
        f"file://{tmp_path / 'store'}?observer={observer}&ttl=5&rescan_interval=0.2&poll_interval=0.1&uniform_ttl=true"
    )
    return StoreRig(
        f"file-{observer}",
        lambda **kw: ds.connect(url, **kw),
        0.6,
        connect_reader=lambda: ds.connect(url, read_only=True),
    )


def _etcd_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
    from testrigs.etcd_server import key_prefix  # the etcd rig needs requests, the core suites do without

    server = request.getfixturevalue("etcd_server")
    url = f"etcd://127.0.0.1:{server.client_port}/{key_prefix('contract')}?ttl=5"  # this test's keys only
    return StoreRig(
        "etcd", lambda **kw: ds.connect(url, **kw), 0.3, connect_reader=lambda: ds.connect(url, read_only=True)
    )


def _sshfs_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
    from tests.netfs.contract_rig import sshfs_rig  # two sshfs mounts of one directory: two hosts

    return sshfs_rig(request, tmp_path)


def _kube_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
    from tests.kube.rig import kube_rig  # it builds on StoreRig from this module

    return kube_rig(request, tmp_path)


RIGS: dict[str, Callable[[pytest.FixtureRequest, Path], StoreRig]] = {
    "memory": _memory_rig,
    "file": lambda request, tmp: _file_rig(request, tmp, "inotify"),
    "file-polling": lambda request, tmp: _file_rig(request, tmp, "polling"),
    "file-sshfs": _sshfs_rig,
    "etcd": _etcd_rig,
    "kube": _kube_rig,
}


@pytest.fixture(scope="session")
def sshfs_contract_mounts():
    """The two sshfs mounts of the "file-sshfs" rig, started on first use, for the whole session."""
    from tests.netfs.contract_rig import start_mounts

    mounts = start_mounts()
    try:
        yield mounts
    finally:
        mounts.close()


@pytest.fixture(params=sorted(RIGS))
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreRig]:
    store = RIGS[request.param](request, tmp_path)
    try:
        yield store
    finally:
        store.close()
