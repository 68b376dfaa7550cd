"""Connection state of the Kubernetes client (docs/design.md §5.5), each fault driven for real
through the fake API server: the server stopped (connections refused) and started again, writes
answered 500, this worker's CR deleted over HTTP by another party or with its pod, the CRD missing
(the daemon Failed), and shutdown. A listener records the changes; every wait is bounded by
WAIT and ended by the change it waits for."""

from __future__ import annotations

import queue
import threading
import urllib.request

import pytest

import discovery_sync as ds
from discovery_sync.connection import STATE_THREAD
from testrigs.helpers import LogCatcher, endpoint_spec, model_spec
from testrigs.kube_fake import WORKER_METADATA, FakeKubeServer

WAIT = 10.0
CR_PATH = "/apis/nvidia.com/v1alpha1/namespaces/default/dynamoworkermetadatas"
CONNECTED, SUSPENDED, LOST = ds.ConnectionState.CONNECTED, ds.ConnectionState.SUSPENDED, ds.ConnectionState.LOST
RECONNECTED, CLOSED = ds.ConnectionState.RECONNECTED, ds.ConnectionState.CLOSED


def listen(client: ds.Discovery) -> queue.Queue[ds.StateChange]:
    """The changes of ``client`` from now on, as its state thread delivers them."""
    seen: queue.Queue[ds.StateChange] = queue.Queue()

    def record(change: ds.StateChange) -> None:
        assert threading.current_thread().name == STATE_THREAD
        seen.put(change)

    client.add_state_listener(record)
    return seen


def next_change(seen: queue.Queue[ds.StateChange]) -> ds.StateChange:
    return seen.get(timeout=WAIT)


def assert_state(client: ds.Discovery, state: ds.ConnectionState) -> None:
    assert client.state is state
    assert client.status()["connection"] == state.value


def cr_uid(server: FakeKubeServer, name: str = "worker-0") -> str:
    stored = server.get(WORKER_METADATA, name)
    assert stored is not None
    uid: str = stored["metadata"]["uid"]
    return uid


def delete_cr(server: FakeKubeServer, name: str = "worker-0") -> None:
    """``kubectl delete dwm name``, as another party would: one DELETE over HTTP."""
    request = urllib.request.Request(f"{server.url}{CR_PATH}/{name}", method="DELETE")
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        assert response.status == 200


def store_key(record: ds.DiscoveryInstance) -> str:
    return f"{record.kind.bucket}/{record.id().to_path()}"


def test_a_stopped_api_server_suspends_the_client_until_it_answers_again(server, pod_client):
    client = pod_client("worker-0", write_timeout=0.5)
    endpoint = client.register(endpoint_spec())
    assert client.list(ds.Query.endpoints()) == [endpoint]
    seen = listen(client)
    server.stop(hold_port=True)  # every connection refused until it serves again
    suspended = next_change(seen)
    assert (suspended.previous, suspended.state) == (CONNECTED, SUSPENDED)
    assert "cannot reach the Kubernetes API server" in suspended.reason
    assert_state(client, SUSPENDED)
    with pytest.raises(ds.BackendUnavailable, match="gave up after"):
        client.register(endpoint_spec(endpoint="other"))  # rolled back; still SUSPENDED
    assert_state(client, SUSPENDED)
    server.start()
    back = next_change(seen)
    assert (back.previous, back.state, back.rewritten) == (SUSPENDED, RECONNECTED, ())
    assert "answers again" in back.reason
    assert_state(client, CONNECTED)
    assert client.list(ds.Query.endpoints()) == [endpoint]  # nothing was lost: the CR stayed
    client.shutdown()
    assert next_change(seen).state is CLOSED
    assert seen.empty()


