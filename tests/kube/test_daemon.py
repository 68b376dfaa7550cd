"""The daemon: Pending → Ready, Failed (clearly, never silently), Stopped; what it asks the server."""

from __future__ import annotations

import queue
import threading

import pytest
from discovery_sync.backends.kube.view import THREAD_NAME, State

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, initial_state

SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
CRS = "/apis/nvidia.com/v1alpha1/namespaces/default/dynamoworkermetadatas"


def test_reads_wait_for_the_first_lists(server, pod_client):
    server.fail_next(2, 500, resource="dynamoworkermetadatas", verb="list")
    client = pod_client("worker-0")
    assert client.list(ds.Query.endpoints()) == []  # waited through two failed lists
    assert client.daemon.state is State.READY
    lists = [r for r in server.requests if r.path == CRS and r.query.get("watch") != "true"]
    assert len(lists) >= 3


def test_a_view_that_never_becomes_ready_times_out_with_the_last_error(server, pod_client):
    server.fail_next(10_000, 500, resource="endpointslices", verb="list")
    client = pod_client("worker-0", ready_timeout=0.5)
    with pytest.raises(
        ds.BackendUnavailable, match=r"not ready after 0.5 s \(still listing endpointslices; last error"
    ):
        client.list(ds.Query.endpoints())
    with pytest.raises(ds.BackendUnavailable, match="not ready"):
        client.list_and_watch(ds.Query.endpoints())
    assert client.daemon.state is State.PENDING
    assert client.status()["state"] == "Pending"


def test_shutdown_cancels_reads_waiting_for_ready(server, pod_client):
    server.fail_next(10_000, 500, resource="endpointslices", verb="list")
    client = pod_client("worker-0", ready_timeout=60)
    outcome: queue.Queue[BaseException | None] = queue.Queue()

    def read() -> None:
        try:
            client.list(ds.Query.endpoints())
            outcome.put(None)
        except BaseException as exc:
            outcome.put(exc)

    reader = threading.Thread(target=read, name="test-reader", daemon=True)
    reader.start()
    server.wait_for_request(lambda r: r.path == SLICES and r.query.get("watch") != "true")
    assert client.daemon.state is State.PENDING
    client.shutdown()
    failure = outcome.get(timeout=10)  # long before the 60 s ready timeout
    assert isinstance(failure, ds.BackendUnavailable) and "stopped" in str(failure)
    assert client.daemon.state is State.STOPPED


def test_a_missing_crd_fails_the_daemon_clearly(server, pod_client):
    server.set_crd_installed(False)
    client = pod_client("worker-0")
    with pytest.raises(ds.BackendUnavailable, match="install the DynamoWorkerMetadata CRD"):
        client.list(ds.Query.endpoints())
    assert client.daemon.state is State.FAILED
    with pytest.raises(ds.BackendUnavailable, match="install the DynamoWorkerMetadata CRD"):
        client.check_connection()
    assert "install the DynamoWorkerMetadata CRD" in client.diagnose()["problems"][0]


def test_missing_rbac_for_readiness_is_reported_until_granted(server, pod_client):
    server.deny("endpointslices", "list")
    client = pod_client("worker-0")
    with pytest.raises(
        ds.BackendUnavailable,
        match=r"listing endpointslices failed: access denied: .* may not list endpointslices.* grant the RBAC",
    ):
        client.list_and_watch(ds.Query.endpoints())
    assert client.status()["state"] == "Pending"  # still trying: RBAC applied after the pod starts heals it
    assert client.state is ds.ConnectionState.SUSPENDED
    changes: queue.Queue[ds.StateChange] = queue.Queue()
    client.add_state_listener(changes.put)
    server.allow("endpointslices", "list")
    assert changes.get(timeout=10).state is ds.ConnectionState.RECONNECTED  # once the stream's watch opened
    assert client.list(ds.Query.endpoints()) == []
    assert client.status()["state"] == "Ready"


def test_a_bug_in_the_daemon_fails_every_watch_and_every_read(pod_client):
    watcher, writer = pod_client("watcher"), pod_client("writer")
    watch = watcher.list_and_watch(ds.Query.endpoints())
    initial_state(watch)

    def broken(name: str) -> set:
        raise RuntimeError("boom")

    watcher.daemon._serve = broken  # the next change the daemon applies hits the bug
    writer.register(endpoint_spec())
    with pytest.raises(ds.WatchFailed, match="boom") as failed:
        watch.get(timeout=10)
    assert isinstance(failed.value.__cause__, RuntimeError)
    assert watcher.daemon.state is State.FAILED and "RuntimeError: boom" in watcher.daemon.reason
    with pytest.raises(ds.BackendUnavailable, match="RuntimeError: boom"):
        watcher.list(ds.Query.endpoints())
    with pytest.raises(ds.BackendUnavailable, match="RuntimeError: boom"):
        watcher.list_and_watch(ds.Query.endpoints())
    assert watcher.daemon.join(10)  # the daemon and its watch threads end with the failure


def test_named_threads_run_until_shutdown(pod_client):
    client = pod_client("worker-0")
    client.list(ds.Query.endpoints())
    assert sorted(client.daemon.threads()) == [
        THREAD_NAME,
        "discovery-sync-kube-silence",
        "discovery-sync-kube-watch-dynamoworkermetadatas",
        "discovery-sync-kube-watch-endpointslices",
    ]
    watch = client.list_and_watch(ds.Query.endpoints())
    client.shutdown()
    assert client.daemon.state is State.STOPPED
    assert client.daemon.threads() == []
    assert watch.closed


def test_container_mode_watches_pods_instead_of_slices(server, connect_as):
    pod = server.create_pod("pod-a", containers=("main", "sidecar"))
    client = connect_as(pod_name="pod-a", pod_uid=pod["metadata"]["uid"], mode="container", container_name="sidecar")
    client.list(ds.Query.endpoints())
    assert "discovery-sync-kube-watch-pods" in client.daemon.threads()
    pod_lists = [r for r in server.requests if r.path == "/api/v1/namespaces/default/pods"]
    assert pod_lists and all(r.query["labelSelector"] == "nvidia.com/dynamo-discovery-enabled=true" for r in pod_lists)
    assert not [r for r in server.requests if r.path == SLICES]


def test_it_lists_and_watches_as_the_reference_runtime_does(server, pod_client):
    client = pod_client("worker-0")
    client.list(ds.Query.endpoints())
    server.wait_for_watchers("endpointslices", 1)
    server.wait_for_watchers("dynamoworkermetadatas", 1)
    for path, selector in ((SLICES, "nvidia.com/dynamo-discovery-enabled=true"), (CRS, None)):
        requests = [r for r in server.requests if r.path == path]
        first_list = next(r for r in requests if r.query.get("watch") != "true")
        assert first_list.query.get("limit") == "500" and first_list.query.get("labelSelector") == selector
        watch = server.wait_for_request(lambda r, p=path: r.path == p and r.query.get("watch") == "true")
        assert watch.query["allowWatchBookmarks"] == "true" and watch.query["timeoutSeconds"] == "290"
        assert int(watch.query["resourceVersion"]) > 0
