"""An API server that goes silent (docs/design.md §5.5, backends/kube/silence.py): a real one shutting
down refuses new connections at once and keeps its open watches silent for about 60 s
(tests/fixtures/kube-apiserver-1.28/graceful_shutdown.json); a partition that drops packets
silences everything. The client, through a :class:`TcpProxy` in front of a fake that sends no
BOOKMARK (as a real quiet server: watch_bookmarks_quiet.json), must be SUSPENDED within 10 s and
RECONNECTED once it serves again, and a healthy quiet server must get only the few confirming
requests expected (counted in the fake's request log, the time driven by a ManualClock)."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.kube.keeper import ConnectionKeeper
from discovery_sync.backends.kube.silence import CONFIRM_TIMEOUT, SILENCE
from discovery_sync.backends.kube.view import KubeDaemon
from discovery_sync.backends.kube.wire import KubeApi, load_cluster

import discovery_sync as ds
from discovery_sync.connection import ConnectionStates
from discovery_sync.testing import ManualClock
from testrigs.helpers import endpoint_spec
from testrigs.kube_fake import ENDPOINT_SLICES, WORKER_METADATA, FakeKubeServer
from testrigs.kubeconfig import write_kubeconfig
from testrigs.tcp_proxy import TcpProxy
from testrigs.waiting import wait_until
from tests.kube.rig import connect_pod

log = logging.getLogger(__name__)

WAIT = 10.0
NO_BOOKMARKS = 1e6  # seconds between bookmarks: never, as a real server on a quiet watch
SUSPENDED, RECONNECTED = ds.ConnectionState.SUSPENDED, ds.ConnectionState.RECONNECTED


@pytest.fixture
def quiet_server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer(auto_endpoint_slices=True, bookmark_interval=NO_BOOKMARKS) as fake:
        yield fake


@pytest.fixture
def proxy(quiet_server: FakeKubeServer) -> Iterator[TcpProxy]:
    proxy = TcpProxy(quiet_server.port)
    yield proxy
    proxy.close()


@pytest.fixture
def proxied_kubeconfig(proxy: TcpProxy, tmp_path: Path) -> Path:
    """A kubeconfig whose server is the proxy in front of the fake."""
    return write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{proxy.port}")


def listen(client: ds.Discovery) -> queue.Queue[ds.StateChange]:
    seen: queue.Queue[ds.StateChange] = queue.Queue()
    client.add_state_listener(seen.put)
    return seen


def watching(server: FakeKubeServer) -> None:
    """Both of a client's watches are open on ``server``."""
    server.wait_for_watchers(WORKER_METADATA)
    server.wait_for_watchers(ENDPOINT_SLICES)


def confirmations(server: FakeKubeServer) -> int:
    return sum(1 for r in server.requests if r.method == "GET" and r.path.rstrip("/") == "/version")


@pytest.mark.parametrize("drop_new", [False, True], ids=["shutting-down", "partition"])
def test_a_silent_server_suspends_the_client_and_serving_again_reconnects(
    quiet_server, proxy, proxied_kubeconfig, tmp_path, drop_new
):
    # a partition makes reconnecting time out: a short request_timeout makes that quick
    client = connect_pod(quiet_server, proxied_kubeconfig, "worker-0", request_timeout=2.0 if drop_new else None)
    peer = connect_pod(quiet_server, quiet_server.write_kubeconfig(tmp_path / "direct"), "worker-1")
    try:
        endpoint = client.register(endpoint_spec())
        assert client.list(ds.Query.endpoints()) == [endpoint]
        watching(quiet_server)
        seen = listen(client)
        went_silent = time.monotonic()
        proxy.silence(drop_new=drop_new)  # refused: an API server after SIGTERM; dropped: a partition
        suspended = seen.get(timeout=WAIT)
        to_suspended = time.monotonic() - went_silent
        assert suspended.state is SUSPENDED
        assert "no watch delivered anything for" in suspended.reason and "/version" in suspended.reason
        # a kept-alive connection the confirmation reuses is held silent too, so it may time out
        causes = ("timed out",) if drop_new else ("connection refused", "timed out")
        assert any(cause in suspended.reason for cause in causes), suspended.reason
        assert to_suspended <= SILENCE + CONFIRM_TIMEOUT + 1.0
        # the cut watches reconnect, are refused and keep it SUSPENDED on their own account
        wait_until(
            lambda: {"watch dynamoworkermetadatas", "watch endpointslices"} <= set(client.status()["failing"]),
            "both watches failing",
        )
        later = peer.register(endpoint_spec(endpoint="later"))  # a change the client cannot see yet
        serving = time.monotonic()
        proxy.restore()
        back = seen.get(timeout=WAIT)
        to_reconnected = time.monotonic() - serving
        assert back.state is RECONNECTED and back.rewritten == ()
        assert client.state is ds.ConnectionState.CONNECTED
        assert set(client.list(ds.Query.endpoints())) == {endpoint, later}  # its watches work again
        log.warning(
            "silent server (%s): SUSPENDED after %.2f s, RECONNECTED %.2f s after it served again",
            "partition" if drop_new else "refusing",
            to_suspended,
            to_reconnected,
        )
    finally:
        peer.shutdown()
        client.shutdown()


