"""The ready-gated view: readiness, ownership, pod deletion, bad data, legacy data, 410 recovery."""

from __future__ import annotations

import json

import pytest

import discovery_sync as ds
from testrigs.helpers import assert_quiet, endpoint_spec, ids, initial_state, model_spec, next_event
from testrigs.kube_fake import WORKER_METADATA
from tests.unit.test_fixture import FIXTURES

FIXTURE = FIXTURES / "legacy_v1_2_worker_metadata.json"
QUIET = 0.5


def owned_by(server, pod_name: str) -> list[dict]:
    uid = server.get("pods", pod_name)["metadata"]["uid"]
    return [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid, "controller": True}]


def test_a_pod_that_stops_being_ready_leaves_the_view_and_comes_back(server, pod_client):
    worker, reader = pod_client("worker-a"), pod_client("reader")
    endpoint, model = worker.register(endpoint_spec()), worker.register(model_spec())
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        _, resync = initial_state(watch)
        assert resync.instances == (endpoint,)
        server.set_pod_ready("worker-a", False)
        assert next_event(watch) == ds.Removed(endpoint.id())
        assert reader.list(ds.Query.endpoints()) == [] and reader.list(ds.Query.models()) == []
        # a pod still sees its own records, ready or not
        assert worker.list(ds.Query.endpoints()) == [endpoint]
        server.set_pod_ready("worker-a", True)
        assert next_event(watch) == ds.Added(endpoint)
        assert reader.list(ds.Query.models()) == [model]
        assert_quiet(watch, QUIET)


def test_deleting_a_pod_collects_its_cr_and_removes_its_records(server, pod_client):
    worker, reader = pod_client("worker-a"), pod_client("reader")
    records = [worker.register(endpoint_spec(endpoint=f"ep{i}")) for i in range(3)]
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        server.delete_pod("worker-a", graceful=True)
        assert {next_event(watch) for _ in records} == {ds.Removed(r.id()) for r in records}
        server.wait_for_garbage_collection()  # the collector acts soon after the pod is gone
        assert server.get(WORKER_METADATA, "worker-a") is None  # garbage-collected through the ownerReference
        assert reader.list(ds.Query.endpoints()) == []
        assert_quiet(watch, QUIET)


def test_two_ready_uids_for_one_name_exclude_the_worker(server, pod_client):
    worker, reader = pod_client("worker-a"), pod_client("reader")
    endpoint = worker.register(endpoint_spec())
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        server.upsert_endpoint_slice("stale", [("worker-a", "uid-of-the-previous-pod", True)])
        assert next_event(watch) == ds.Removed(endpoint.id())
        server.delete_endpoint_slice("stale")
        assert next_event(watch) == ds.Added(endpoint)


def test_incomplete_or_unready_slice_endpoints_do_not_count(server, pod_client):
    reader = pod_client("reader")
    server.create_pod("ghost", ready=False)
    uid = server.get("pods", "ghost")["metadata"]["uid"]
    data = {"endpoints": {"x": endpoint_spec().to_instance(1).to_dict()}}
    server.upsert(
        WORKER_METADATA,
        {"metadata": {"name": "ghost", "ownerReferences": owned_by(server, "ghost")}, "spec": {"data": data}},
    )
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert next_event(watch) == ds.Resync(())
        server.upsert_endpoint_slice("partial", [("ghost", None, True), (None, uid, True)])
        assert_quiet(watch, QUIET)
        server.upsert_endpoint_slice("partial", [("ghost", uid, True)])
        assert next_event(watch) == ds.Added(endpoint_spec().to_instance(1))


def test_a_cr_owned_by_another_pod_uid_is_not_served(server, pod_client):
    reader = pod_client("reader")
    server.set_garbage_collector(False)  # a real one deletes a CR whose owner uid is gone within ~70 ms
    server.create_pod("worker-a")
    stale_owner = [{"apiVersion": "v1", "kind": "Pod", "name": "worker-a", "uid": "previous-incarnation"}]
    data = {"endpoints": {"x": endpoint_spec().to_instance(1).to_dict()}}
    server.upsert(
        WORKER_METADATA, {"metadata": {"name": "worker-a", "ownerReferences": stale_owner}, "spec": {"data": data}}
    )
    assert reader.list(ds.Query.endpoints()) == []
    server.upsert(
        WORKER_METADATA,
        {"metadata": {"name": "worker-a", "ownerReferences": owned_by(server, "worker-a")}, "spec": {"data": data}},
    )
    assert reader.list(ds.Query.endpoints()) == [endpoint_spec().to_instance(1)]


