"""Fixtures of the Kubernetes backend tests: a fake API server and clients connected as its pods."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import discovery_sync as ds
from testrigs.kube_fake import FakeKubeServer
from tests.kube.rig import connect_pod

WAIT = 10.0  # bound on every wait for something that must happen


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    # no BOOKMARK ever, as a real API server on a quiet watch (watch_bookmarks_quiet.json): nothing
    # here may depend on one
    with FakeKubeServer(auto_endpoint_slices=True, bookmark_interval=1e6) as fake:
        yield fake


@pytest.fixture
def kubeconfig(server: FakeKubeServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def clients(server: FakeKubeServer) -> Iterator[list[ds.Discovery]]:
    """Clients a test connected; shut down at teardown, before the server stops."""
    connected: list[ds.Discovery] = []
    yield connected
    for client in connected:
        client.shutdown()


@pytest.fixture
def pod_client(server: FakeKubeServer, kubeconfig: Path, clients: list[ds.Discovery]) -> Callable[..., ds.Discovery]:
    """``pod_client(name, **options)``: create a ready pod ``name`` and connect a client as it."""

    def connect(name: str, **options: Any) -> ds.Discovery:
        client = connect_pod(server, kubeconfig, name, **options)
        clients.append(client)
        return client

    return connect


@pytest.fixture
def connect_as(kubeconfig: Path, clients: list[ds.Discovery]) -> Callable[..., ds.Discovery]:
    """``connect_as(**options)``: connect with explicit options (the pod must exist already, or not)."""

    def connect(**options: Any) -> ds.Discovery:
        options.setdefault("kubeconfig", str(kubeconfig))
        options.setdefault("podinfo_dir", str(kubeconfig.parent / "no-podinfo"))
        options.setdefault("namespace", "default")
        client = ds.connect("kube://", **options)
        clients.append(client)
        return client

    return connect