def test_a_quiet_healthy_server_gets_one_confirmation_per_silence_and_the_client_stays_connected(
    quiet_server, tmp_path
):
    kubeconfig = quiet_server.write_kubeconfig(tmp_path / "kubeconfig")
    clock = ManualClock()
    connection = ConnectionStates("test")
    cluster = load_cluster(kubeconfig)
    api = KubeApi(cluster.api_client, "default")
    daemon = KubeDaemon(
        api, mode="pod", own_cr_name=None, keeper=ConnectionKeeper(connection, lambda uid: None), clock=clock
    )
    daemon.start()
    try:
        daemon.wait_ready(WAIT)
        watching(quiet_server)
        wait_until(lambda: all(s.heard() is not None for s in daemon._streams), "both watches open")
        watches = sum(1 for r in quiet_server.requests if r.query.get("watch") == "true")
        clock.advance(SILENCE - 0.1)
        assert confirmations(quiet_server) == 0  # quiet, but not for long enough
        clock.advance(0.2)
        assert confirmations(quiet_server) == 1
        clock.advance(10 * SILENCE)  # one a silence: ten more, no more
        assert confirmations(quiet_server) == 11
        # a change delivered on a watch is news from the server: no confirmation is due until
        # a whole silence after it
        clock.advance(SILENCE - 1)
        quiet_server.create_pod("worker-9")  # its EndpointSlice changes
        wait_until(lambda: "worker-9" in daemon._readiness_map, "the change reached the view")
        clock.advance(SILENCE - 0.5)
        assert confirmations(quiet_server) == 11
        clock.advance(1.0)
        assert confirmations(quiet_server) == 12
        assert connection.state is ds.ConnectionState.CONNECTED and connection.history == []
        assert sum(1 for r in quiet_server.requests if r.query.get("watch") == "true") == watches  # none cut
        assert daemon.silence.unanswered == 0 and quiet_server.bookmarks_sent(WORKER_METADATA) == 0
    finally:
        daemon.stop()
        api.close()


def test_a_graceful_shutdown_and_restart_of_the_fake(quiet_server, tmp_path):
    """The fake's own SIGTERM (graceful_shutdown.json: refused, idle connections closed, watches
    silent) and restart (apiserver_restart.json: 503 for 1 s, then 410 for the old version)."""
    kubeconfig = quiet_server.write_kubeconfig(tmp_path / "kubeconfig")
    client = connect_pod(quiet_server, kubeconfig, "worker-0")
    peer = connect_pod(quiet_server, kubeconfig, "worker-1")
    try:
        endpoint, theirs = client.register(endpoint_spec()), peer.register(endpoint_spec(endpoint="theirs"))
        assert set(client.list(ds.Query.endpoints())) == {endpoint, theirs}
        watching(quiet_server)
        seen = listen(client)
        went_silent = time.monotonic()
        quiet_server.shut_down_gracefully()  # its watches stay open, silent, for 60 s
        suspended = seen.get(timeout=WAIT)
        to_suspended = time.monotonic() - went_silent
        assert suspended.state is SUSPENDED and "no watch delivered anything for" in suspended.reason
        assert to_suspended <= SILENCE + CONFIRM_TIMEOUT + 1.0
        quiet_server.stop(hold_port=True)  # the process exits (its 60 s cut short)
        quiet_server.delete_pod("worker-1")  # meanwhile, through another replica: its CR goes with it
        serving = time.monotonic()
        quiet_server.start()  # 503 for a moment, then a 410 for the version the watches knew
        back = seen.get(timeout=WAIT)
        to_reconnected = time.monotonic() - serving
        assert back.state is RECONNECTED and client.state is ds.ConnectionState.CONNECTED
        assert client.list(ds.Query.endpoints()) == [endpoint]
        assert client.status()["resyncs"] >= 1  # the 410 made it list again
        # once: the EndpointSlices watch, served at once, did not reconnect it while CRs answered 503
        assert seen.empty() and [c.state for c in client._connection.history[-2:]] == [SUSPENDED, RECONNECTED]
        log.warning(
            "graceful shutdown: SUSPENDED after %.2f s, RECONNECTED %.2f s after the restart",
            to_suspended,
            to_reconnected,
        )
    finally:
        peer.shutdown()
        client.shutdown()
