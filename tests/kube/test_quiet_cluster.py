"""The client must not depend on the fake's old habits (tests/fixtures/kube-apiserver-1.28/README.md):
a real API server sends no BOOKMARK on a quiet watch and about one a minute after a change
(watch_bookmarks_quiet.json, watch_bookmarks_change.json), and a restarted one refuses
connections, answers 503 (retryAfterSeconds 5) for a moment, then gives a watch from the old
resourceVersion a 410 ERROR event (apiserver_restart.json). On a fake that never sends a
BOOKMARK, reads are fast and current and watches deliver every change; the restart sequence
ends with the right records and the client CONNECTED."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.helpers import LogCatcher, endpoint_spec, initial_state, next_event
from testrigs.kube_fake import ENDPOINT_SLICES, WORKER_METADATA, FakeKubeServer
from testrigs.waiting import wait_until
from tests.kube.rig import connect_pod

WAIT = 10.0
NO_BOOKMARKS = 1e6  # seconds between bookmarks: never
FAST = 1.0  # seconds a consistent read may take on a healthy loopback server (sync_timeout is 5)
NOT_READY = (
    "the request has been made before all known HTTP paths have been installed, please try again"  # the real text
)


@pytest.fixture
def quiet_server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer(auto_endpoint_slices=True, bookmark_interval=NO_BOOKMARKS) as fake:
        yield fake


@pytest.fixture
def quiet_kubeconfig(quiet_server: FakeKubeServer, tmp_path: Path) -> Path:
    return quiet_server.write_kubeconfig(tmp_path / "kubeconfig")


def timed_list(client: ds.Discovery) -> tuple[set[ds.DiscoveryInstance], float]:
    began = time.monotonic()
    records = set(client.list(ds.Query.endpoints()))
    return records, time.monotonic() - began


def test_reads_and_watches_need_no_bookmark(quiet_server, quiet_kubeconfig, thread_log: LogCatcher):
    reader = connect_pod(quiet_server, quiet_kubeconfig, "reader")
    writer = connect_pod(quiet_server, quiet_kubeconfig, "writer")
    try:
        first = writer.register(endpoint_spec(endpoint="first"))
        records, took = timed_list(reader)
        assert records == {first} and took < FAST
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            _, resync = initial_state(watch)
            assert resync.instances == (first,)
            second = writer.register(endpoint_spec(endpoint="second"))
            assert next_event(watch) == ds.Added(second)
            writer.unregister(first)
            assert next_event(watch) == ds.Removed(first.id())
            records, took = timed_list(reader)  # a read right after a change another pod made
            assert records == {second} and took < FAST
            quiet_server.set_pod_ready("writer", False)  # readiness alone changes what is served
            assert next_event(watch) == ds.Removed(second.id())
            records, took = timed_list(reader)
            assert records == set() and took < FAST
            quiet_server.set_pod_ready("writer", True)
            assert next_event(watch) == ds.Added(second)
        for _ in range(3):  # a quiet cluster: nothing changes, reads stay fast
            records, took = timed_list(reader)
            assert records == {second} and took < FAST
        assert quiet_server.bookmarks_sent(WORKER_METADATA) == quiet_server.bookmarks_sent(ENDPOINT_SLICES) == 0
        assert not thread_log.matching("without checking that it is current")
    finally:
        writer.shutdown()
        reader.shutdown()


def test_a_restarted_api_server_503_then_410(quiet_server, quiet_kubeconfig, thread_log: LogCatcher):
    reader = connect_pod(quiet_server, quiet_kubeconfig, "reader")
    writer = connect_pod(quiet_server, quiet_kubeconfig, "writer")
    ghost = connect_pod(quiet_server, quiet_kubeconfig, "ghost")
    try:
        kept, gone = writer.register(endpoint_spec(endpoint="kept")), ghost.register(endpoint_spec(endpoint="gone"))
        seen: queue.Queue[ds.StateChange] = queue.Queue()
        reader.add_state_listener(seen.put)
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            _, resync = initial_state(watch)
            assert set(resync.instances) == {kept, gone}
            quiet_server.stop(hold_port=True)  # connections refused
            assert seen.get(timeout=WAIT).state is ds.ConnectionState.SUSPENDED
            # while it is down, a worker's pod is deleted (the garbage collector deletes its CR), as
            # through another replica
            quiet_server.delete_pod("ghost")
            wait_until(lambda: quiet_server.get(WORKER_METADATA, "ghost") is None, "the ghost's CR collected")
            # it serves again as a restarted one does: CR paths answer 503 for a moment, then the
            # new watch cache, which begins after what the reader saw, gives its watch a 410
            quiet_server.start()
            back = seen.get(timeout=WAIT)
            assert back.state is ds.ConnectionState.RECONNECTED
            event = next_event(watch)
            while event != ds.Removed(gone.id()) and event != ds.Resync((kept,)):
                event = next_event(watch)  # a Resync of the old state first is allowed
        assert set(reader.list(ds.Query.endpoints())) == {kept}
        assert reader.state is ds.ConnectionState.CONNECTED
        assert reader.status()["resyncs"] >= 1  # the 410 made it list again
        assert thread_log.matching(f"503 Service Unavailable: {NOT_READY}")  # the restart's 503s were met
        later = writer.register(endpoint_spec(endpoint="later"))  # the writer's view heals too
        assert set(reader.list(ds.Query.endpoints())) == {kept, later}
    finally:
        writer.shutdown()
        reader.shutdown()
        ghost.shutdown()