def test_writes_answered_500_suspend_the_client_until_one_succeeds(server, pod_client):
    client = pod_client("worker-0")
    seen = listen(client)
    server.fail_next(2, 500, resource=WORKER_METADATA, verb="patch")
    endpoint = client.register(endpoint_spec())  # the third attempt is applied
    suspended, back = next_change(seen), next_change(seen)
    assert (suspended.previous, suspended.state) == (CONNECTED, SUSPENDED)
    assert "registering endpoint" in suspended.reason and "500" in suspended.reason
    assert (back.previous, back.state, back.rewritten) == (SUSPENDED, RECONNECTED, ())
    assert_state(client, CONNECTED)
    assert client.get(endpoint.id()) == endpoint
    server.fail_next(1, 500, resource=WORKER_METADATA, verb="patch")
    client.register(endpoint_spec(endpoint="other"))  # one failure its retry mends is no outage
    client.shutdown()
    assert next_change(seen).state is CLOSED
    assert seen.empty()


def test_a_cr_deleted_by_another_party_is_lost_then_applied_again(server, pod_client):
    client, reader = pod_client("worker-0"), pod_client("reader")
    records = [client.register(endpoint_spec()), client.register(model_spec())]
    assert reader.list(ds.Query.endpoints()) == records[:1]
    seen = listen(client)
    deleted = cr_uid(server)
    delete_cr(server)
    lost = next_change(seen)
    assert (lost.previous, lost.state) == (CONNECTED, LOST)
    assert f"DynamoWorkerMetadata default/worker-0 (uid {deleted}) was deleted" in lost.reason
    back = next_change(seen)
    assert (back.previous, back.state) == (LOST, RECONNECTED)
    assert back.rewritten == tuple(sorted(store_key(r) for r in records))
    assert_state(client, CONNECTED)
    stored = server.get(WORKER_METADATA, "worker-0")
    assert stored is not None and stored["metadata"]["uid"] != deleted
    assert stored["spec"]["data"]["endpoints"] == {records[0].id().to_path(): records[0].to_dict()}
    assert stored["spec"]["data"]["model_cards"] == {records[1].id().to_path(): records[1].to_dict()}
    assert reader.list(ds.Query.endpoints()) == records[:1]  # readers serve it again
    client.shutdown()  # deletes the CR: no loss
    assert next_change(seen).state is CLOSED
    assert seen.empty()
    assert server.get(WORKER_METADATA, "worker-0") is None


def test_a_cr_that_held_no_record_is_not_lost(server, pod_client):
    client = pod_client("worker-0")
    client.unregister(client.register(endpoint_spec()))  # the CR stays, with four empty maps
    seen = listen(client)
    delete_cr(server)
    endpoint = client.register(endpoint_spec())  # a new CR
    second = cr_uid(server)
    delete_cr(server)
    lost = next_change(seen)  # the first deletion, had it counted, would come first
    assert lost.state is LOST and f"(uid {second})" in lost.reason
    back = next_change(seen)
    assert (back.state, back.rewritten) == (RECONNECTED, (store_key(endpoint),))
    client.shutdown()
    assert next_change(seen).state is CLOSED


def test_a_cr_that_went_with_its_pod_stays_lost_until_the_next_write(server, pod_client, thread_log: LogCatcher):
    client = pod_client("worker-0")
    endpoint = client.register(endpoint_spec())
    seen = listen(client)
    server.delete_pod("worker-0")  # the garbage collector deletes its CR with it
    lost = next_change(seen)
    assert (lost.previous, lost.state) == (CONNECTED, LOST)
    assert thread_log.wait_for("its CR went with it and is not applied again", WAIT)
    assert_state(client, LOST)
    assert server.get(WORKER_METADATA, "worker-0") is None
    model = client.register(model_spec())  # a write applies the whole CR
    back = next_change(seen)
    assert (back.previous, back.state) == (LOST, RECONNECTED)
    assert back.rewritten == tuple(sorted(store_key(r) for r in (endpoint, model)))
    # the CR applied again names a pod that is gone: the garbage collector deletes it again, as a
    # real one does (a full run saw it before the next line), and the client is LOST again
    client.shutdown()
    after = [next_change(seen)]
    while after[-1].state is not CLOSED:
        after.append(next_change(seen))
    assert all(change.state is LOST and "was deleted while" in change.reason for change in after[:-1]), after


