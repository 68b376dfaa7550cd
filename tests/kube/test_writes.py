"""What this pod writes: the whole CR by server-side apply, retried, rolled back when it fails."""

from __future__ import annotations

import json
import logging
import time

import pytest
from discovery_sync.backends.kube.identity import instance_id_for

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, model_spec
from testrigs.kube_fake import WORKER_METADATA

CR_PATH = "/apis/nvidia.com/v1alpha1/namespaces/default/dynamoworkermetadatas"
EMPTY = {"endpoints": {}, "model_cards": {}, "event_channels": {}, "event_sources": {}}


def holds_nothing(data: dict) -> bool:
    """Whether every map of ``spec.data`` is empty: ``{}``, or ``null``, which server-side apply stores
    for a map the applier emptied (tests/fixtures/kube-apiserver-1.28/ssa_empty_map.json)."""
    return data.keys() == EMPTY.keys() and not any(data.values())


def patches(server, name: str = "worker-0"):
    return [r for r in server.requests if r.method == "PATCH" and r.path == f"{CR_PATH}/{name}"]


def test_register_applies_the_whole_cr_as_the_reference_does(server, pod_client):
    client = pod_client("worker-0")
    assert client.instance_id == 1186445869714687
    endpoint = client.register(endpoint_spec())
    (request,) = patches(server)
    assert request.content_type == "application/apply-patch+yaml"
    assert request.query["fieldManager"] == "dynamo-worker"
    assert request.query["force"] == "true"
    uid = server.get("pods", "worker-0")["metadata"]["uid"]
    assert json.loads(request.body) == {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoWorkerMetadata",
        "metadata": {
            "name": "worker-0",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "blockOwnerDeletion": False,
                    "controller": True,
                    "kind": "Pod",
                    "name": "worker-0",
                    "uid": uid,
                }
            ],
        },
        "spec": {"data": {**EMPTY, "endpoints": {"ns/backend/generate/43710f49c0cff": endpoint.to_dict()}}},
    }
    stored = server.get(WORKER_METADATA, "worker-0")
    assert stored["metadata"]["ownerReferences"] == json.loads(request.body)["metadata"]["ownerReferences"]
    assert [(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]] == [("dynamo-worker", "Apply")]
    assert stored["spec"]["data"]["endpoints"] == {"ns/backend/generate/43710f49c0cff": endpoint.to_dict()}


def test_every_change_rewrites_all_four_maps(server, pod_client):
    client = pod_client("worker-0")
    scope = ds.EventScope.for_namespace("ns")
    endpoint = client.register(endpoint_spec())
    model = client.register(model_spec())
    channel = client.register(ds.EventChannelSpec(scope, "kv-events", ds.ZmqTransport("tcp://127.0.0.1:5557")))
    source = client.register(ds.EventSourceSpec(scope, "kv-events", 7, {"role": "x"}))
    data = server.get(WORKER_METADATA, "worker-0")["spec"]["data"]
    assert data == {
        "endpoints": {endpoint.id().to_path(): endpoint.to_dict()},
        "model_cards": {model.id().to_path(): model.to_dict()},
        "event_channels": {channel.id().to_path(): channel.to_dict()},
        "event_sources": {source.id().to_path(): source.to_dict()},
    }
    updated = client.update_model_taints(model.id(), ["gpu=a100"])
    client.unregister(endpoint)
    data = server.get(WORKER_METADATA, "worker-0")["spec"]["data"]
    assert data["endpoints"] is None and data["model_cards"] == {model.id().to_path(): updated.to_dict()}
    assert len(patches(server)) == 6
    client.unregister(source)
    quiet = client.register(ds.EventSourceSpec(scope, "kv-events", 8, {}))
    for record in (model, channel, quiet):
        client.unregister(record)
    assert holds_nothing(server.get(WORKER_METADATA, "worker-0")["spec"]["data"])


def test_unregistering_an_event_source_with_metadata_removes_it_from_the_cr(server, pod_client):
    client = pod_client("worker-0")
    source = client.register(ds.EventSourceSpec(ds.EventScope.for_namespace("ns"), "kv-events", 7, {"role": "x"}))
    client.unregister(source)
    assert holds_nothing(server.get(WORKER_METADATA, "worker-0")["spec"]["data"])


def test_registering_an_existing_record_writes_nothing(server, pod_client):
    client = pod_client("worker-0")
    stored = client.register(endpoint_spec(port=1))
    assert client.register(endpoint_spec(port=2)) == stored
    assert len(patches(server)) == 1


def test_shutdown_deletes_the_cr(server, pod_client):
    client = pod_client("worker-0")
    client.register(endpoint_spec())
    uid = server.get(WORKER_METADATA, "worker-0")["metadata"]["uid"]
    client.shutdown()
    (delete,) = [r for r in server.requests if r.method == "DELETE"]
    assert delete.path == f"{CR_PATH}/worker-0"
    assert json.loads(delete.body)["preconditions"]["uid"] == uid
    assert server.get(WORKER_METADATA, "worker-0") is None
    assert client.daemon.threads() == []


def test_a_client_that_never_wrote_deletes_nothing(server, pod_client):
    pod_client("worker-0").shutdown()
    assert [r for r in server.requests if r.method in ("DELETE", "PATCH")] == []