def test_unparsable_data_keeps_the_last_valid_records_while_the_uids_hold(server, pod_client):
    worker, reader = pod_client("worker-a"), pod_client("reader")
    endpoint = worker.register(endpoint_spec())
    cr = server.get(WORKER_METADATA, "worker-a")
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        for data in (None, ["not", "maps"], {"endpoints": "nope"}):
            server.upsert(WORKER_METADATA, {**cr, "spec": {"data": data}})
            assert_quiet(watch, QUIET / 2)
            assert reader.list(ds.Query.endpoints()) == [endpoint]
        # one bad record keeps its last value; a good new one next to it is taken
        fresh = endpoint_spec(endpoint="fresh").to_instance(worker.instance_id)
        bad = {endpoint.id().to_path(): {"type": "Endpoint"}, fresh.id().to_path(): fresh.to_dict()}
        server.upsert(WORKER_METADATA, {**cr, "spec": {"data": {"endpoints": bad}}})
        assert next_event(watch) == ds.Added(fresh)
        assert set(reader.list(ds.Query.endpoints())) == {endpoint, fresh}
        # a new object (new uid) under the same name starts from nothing
        recreated = {**cr, "metadata": {**cr["metadata"], "uid": "new-uid"}, "spec": {"data": None}}
        server.upsert(WORKER_METADATA, recreated)
        assert {next_event(watch), next_event(watch)} == {ds.Removed(endpoint.id()), ds.Removed(fresh.id())}


def test_the_legacy_v1_2_document_is_read(server, pod_client):
    reader = pod_client("reader")
    server.create_pod("legacy-worker")
    legacy = json.loads(FIXTURE.read_text())
    legacy["metadata"]["ownerReferences"] = owned_by(server, "legacy-worker")
    server.upsert(WORKER_METADATA, legacy)
    (endpoint,) = reader.list(ds.Query.endpoints("dynamo"))
    assert (endpoint.instance_id, endpoint.transport.to_json_value()) == (42, {"nats_tcp": "dynamo.backend.generate"})
    (model,) = reader.list(ds.Query.models("dynamo", "backend", "generate"))
    assert model.model_suffix is None and model.card_json == {"display_name": "Qwen/Qwen3-0.6B"}
    channels = {c.topic: c for c in reader.list(ds.Query.event_channels())}
    assert channels["kv-events"].scope == ds.EventScope.for_component("dynamo", "backend")
    assert channels["kv_metrics"].scope == ds.EventScope.for_namespace("dynamo")
    assert channels["kv_metrics"].transport.address() == "namespace.dynamo"
    assert reader.list(ds.Query.event_sources()) == []


def test_missed_changes_and_a_resync_after_the_history_was_compacted(server, pod_client):
    writer, watcher = pod_client("writer"), pod_client("watcher")
    gone = writer.register(endpoint_spec(endpoint="gone"))
    model = writer.register(model_spec())
    with watcher.list_and_watch(ds.Query.endpoints()) as endpoints, watcher.list_and_watch(ds.Query.models()) as models:
        initial_state(endpoints)
        initial_state(models)
        # the watches go away and cannot come back while the writer changes things
        server.deny("dynamoworkermetadatas", "watch")
        server.end_watches()
        fresh = writer.register(endpoint_spec(endpoint="fresh"))
        writer.unregister(gone)
        tainted = writer.update_model_taints(model.id(), ["gpu=a100"])
        # ... and the watch cache re-lists (its etcd watch failed, say): the versions they would resume
        # from are older than its new window: 410, list again
        server.reinitialise_watch_cache("dynamoworkermetadatas")
        server.allow("dynamoworkermetadatas", "watch")
        # a re-list of the readiness objects (their watch ended too) may resync the old state first
        changes, resync = _changes_until(endpoints, ds.Resync((fresh,)), unchanged=ds.Resync((gone,)))
        assert changes == {ds.Added(fresh), ds.Removed(gone.id())} and resync == ds.Resync((fresh,))
        changes, resync = _changes_until(models, ds.Resync((tainted,)), unchanged=ds.Resync((model,)))
        assert changes == {ds.ModelTaintsUpdated(model.id(), ("gpu=a100",))}
        assert watcher.daemon.status()["resyncs"] >= 1
        # and the watches go on
        later = writer.register(endpoint_spec(endpoint="later"))
        assert _next_change(endpoints, unchanged=ds.Resync((fresh,))) == ds.Added(later)
        with pytest.raises(ds.WatchTimeout):
            _next_change(models, unchanged=ds.Resync((tainted,)), timeout=QUIET)
    assert ids(watcher.list(ds.Query.endpoints())) == {fresh.id(), later.id()}