def test_a_failed_daemon_suspends_the_client_for_good(server, pod_client):
    server.set_crd_installed(False)
    client = pod_client("worker-0")
    with pytest.raises(ds.BackendUnavailable, match="install the DynamoWorkerMetadata CRD"):
        client.list(ds.Query.endpoints())
    assert_state(client, SUSPENDED)
    (change,) = client._connection.history  # it came before any listener could be added
    assert change.previous is CONNECTED and change.reason.startswith("Kubernetes discovery failed: ")
    seen = listen(client)
    server.set_crd_installed(True)
    client.register(endpoint_spec())  # writes work again, reads do not: still SUSPENDED
    assert_state(client, SUSPENDED)
    client.shutdown()
    assert next_change(seen).previous is SUSPENDED
    assert seen.empty()


def test_shutdown_is_closed_only(server, pod_client):
    client = pod_client("worker-0")
    client.register(endpoint_spec())
    seen = listen(client)
    client.shutdown()  # deletes its CR: the daemon sees that, and it is no loss
    change = next_change(seen)
    assert (change.previous, change.state) == (CONNECTED, CLOSED)
    assert_state(client, CLOSED)
    assert seen.empty()
    assert server.get(WORKER_METADATA, "worker-0") is None
    assert client._keeper._thread is None  # no deletion to handle: no keeper thread


def test_a_cr_that_cannot_be_applied_again_at_once_is_at_the_next_answer(server, pod_client, thread_log: LogCatcher):
    client = pod_client("worker-0", write_timeout=0.5)  # two attempts
    endpoint = client.register(endpoint_spec())
    seen = listen(client)
    server.fail_next(2, 500, resource=WORKER_METADATA, verb="patch")
    delete_cr(server)
    lost = next_change(seen)
    assert (lost.previous, lost.state) == (CONNECTED, LOST)
    assert thread_log.wait_for("stay lost until the next write or the next answer of the API server", WAIT)
    assert_state(client, LOST)
    assert server.get(WORKER_METADATA, "worker-0") is None
    assert client.list(ds.Query.endpoints()) == [endpoint]  # an answer: the CR is applied again
    back = next_change(seen)
    assert (back.previous, back.state, back.rewritten) == (LOST, RECONNECTED, (store_key(endpoint),))
    assert server.get(WORKER_METADATA, "worker-0") is not None
    client.shutdown()
    assert next_change(seen).state is CLOSED


def test_a_cr_deleted_while_the_server_was_down_is_applied_again(server, pod_client):
    client = pod_client("worker-0")
    endpoint = client.register(endpoint_spec())
    client.list(ds.Query.endpoints())
    seen = listen(client)
    server.stop(hold_port=True)
    assert next_change(seen).state is SUSPENDED
    server.delete(WORKER_METADATA, "worker-0")  # through another replica, say: this one is down
    # the restarted server's watch cache starts after the DELETED event: the watch must list again
    server.start()
    changes = [next_change(seen)]
    while changes[-1].state is not RECONNECTED or not changes[-1].rewritten:
        changes.append(next_change(seen))
    # the readiness watch may answer before the CR watch lists again: RECONNECTED, then LOST
    assert [(c.previous, c.state) for c in changes] in (
        [(SUSPENDED, LOST), (LOST, RECONNECTED)],
        [(SUSPENDED, RECONNECTED), (CONNECTED, LOST), (LOST, RECONNECTED)],
    )
    assert changes[-1].rewritten == (store_key(endpoint),)
    assert server.get(WORKER_METADATA, "worker-0") is not None
    client.shutdown()
    assert next_change(seen).state is CLOSED
