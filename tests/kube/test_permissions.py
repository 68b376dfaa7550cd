"""A permission the client lacks must not look like an empty cluster (docs/design.md §5.5, §8): a
denied watch is a plain 403 answer with no stream (tests/fixtures/kube-apiserver-1.28/
rbac_denials.json). While the fake denies ``list`` or ``watch`` of a resource the client needs,
the client is SUSPENDED with a reason naming the verb, the resource and the namespace, and its
reads raise BackendUnavailable saying so at once (well before ``sync_timeout``); once the
permission is granted it is RECONNECTED and sees what it missed."""

from __future__ import annotations

import queue
import time

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec
from testrigs.kube_fake import PODS, WORKER_METADATA, FakeKubeServer

WAIT = 10.0
PROMPTLY = 2.0  # seconds a refused read may take: sync_timeout (5 s) must not be waited for
SUSPENDED, RECONNECTED = ds.ConnectionState.SUSPENDED, ds.ConnectionState.RECONNECTED
CR = "dynamoworkermetadatas.nvidia.com"


def listen(client: ds.Discovery) -> queue.Queue[ds.StateChange]:
    seen: queue.Queue[ds.StateChange] = queue.Queue()
    client.add_state_listener(seen.put)
    return seen


def refused_promptly(read, permission: str) -> str:
    """``read()`` raises BackendUnavailable naming ``permission`` (e.g. "watch R in namespace default
    is forbidden"), within PROMPTLY seconds; the message."""
    began = time.monotonic()
    with pytest.raises(ds.BackendUnavailable) as refused:
        read()
    assert time.monotonic() - began < PROMPTLY
    message = str(refused.value)
    assert f"{permission} in namespace default is forbidden" in message and "403" in message, message
    return message


@pytest.mark.parametrize(
    ("mode", "resource", "verb"),
    [
        ("pod", "dynamoworkermetadatas", "watch"),
        ("pod", "dynamoworkermetadatas", "list"),
        ("pod", "endpointslices", "watch"),
        ("pod", "endpointslices", "list"),
        ("container", "pods", "watch"),
        ("container", "pods", "list"),
    ],
)
def test_a_stream_the_client_may_not_make_suspends_it_and_reads_say_why(server, pod_client, mode, resource, verb):
    other = pod_client("other", mode=mode, container_name="main")
    theirs = other.register(endpoint_spec(endpoint="theirs"))
    server.deny(resource, verb)
    client = pod_client("worker-0", mode=mode, container_name="main")
    qualified = {"dynamoworkermetadatas": CR, "endpointslices": "endpointslices.discovery.k8s.io"}.get(
        resource, resource
    )
    permission = f"{verb} {qualified}"
    refused_promptly(lambda: client.list(ds.Query.endpoints()), permission)
    refused_promptly(lambda: client.list_and_watch(ds.Query.endpoints()), permission)
    assert client.state is SUSPENDED
    assert permission in client._connection.history[-1].reason
    assert any(permission in why for why in client.status()["failing"].values())
    seen = listen(client)
    server.allow(resource, verb)
    back = seen.get(timeout=WAIT)  # the stream retries (5 s apart at most) and its watch opens
    assert (back.previous, back.state) == (SUSPENDED, RECONNECTED)
    assert client.list(ds.Query.endpoints()) == [theirs]
    later = other.register(endpoint_spec(endpoint="later"))
    assert set(client.list(ds.Query.endpoints())) == {theirs, later}  # and it watches


def test_a_watch_permission_revoked_while_running(server, pod_client):
    client, other = pod_client("worker-0"), pod_client("other")
    assert client.list(ds.Query.endpoints()) == []
    seen = listen(client)
    server.deny(WORKER_METADATA, "watch")
    server.end_watches(WORKER_METADATA)  # the watch resumes, and is refused
    suspended = seen.get(timeout=WAIT)
    assert suspended.state is SUSPENDED and f"watch {CR} in namespace default is forbidden" in suspended.reason
    other.register(endpoint_spec())  # what the client would otherwise miss without a word
    refused_promptly(lambda: client.list(ds.Query.endpoints()), f"watch {CR}")
    with pytest.raises(ds.BackendUnavailable, match="is forbidden"):
        client.get(other.list(ds.Query.endpoints())[0].id())
    server.allow(WORKER_METADATA, "watch")
    assert seen.get(timeout=WAIT).state is RECONNECTED
    assert len(client.list(ds.Query.endpoints())) == 1


def test_a_read_barrier_that_may_not_list_says_so(server, pod_client):
    client = pod_client("worker-0")
    assert client.list(ds.Query.endpoints()) == []  # Ready: its streams listed before the denial
    seen = listen(client)
    server.deny(WORKER_METADATA, "list")
    refused_promptly(lambda: client.list(ds.Query.endpoints()), f"list {CR}")
    assert seen.get(timeout=WAIT).state is SUSPENDED
    server.allow(WORKER_METADATA, "list")
    assert client.list(ds.Query.endpoints()) == []
    assert seen.get(timeout=WAIT).state is RECONNECTED


def test_a_denied_writer_is_told_at_once_and_its_reads_are_not(server, pod_client):
    """A write refused (403) is a BackendUnavailable at once, as before; reads are unaffected."""
    client = pod_client("worker-0")
    server.deny(WORKER_METADATA, "patch")
    with pytest.raises(ds.BackendUnavailable, match="403"):
        client.register(endpoint_spec())
    assert client.list(ds.Query.endpoints()) == []
    assert client.state is ds.ConnectionState.CONNECTED


def test_the_fake_denies_a_watch_with_a_plain_403(server: FakeKubeServer):
    """The premise (rbac_denials.json): no stream, a Status answer."""
    import urllib.error
    import urllib.request

    server.deny(PODS, "watch")
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(f"{server.url}/api/v1/namespaces/default/pods?watch=true", timeout=WAIT)
    assert denied.value.code == 403