# The readiness objects' watch ends and may have to re-list (410) at any point of these tests; a
# re-list resyncs every feed with the state of that moment, so a Resync of an unchanged state may
# come between the changes a test waits for.
def _next_change(watch: ds.Watch, *, unchanged: ds.Resync, timeout: float = 10.0) -> ds.DiscoveryEvent:
    """The next event that is not a Resync of the ``unchanged`` state."""
    while (event := next_event(watch, timeout=timeout)) == unchanged:
        pass
    return event


def _changes_until(watch: ds.Watch, final: ds.Resync, *, unchanged: ds.Resync) -> tuple[set, ds.Resync]:
    """The changes a watch delivers up to the Resync ``final``, with that Resync; a Resync of the
    ``unchanged`` state before them is allowed (a re-list that found nothing new yet)."""
    changes: set = set()
    while True:
        event = next_event(watch)
        if event == final:
            return changes, event
        if isinstance(event, ds.Resync):
            assert event == unchanged and not changes, event
            continue
        changes.add(event)


def test_container_mode_readiness_is_per_container(server, connect_as):
    pod = server.create_pod("pod-a", containers=("main", "sidecar"))
    uid = pod["metadata"]["uid"]
    main = connect_as(pod_name="pod-a", pod_uid=uid, mode="container", container_name="main")
    sidecar = connect_as(pod_name="pod-a", pod_uid=uid, mode="container", container_name="sidecar")
    reader_pod = server.create_pod("reader")
    reader = connect_as(
        pod_name="reader", pod_uid=reader_pod["metadata"]["uid"], mode="container", container_name="main"
    )
    main_endpoint = main.register(endpoint_spec(endpoint="main"))
    sidecar_endpoint = sidecar.register(endpoint_spec(endpoint="sidecar"))
    assert main_endpoint.instance_id != sidecar_endpoint.instance_id
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        _, resync = initial_state(watch)
        assert set(resync.instances) == {main_endpoint, sidecar_endpoint}
        server.set_pod_ready("pod-a", False, container="sidecar")
        assert next_event(watch) == ds.Removed(sidecar_endpoint.id())
        assert reader.list(ds.Query.endpoints()) == [main_endpoint]
        server.set_pod_ready("pod-a", True, container="sidecar")
        assert next_event(watch) == ds.Added(sidecar_endpoint)


def test_check_connection_names_the_fix(server, pod_client):
    client = pod_client("worker-0")
    client.list(ds.Query.endpoints())  # the daemon is Ready: the probe alone is being tested
    server.clear_requests()  # (a consistent read asks for a page of one too)
    client.check_connection()
    probes = [r for r in server.requests if r.path.endswith("/dynamoworkermetadatas") and r.query.get("limit") == "1"]
    assert len(probes) == 1
    server.deny("dynamoworkermetadatas", "list")
    with pytest.raises(ds.BackendUnavailable) as denied:
        client.check_connection()
    assert (
        "403" in str(denied.value)
        and 'may not list dynamoworkermetadatas.nvidia.com in the namespace "default"; grant the RBAC printed by '
        "`discovery-sync manifests --rbac`"
        in str(denied.value)
    )
    server.allow("dynamoworkermetadatas", "list")
    client.check_connection()
    server.set_crd_installed(False)
    with pytest.raises(ds.BackendUnavailable) as missing:
        client.check_connection()
    assert "404" in str(missing.value) and "install the DynamoWorkerMetadata CRD" in str(missing.value)


def test_a_lagging_consumer_gets_the_missed_changes_and_a_resync(pod_client):
    client = pod_client("worker-0")
    with client.list_and_watch(ds.Query.endpoints(), queue_size=4) as watch:
        assert next_event(watch) == ds.Resync(())
        # own writes reach the view (and its watches) before register() returns
        registered = [client.register(endpoint_spec(endpoint=f"e{i}")) for i in range(20)]
        for record in registered[:5]:
            client.unregister(record)
        expected = {r.id(): r for r in registered[5:]}
        events = []
        while not events or not isinstance(events[-1], ds.Resync):
            events.append(next_event(watch))
        assert {i.id(): i for i in events[-1].instances} == expected
        state: dict = {}
        for event in events[:-1]:
            if isinstance(event, ds.Added):
                state[event.instance.id()] = event.instance
            else:
                state.pop(event.id)
        assert state == expected
        assert len(events) < 1 + 25  # it lagged: not every change came through one by one
        assert_quiet(watch, QUIET)
