"""``connect_timeout`` of the Kubernetes backend (issue 28, case 5): connecting asks the API server
for ``/version`` until it answers; a server that is not there ends the connect within the bound,
and ``none`` waits for one that starts later.

Durations are asserted with generous bounds only (the machine is shared).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import discovery_sync as ds
from testrigs.kube_fake import FakeKubeServer
from testrigs.kubeconfig import write_kubeconfig
from testrigs.net import free_port

GENEROUS = 5.0  # seconds a connect with a 0.5 s timeout may take at most, on a loaded machine


def reader_options(kubeconfig: Path, **options: Any) -> dict[str, Any]:
    """The options of a read-only client without a pod identity (nothing to write, nothing to find)."""
    return {"kubeconfig": str(kubeconfig), "namespace": "default", "read_only": True, **options}


@pytest.fixture
def nowhere(tmp_path: Path) -> tuple[int, Path]:
    """A free loopback port with nothing listening, and a kubeconfig pointing at it."""
    port = free_port()
    return port, write_kubeconfig(tmp_path / "nowhere-kubeconfig", f"http://127.0.0.1:{port}")


def test_a_server_that_is_not_there_fails_within_the_connect_timeout(nowhere):
    port, kubeconfig = nowhere
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable) as raised:
        ds.connect("kube://?connect_timeout=0.5", **reader_options(kubeconfig))
    assert time.monotonic() - started < GENEROUS
    message = str(raised.value)
    assert message.startswith(f"cannot reach the Kubernetes API server http://127.0.0.1:{port}: connection refused")
    assert "connect_timeout=0.5)" in message and "\n" not in message
    assert message.endswith(
        "start it or check the kubeconfig's server address, or pass connect_timeout=none to wait for it without limit"
    )


def test_a_writer_fails_the_same_way_before_anything_else(nowhere):
    _, kubeconfig = nowhere
    options = {"pod_name": "worker-0", "pod_uid": "uid-0", "mode": "container", "container_name": "main"}
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable, match=r"connect_timeout=0\.5\)"):
        ds.connect("kube://", connect_timeout=0.5, kubeconfig=str(kubeconfig), namespace="default", **options)
    assert time.monotonic() - started < GENEROUS  # the stale-CR delete (write_timeout, 10 s) never ran


@pytest.mark.parametrize("how", ["url", "keyword"])
def test_none_waits_for_a_server_started_after_connect_began(nowhere, how):
    port, kubeconfig = nowhere
    url, options = ("kube://?connect_timeout=none", {}) if how == "url" else ("kube://", {"connect_timeout": None})
    outcome: list[Any] = []

    def connect() -> None:
        try:
            outcome.append(ds.connect(url, **reader_options(kubeconfig, **options)))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(1.5)  # past the first retries: still waiting, since nothing listens
    assert thread.is_alive() and not outcome
    with FakeKubeServer(auto_endpoint_slices=True, port=port) as server:
        server.create_pod("worker-0")
        thread.join(30)
        assert not thread.is_alive()
        (client,) = outcome
        assert isinstance(client, ds.Discovery), client
        with client:
            assert client.connect_timeout is None
            assert client.list(ds.Query.endpoints()) == []


def test_connecting_asks_for_the_version_first(server, kubeconfig):
    with ds.connect("kube://", **reader_options(kubeconfig)) as client:
        assert client.connect_timeout == 10.0  # the default
        assert server.requests[0].method == "GET" and server.requests[0].path.rstrip("/") == "/version"


def test_an_answer_that_refuses_counts_as_reachable(server, kubeconfig):
    server.api.crd_installed = False  # every DynamoWorkerMetadata request is a 404: the view reports it
    options = reader_options(kubeconfig, ready_timeout=5, connect_timeout=0.5)
    with ds.connect("kube://", **options) as client, pytest.raises(ds.BackendUnavailable, match="install the"):
        client.list(ds.Query.endpoints())


def test_keywords_beat_the_url(server, kubeconfig, nowhere):
    with ds.connect("kube://?connect_timeout=0.5", **reader_options(kubeconfig, connect_timeout=None)) as client:
        assert client.connect_timeout is None
    with ds.connect("kube://?connect_timeout=none", **reader_options(kubeconfig, connect_timeout="3")) as client:
        assert client.connect_timeout == 3.0
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable, match=r"connect_timeout=0\.5\)"):
        ds.connect("kube://?connect_timeout=none", **reader_options(nowhere[1], connect_timeout=0.5))
    assert time.monotonic() - started < GENEROUS


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "²", "\u0661", "1_0", "", "forever"])
def test_bad_values_are_validation_errors_naming_the_option(kubeconfig, value):
    with pytest.raises(ds.ValidationError, match=r"^kube option connect_timeout=.* or none to wait without limit$"):
        ds.connect(f"kube://?connect_timeout={value}", **reader_options(kubeconfig))
