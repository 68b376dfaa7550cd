"""A reference-runtime 1.6.1 worker and a discovery-sync client on one Kubernetes namespace.

There is no real cluster: both talk to the in-process fake API server (``testrigs.kube_fake``) over
plain HTTP on loopback, the reference through ``KUBECONFIG`` with kube-rs, we through the official
client. Every worker runs as a ready pod of the fake (``POD_NAME``/``POD_UID``), whose
EndpointSlice the fake keeps as the EndpointSlice controller would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.kube import instance_id_for

import discovery_sync as ds
from testrigs.helpers import initial_state, next_event
from testrigs.kube_fake import AUTO_SLICE_NAME, ENDPOINT_SLICES, PODS, WORKER_METADATA, FakeKubeServer, RecordedRequest
from testrigs.reference import PeerError, RustPeer
from testrigs.waiting import wait_until
from tests.kube.rig import connect_pod

ENDPOINT = "pyns.backend.generate"
WAIT = 10.0  # bound on every wait for something that must happen
SLOW_WAIT = 30.0  # the bound for the reference's own registration of a new worker (see serve)
QUIET = 2.0  # how long something that must not happen is given to happen anyway
CR_PATH = "/apis/nvidia.com/v1alpha1/namespaces/default/dynamoworkermetadatas"
SLICE_PATH = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
DATA_MAPS = ("endpoints", "model_cards", "event_channels", "event_sources")


@pytest.fixture
def client(kube_server: FakeKubeServer, kubeconfig: Path) -> Iterator[ds.Discovery]:
    """Our client, as the ready pod ``py-0``."""
    client = connect_pod(kube_server, kubeconfig, "py-0")
    yield client
    client.shutdown()


def wait_added(watch: ds.Watch, timeout: float = WAIT) -> ds.DiscoveryInstance:
    event = next_event(watch, timeout)
    assert isinstance(event, ds.Added), event
    return event.instance


def our_endpoint() -> ds.EndpointSpec:
    return ds.EndpointSpec("pyns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1/py"))


def from_rust(request: RecordedRequest) -> bool:
    """kube-rs (as built into the reference) sends no User-Agent; the official Python client does."""
    return not any(name.lower() == "user-agent" for name in request.headers)


def is_list(request: RecordedRequest, path: str = CR_PATH) -> bool:
    return request.method == "GET" and request.path == path and "watch" not in request.query


def is_watch(request: RecordedRequest, path: str = CR_PATH) -> bool:
    return request.method == "GET" and request.path == path and request.query.get("watch") == "true"


def endpoints_in_cr(server: FakeKubeServer, cr_name: str) -> dict:
    cr = server.get(WORKER_METADATA, cr_name) or {}
    return (cr.get("spec") or {}).get("data", {}).get("endpoints", {})


def serve(peer: RustPeer, server: FakeKubeServer, pod_name: str) -> int:
    """``serve`` (the reference registers in the background) and wait until its CR holds the endpoint.

    The reference's own clients list the endpoint before that: its local view leads its CR.
    """
    instance_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    key = f"pyns/backend/generate/{instance_id:x}"
    try:  # in the background: it took over 10 s in one of three full runs on a slow machine
        wait_until(
            lambda: key in endpoints_in_cr(server, pod_name), f"{key} in the CR {pod_name}", SLOW_WAIT, interval=0.01
        )
    except AssertionError as exc:  # the short facts first: CI shows the start of a long message
        serving = peer.call("serving")["serving"]
        requests = [f"{r.method} {r.path} {r.query}" for r in server.requests][-20:]
        raise AssertionError(
            f"{exc}\nserve_endpoint: {serving}; requests still arriving: {server.requests_arriving()}"
            f"\nthe peer's log:\n{peer.log()[-3000:]}\nthe fake's last requests:\n" + "\n".join(requests)
        ) from None
    return instance_id


def uid_of(server: FakeKubeServer, pod_name: str) -> str:
    pod = server.get(PODS, pod_name)
    assert pod is not None, pod_name
    return pod["metadata"]["uid"]


# ----- 1. a Rust worker, seen by us ------------------------------------------------------------------
def test_a_rust_worker_is_listed_and_watched_with_its_exact_record(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")
    with client.list_and_watch(ds.Query.endpoints("pyns", "backend", "generate")) as watch:
        assert next_event(watch) == ds.Resync(())
        instance_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
        assert instance_id == instance_id_for("rust-0")  # the pod name's hash, not a random id
        endpoint = wait_added(watch)
        assert endpoint.instance_id == instance_id
        assert endpoint.transport.kind == "tcp"
        assert endpoint.transport.value.startswith("127.0.0.1:")
        assert endpoint.transport.value.endswith(f"/{instance_id:x}/pyns/backend/generate")
        assert endpoint.device_type == "cuda"
        assert endpoint.request_plane_codec == "msgpack"
        assert client.list(ds.Query.endpoints("pyns")) == [endpoint]
        peer.shutdown()
        assert next_event(watch) == ds.Removed(endpoint.id())
    # the reference does not delete its CR at shutdown: it applies it once more, emptied (the map it had
    # filled is stored as null by server-side apply, as the real server does: ssa_empty_map.json)
    cr = kube_server.get(WORKER_METADATA, "rust-0")
    assert cr is not None and cr["spec"]["data"] == {name: None if name == "endpoints" else {} for name in DATA_MAPS}


def test_a_killed_rust_worker_is_removed_with_its_pod(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")
    with client.list_and_watch(ds.Query.endpoints("pyns")) as watch:
        next_event(watch)
        peer.call("serve", endpoint=ENDPOINT)
        endpoint = wait_added(watch)
        peer.kill()
        # no lease on Kubernetes: the CR and the ready pod outlive the process, and so does the record
        assert client.list(ds.Query.endpoints("pyns")) == [endpoint]
        kube_server.delete_pod("rust-0")
        assert next_event(watch) == ds.Removed(endpoint.id())
    kube_server.wait_for_garbage_collection()  # the collector acts soon after the pod is gone
    assert kube_server.get(WORKER_METADATA, "rust-0") is None  # collected through its ownerReference
    slice_ = kube_server.get(ENDPOINT_SLICES, AUTO_SLICE_NAME)
    assert "rust-0" not in [e["targetRef"]["name"] for e in slice_["endpoints"] or []]  # null when empty


# ----- 2. our worker, seen by Rust ---------------------------------------------------------------------
def test_our_registration_reaches_the_rust_client_within_a_second(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")
    peer.call("ids", endpoint=ENDPOINT)  # the Rust client is up before we register
    ours = client.register(our_endpoint())
    assert ours.instance_id == client.instance_id == instance_id_for("py-0")
    seen = peer.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=1.0)
    assert seen["seen"], seen
    listed = peer.call("instances", endpoint=ENDPOINT)["instances"]
    assert [(i["instance_id"], i["transport"][1]) for i in listed] == [(client.instance_id, "127.0.0.1:1/py")]
    client.shutdown()
    gone = peer.call("wait_ids", endpoint=ENDPOINT, absent=[ours.instance_id], timeout=1.0)
    assert gone["seen"], gone
    assert kube_server.get(WORKER_METADATA, "py-0") is None  # unlike the reference, we delete our CR


def test_the_reference_reads_our_whole_cr_or_nothing_of_it(client, rust_kube_peer):
    """The reference parses a CR as one document: one record it cannot read (an ``http`` transport,
    which it does not know) hides every record of that worker from a reference client that had no
    earlier valid version of the CR; one that had keeps showing that version."""
    scope = ds.EventScope.for_endpoint(ds.EndpointId("pyns", "backend", "generate"))
    ours = client.register(our_endpoint())
    client.register(ds.EventChannelSpec(scope, "kv-events", ds.ZmqTransport("tcp://127.0.0.1:1")))
    client.register(ds.EventSourceSpec(scope, "kv-events", 12345, {"worker": {"worker_id": ours.instance_id}}))
    client.register(ds.ModelSpec("pyns", "backend", "generate", {"display_name": "tiny", "runtime_config": {}}))
    early = rust_kube_peer("rust-0")  # everything we wrote so far is readable for it
    assert early.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=WAIT)["seen"]

    http = client.register(ds.EndpointSpec("pyns", "backend", "other", ds.Transport.http("http://127.0.0.1:1/x")))
    late = rust_kube_peer("rust-1")
    hidden = late.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=QUIET)
    assert not hidden["seen"], hidden
    for peer in (late, early):
        wait_until(
            lambda peer=peer: "unknown variant `http`" in peer.log(),
            "the reference's warning about our CR",
            WAIT,
            interval=0.01,  # the store state polled has no notification of its own
        )
    assert early.call("ids", endpoint=ENDPOINT)["ids"] == [ours.instance_id]  # its last valid version

    client.unregister(http)
    assert late.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=WAIT)["seen"]


# ----- 3. side by side ---------------------------------------------------------------------------------
def test_rust_and_our_crs_live_side_by_side(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")
    rust_id = serve(peer, kube_server, "rust-0")
    ours = client.register(our_endpoint())
    assert peer.call("wait_ids", endpoint=ENDPOINT, present=[rust_id, ours.instance_id], timeout=WAIT)["seen"]
    versions = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in kube_server.objects(WORKER_METADATA)}
    with client.list_and_watch(ds.Query.endpoints("pyns")) as watch:
        _, resync = initial_state(watch)
        assert {i.instance_id for i in resync.instances} == {rust_id, ours.instance_id}
        deadline = time.monotonic() + 3 * QUIET
        while time.monotonic() < deadline:
            with pytest.raises(ds.WatchTimeout):  # any event here would be a record lost or rewritten
                watch.get(timeout=min(QUIET / 2, max(0.0, deadline - time.monotonic())))
            assert peer.call("ids", endpoint=ENDPOINT)["ids"] == sorted([rust_id, ours.instance_id])
    crs = {o["metadata"]["name"]: o for o in kube_server.objects(WORKER_METADATA)}
    assert {name: cr["metadata"]["resourceVersion"] for name, cr in crs.items()} == versions  # nobody rewrote
    for name, instance_id in (("rust-0", rust_id), ("py-0", ours.instance_id)):
        cr = crs[name]
        assert cr["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "blockOwnerDeletion": False,
                "controller": True,
                "kind": "Pod",
                "name": name,
                "uid": uid_of(kube_server, name),
            }
        ]
        fields = cr["metadata"]["managedFields"]
        assert [(f["manager"], f["operation"], f["apiVersion"]) for f in fields] == [
            ("dynamo-worker", "Apply", "nvidia.com/v1alpha1")
        ]
        assert set(fields[0]["fieldsV1"]["f:metadata"]) == {"f:ownerReferences"}
        assert set(fields[0]["fieldsV1"]["f:spec"]["f:data"]) == {f"f:{m}" for m in DATA_MAPS}
        assert set(cr["spec"]["data"]) == set(DATA_MAPS)
        [key] = cr["spec"]["data"]["endpoints"]
        assert key == f"pyns/backend/generate/{instance_id:x}"  # both sides key records the same way


# ----- 4. model cards ----------------------------------------------------------------------------------
def test_models_and_taints_cross_in_both_directions(client, rust_kube_peer, tiny_model):
    peer = rust_kube_peer("rust-0")
    rust_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    with client.list_and_watch(ds.Query.models("pyns", "backend", "generate")) as watch:
        next_event(watch)
        peer.call("register_model", endpoint=ENDPOINT, path=str(tiny_model), name="tiny", topology={"zone": "z1"})
        model = wait_added(watch)
        assert (model.instance_id, model.card_json["display_name"]) == (rust_id, "tiny")
        assert model.card_json["source_path"] == str(tiny_model)
        assert model.card_json["runtime_config"]["taints"] == ["dynamo.topology/zone=z1"]
        assert client.list(ds.Query.models("pyns")) == [model]
        peer.call("update_taints", endpoint=ENDPOINT, taints=["zeta", "alpha"])
        expected = ("alpha", "dynamo.topology/zone=z1", "zeta")
        assert next_event(watch) == ds.ModelTaintsUpdated(model.id(), expected)

    # the other way: the runtime's own MDC watch (its FpmEventSubscriber tracks the model cards of
    # an endpoint) reflects our card and our taint update
    with pytest.raises(ds.ConflictError):  # a different model on that endpoint is refused, as Rust does
        client.register(ds.ModelSpec("pyns", "backend", "generate", {"display_name": "other"}))
    card = {"display_name": "tiny", "source_path": str(tiny_model), "runtime_config": {}}
    ours = client.register(ds.ModelSpec("pyns", "backend", "generate", card))
    assert rust_cards(peer, client.instance_id, lambda c: c is not None)["display_name"] == "tiny"
    client.update_model_taints(ours.id(), ["gpu=none", "b"])
    updated = rust_cards(peer, client.instance_id, lambda c: c["runtime_config"].get("taints") == ["b", "gpu=none"])
    assert updated["runtime_config"]["taints"] == ["b", "gpu=none"]


def rust_cards(peer: RustPeer, instance_id: int, done: Callable, timeout: float = WAIT):
    """Poll the reference peer's view of one worker's model card until ``done(card)``."""
    deadline = time.monotonic() + timeout
    while True:
        card = peer.call("model_cards", endpoint=ENDPOINT)["cards"].get(str(instance_id))
        if done(card):
            return card
        assert time.monotonic() < deadline, f"the reference peer shows {card!r}"
        time.sleep(0.01)  # the runtime offers no notification for this view, only a snapshot


# ----- 5. event channels -------------------------------------------------------------------------------
def test_a_rust_event_publisher_is_found_by_scope_and_topic(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0", isolate=True)  # its ZMQ socket binds 0.0.0.0
    rust_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    scope = ds.EventScope.for_endpoint(ds.EndpointId("pyns", "backend", "generate"))
    channels = client.list_and_watch(ds.Query.event_channels(scope, "kv-events"))
    sources = client.list_and_watch(ds.Query.event_sources(scope, "kv-events"))
    with channels, sources:
        next_event(channels)
        next_event(sources)
        peer.call("kv_publisher", endpoint=ENDPOINT)
        channel = wait_added(channels)
        source = wait_added(sources)
    assert channel.scope == scope and channel.topic == "kv-events"
    assert channel.transport.kind() is ds.EventTransportKind.ZMQ
    assert channel.transport.address().startswith("tcp://127.0.0.1:")
    assert source.publisher_id == channel.instance_id < 2**53
    assert source.metadata["worker"]["worker_id"] == rust_id
    assert client.list(ds.Query.event_channels(scope, "kv-events")) == [channel]
    # on Kubernetes the reference stores the channel with the legacy namespace/component fields too
    [stored] = kube_server.get(WORKER_METADATA, "rust-0")["spec"]["data"]["event_channels"].values()
    assert (stored["scope"]["kind"], stored["namespace"], stored["component"]) == ("endpoint", "pyns", "backend")


# ----- 6. kube-rs against the fake ------------------------------------------------------------------------
def test_kube_rs_lists_watches_with_bookmarks_and_applies(rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")  # alone: every request and CR watch stream is the reference's
    serve(peer, kube_server, "rust-0")
    kube_server.wait_for_watchers(WORKER_METADATA, 1, timeout=WAIT)  # the watches start beside the apply
    kube_server.wait_for_watchers(ENDPOINT_SLICES, 1, timeout=WAIT)
    rust = kube_server.requests
    assert all(from_rust(r) for r in rust)
    selector = "nvidia.com/dynamo-discovery-enabled=true"
    lists = [(r.path, r.query) for r in rust if is_list(r) or is_list(r, SLICE_PATH)]
    assert sorted(lists) == [
        (SLICE_PATH, {"labelSelector": selector, "limit": "500"}),
        (CR_PATH, {"limit": "500"}),
    ]
    watches = [r for r in rust if is_watch(r) or is_watch(r, SLICE_PATH)]
    assert len(watches) == 2
    for request in watches:
        assert {k: request.query[k] for k in ("timeoutSeconds", "allowWatchBookmarks")} == {
            "timeoutSeconds": "290",
            "allowWatchBookmarks": "true",
        }
    [apply] = [r for r in rust if r.method == "PATCH"]
    assert apply.path == f"{CR_PATH}/rust-0"
    assert apply.query == {"force": "true", "fieldManager": "dynamo-worker"}
    assert apply.content_type == "application/apply-patch+yaml"
    body = json.loads(apply.body)  # JSON, as YAML allows
    assert list(body) == ["apiVersion", "kind", "metadata", "spec"]
    assert list(body["spec"]["data"]) == list(DATA_MAPS)

    # bookmarks: the CR watch follows the resourceVersion they carry while no CR of its namespace
    # changes, so a watch the server ends is resumed from there, not from the version it was listed at
    [cr_watch] = [r for r in watches if r.path == CR_PATH]
    listed_at = int(cr_watch.query["resourceVersion"])
    # a CR in another namespace: no event on this watch, but the watch cache's version (which a
    # real server's bookmarks carry, and only once it moved past the stream's start) moves on
    kube_server.upsert(WORKER_METADATA, {"metadata": {"name": "elsewhere", "namespace": "other"}, "spec": {"data": {}}})
    target = kube_server.resource_version
    assert int(target) > listed_at
    # two more bookmarks on its CR stream: the later one carries the new version
    kube_server.wait_for_bookmarks(WORKER_METADATA, kube_server.bookmarks_sent(WORKER_METADATA) + 2, timeout=WAIT)
    kube_server.clear_requests()
    kube_server.end_watches(WORKER_METADATA)
    resumed = kube_server.wait_for_request(lambda r: from_rust(r) and is_watch(r), timeout=WAIT)
    assert resumed.query["resourceVersion"] == target
    assert not [r for r in kube_server.requests if is_list(r)]  # resumed, not listed again


def test_a_failed_apply_is_not_retried_by_the_reference(rust_kube_peer, kube_server):
    """docs/design.md §8 has CR writes retried for 10 s; the 1.6.1 reference fails the call at once."""
    peer = rust_kube_peer("rust-0")
    rust_id = serve(peer, kube_server, "rust-0")
    kube_server.fail_next(1, 503, resource=WORKER_METADATA, verb="patch")
    kube_server.clear_requests()
    with pytest.raises(PeerError, match="Unable to unregister endpoint instance"):
        peer.call("unregister_instance", endpoint=ENDPOINT)
    assert [r.method for r in kube_server.requests if r.method != "GET"] == ["PATCH"]  # one attempt
    assert list(endpoints_in_cr(kube_server, "rust-0")) == [f"pyns/backend/generate/{rust_id:x}"]  # unchanged
    peer.call("unregister_instance", endpoint=ENDPOINT)  # its local state was rolled back: this works
    assert endpoints_in_cr(kube_server, "rust-0") is None  # emptied by apply: stored as null


def test_kube_rs_lists_again_after_410_and_sees_later_changes(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")
    rust_id = serve(peer, kube_server, "rust-0")
    assert peer.call("wait_ids", endpoint=ENDPOINT, present=[rust_id], timeout=WAIT)["seen"]

    # the watch cache re-lists (its etcd watch failed, say) after the revision moved on: the open
    # watch ends, its resume gets 200 + ERROR 410 "too old resource version": list, then watch again
    kube_server.create_pod("bystander", ready=False)
    kube_server.clear_requests()
    kube_server.reinitialise_watch_cache(WORKER_METADATA)
    kube_server.wait_for_request(lambda r: from_rust(r) and is_list(r), timeout=WAIT)
    ours = client.register(our_endpoint())
    assert peer.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=WAIT)["seen"]

    # a 410 when resuming: the watch cache's window moved past the version it needs while it was refused
    kube_server.deny(WORKER_METADATA, "watch")
    kube_server.clear_requests()
    kube_server.end_watches(WORKER_METADATA)
    refused = kube_server.wait_for_request(lambda r: from_rust(r) and is_watch(r), timeout=WAIT)
    client.shutdown()  # a change the Rust side cannot watch
    kube_server.reinitialise_watch_cache(WORKER_METADATA)
    kube_server.allow(WORKER_METADATA, "watch")
    assert peer.call("wait_ids", endpoint=ENDPOINT, absent=[ours.instance_id], timeout=WAIT)["seen"]
    stale = refused.query["resourceVersion"]
    kube_server.wait_for_request(
        lambda r: from_rust(r) and is_watch(r) and int(r.query["resourceVersion"]) > int(stale), timeout=WAIT
    )
    rust = [r for r in kube_server.requests if from_rust(r) and (is_list(r) or is_watch(r))]
    relist = next(i for i, r in enumerate(rust) if is_list(r))
    # watches from the stale version (403 while denied, then 410), a list, a watch from the list's version
    assert relist >= 2 and all(is_watch(r) and r.query["resourceVersion"] == stale for r in rust[:relist])
    assert is_watch(rust[relist + 1]) and int(rust[relist + 1].query["resourceVersion"]) > int(stale)


def test_each_side_serves_only_the_others_ready_workers(client, rust_kube_peer, kube_server):
    peer = rust_kube_peer("rust-0")
    rust_id = serve(peer, kube_server, "rust-0")
    ours = client.register(our_endpoint())
    assert peer.call("wait_ids", endpoint=ENDPOINT, present=[rust_id, ours.instance_id], timeout=WAIT)["seen"]
    with client.list_and_watch(ds.Query.endpoints("pyns")) as watch:
        _, resync = initial_state(watch)
        [rust_endpoint] = [i for i in resync.instances if i.instance_id == rust_id]

        kube_server.set_pod_ready("py-0", False)
        assert peer.call("wait_ids", endpoint=ENDPOINT, absent=[ours.instance_id], timeout=WAIT)["seen"]
        kube_server.set_pod_ready("rust-0", False)
        assert next_event(watch) == ds.Removed(rust_endpoint.id())
        assert client.list(ds.Query.endpoints("pyns")) == [ours]  # our own records stay ours to see

        kube_server.set_pod_ready("rust-0", True)
        assert wait_added(watch) == rust_endpoint
        kube_server.set_pod_ready("py-0", True)
        assert peer.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=WAIT)["seen"]


def test_a_cr_owned_by_an_earlier_pod_of_that_name_is_served_by_neither_side(client, rust_kube_peer, kube_server):
    """A pod recreated under the same name (a StatefulSet restart) before the old CR was collected."""
    peer = rust_kube_peer("rust-0")
    rust_id = serve(peer, kube_server, "rust-0")
    ours = client.register(our_endpoint())
    assert peer.call("wait_ids", endpoint=ENDPOINT, present=[rust_id, ours.instance_id], timeout=WAIT)["seen"]
    with client.list_and_watch(ds.Query.endpoints("pyns")) as watch:
        _, resync = initial_state(watch)
        [rust_endpoint] = [i for i in resync.instances if i.instance_id == rust_id]
        uids = {name: uid_of(kube_server, name) for name in ("py-0", "rust-0")}
        for name in uids:  # the old pods go without their CRs, new ones of the same names come up ready
            kube_server.delete(PODS, name, cascade=False)
            kube_server.create_pod(name)
        assert next_event(watch) == ds.Removed(rust_endpoint.id())
        assert peer.call("wait_ids", endpoint=ENDPOINT, absent=[ours.instance_id], timeout=WAIT)["seen"]
        late = peer.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=QUIET)
        assert not late["seen"], late  # ready, same name, but the CR names another pod uid
        with pytest.raises(ds.WatchTimeout):
            watch.get(timeout=0)

        for name, uid in uids.items():  # the pods the CRs name are back: both served again
            kube_server.create_pod(name, uid=uid)
        assert wait_added(watch) == rust_endpoint
        assert peer.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=WAIT)["seen"]