def test_failed_writes_roll_back_the_local_state(server, pod_client):
    client = pod_client("worker-0", write_timeout=1.0)
    endpoint = client.register(endpoint_spec(endpoint="kept"))
    model = client.register(model_spec())
    before = server.get(WORKER_METADATA, "worker-0")
    server.fail_next(1000, 500, resource="dynamoworkermetadatas", verb="patch")
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable, match=r"500.*gave up after \d+ attempt\(s\) in 1 s; nothing was changed"):
        client.register(endpoint_spec(endpoint="lost"))
    assert time.monotonic() - started < 5
    assert len(patches(server)) >= 2 + 2  # the two good writes, then the first attempt and at least one retry
    with pytest.raises(ds.BackendUnavailable):
        client.unregister(endpoint)
    with pytest.raises(ds.BackendUnavailable):
        client.update_model_taints(model.id(), ["gpu=a100"])
    assert set(client.owned()) == {endpoint, model}
    assert client.list(ds.Query.endpoints()) == [endpoint]
    assert client.list(ds.Query.models()) == [model]
    assert server.get(WORKER_METADATA, "worker-0")["spec"] == before["spec"]


def test_transient_write_errors_are_retried(server, pod_client):
    client = pod_client("worker-0")
    server.fail_next(2, 500, resource="dynamoworkermetadatas", verb="patch")
    endpoint = client.register(endpoint_spec())
    assert len(patches(server)) == 3
    assert server.get(WORKER_METADATA, "worker-0")["spec"]["data"]["endpoints"] == {
        endpoint.id().to_path(): endpoint.to_dict()
    }


def test_forbidden_writes_fail_at_once_and_say_what_to_grant(server, pod_client):
    client = pod_client("worker-0")
    server.deny("dynamoworkermetadatas", "patch")
    with pytest.raises(
        ds.BackendUnavailable,
        match=r"grant the RBAC printed by `discovery-sync manifests --rbac` "
        r"\(in the package: discovery_sync/backends/kube/manifests/rbac.yaml",
    ):
        client.register(endpoint_spec())
    assert len(patches(server)) == 1
    assert client.owned() == () and client.list(ds.Query.endpoints()) == []


def test_publisher_ids_beyond_53_bits_are_refused(server, pod_client):
    client = pod_client("worker-0")
    scope = ds.EventScope.for_namespace("ns")
    with pytest.raises(ds.ValidationError, match="publisher_id"):
        client.register(ds.EventSourceSpec(scope, "kv-events", 2**53, {}))
    assert client.register(ds.EventSourceSpec(scope, "kv-events", 2**53 - 1, {})).publisher_id == 2**53 - 1
    assert len(patches(server)) == 1


def test_own_records_are_read_back_at_once_and_reach_own_watches(pod_client):
    client = pod_client("worker-0")
    with client.list_and_watch(ds.Query.endpoints()) as watch:
        assert watch.get(timeout=10) == ds.Resync(())
        endpoint = client.register(endpoint_spec())
        assert watch.get(timeout=0) == ds.Added(endpoint)  # published before register() returned
        assert client.list(ds.Query.endpoints()) == [endpoint]


def test_container_mode_deletes_a_stale_cr_and_writes_its_own(server, connect_as):
    pod = server.create_pod("pod-a", containers=("main", "sidecar"))
    uid = pod["metadata"]["uid"]
    server.upsert(WORKER_METADATA, {"metadata": {"name": "pod-a-sidecar"}, "spec": {"data": EMPTY}})
    sidecar = connect_as(pod_name="pod-a", pod_uid=uid, mode="container", container_name="sidecar")
    assert server.get(WORKER_METADATA, "pod-a-sidecar") is None  # deleted at start
    main = connect_as(pod_name="pod-a", pod_uid=uid, mode="container", container_name="main")  # nothing to delete
    assert [r.path for r in server.requests if r.method == "DELETE"] == [f"{CR_PATH}/pod-a-sidecar", f"{CR_PATH}/pod-a"]
    assert sidecar.instance_id == instance_id_for("pod-a-sidecar") == 5280546285600629
    assert main.instance_id == instance_id_for("pod-a")
    sidecar.register(endpoint_spec(endpoint="sidecar"))
    main.register(endpoint_spec(endpoint="main"))
    (sidecar_ref,) = server.get(WORKER_METADATA, "pod-a-sidecar")["metadata"]["ownerReferences"]
    (main_ref,) = server.get(WORKER_METADATA, "pod-a")["metadata"]["ownerReferences"]
    assert (sidecar_ref["name"], sidecar_ref["uid"], sidecar_ref["controller"]) == ("pod-a", uid, False)
    assert (main_ref["name"], main_ref["uid"], main_ref["controller"]) == ("pod-a", uid, True)


def test_a_transport_the_reference_cannot_parse_is_registered_with_a_warning(pod_client, caplog):
    client = pod_client("worker-0")
    with caplog.at_level(logging.WARNING, logger="discovery_sync.backends.kube"):
        client.register(endpoint_spec())  # tcp: readable for reference workers
        assert not caplog.records
        http = client.register(ds.EndpointSpec("ns", "backend", "web", ds.Transport.http("http://127.0.0.1:1/x")))
    assert client.list(ds.Query.endpoints("ns", "backend", "web")) == [http]
    assert any("'http' transport" in r.getMessage() and "all or nothing" in r.getMessage() for r in caplog.records)
