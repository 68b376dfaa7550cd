"""The objects a rig makes on a kubelet-less cluster, served by the fake as the real API server serves
them: cluster-scoped Nodes and CustomResourceDefinitions, Services, and the ``pods/{name}/status``
subresource (tests/fixtures/kube-apiserver-1.28/endpointslices_pod_start.json shows the real ones)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from testrigs.kube_fake import FakeKubeServer

CRD_MANIFEST = Path(__file__).resolve().parents[2] / "backends" / "kube" / "manifests" / "crd.yaml"
MERGE = "application/merge-patch+json"


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as fake:
        yield fake


@pytest.fixture
def api(server: FakeKubeServer, tmp_path: Path) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    yield api_client
    api_client.close()


def test_nodes_are_cluster_scoped(server: FakeKubeServer, api: client.ApiClient):
    core = client.CoreV1Api(api)
    created = core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}})
    assert created.metadata.uid and not created.metadata.namespace
    assert core.read_node("node-0").metadata.uid == created.metadata.uid
    assert [n.metadata.name for n in core.list_node().items] == ["node-0"]
    with pytest.raises(ApiException) as stale:
        core.delete_node("node-0", body={"preconditions": {"resourceVersion": "999"}})
    assert stale.value.status == 409
    core.delete_node("node-0", body={"preconditions": {"resourceVersion": created.metadata.resource_version}})
    assert core.list_node().items == []
    with pytest.raises(urllib.error.HTTPError) as namespaced:
        urllib.request.urlopen(f"{server.url}/api/v1/namespaces/default/nodes", timeout=10)
    assert namespaced.value.code == 404


def test_services_are_namespaced(api: client.ApiClient):
    core = client.CoreV1Api(api)
    spec = {"selector": {"app": "w"}, "ports": [{"name": "http", "port": 8000}]}
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_service("team", {"metadata": {"name": "workers"}, "spec": spec})
    assert core.read_namespaced_service("workers", "team").spec.selector == {"app": "w"}
    assert core.list_namespaced_service("default").items == []


def test_the_worker_crd_is_established_and_serves_its_type_until_deleted(server: FakeKubeServer, api):
    server.set_crd_installed(False)
    extensions = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    created = extensions.create_custom_resource_definition(yaml.safe_load(CRD_MANIFEST.read_text()))
    assert created.status is None or not created.status.conditions  # established just after the write
    crd = extensions.read_custom_resource_definition(created.metadata.name)
    assert {c.type: c.status for c in crd.status.conditions} == {"NamesAccepted": "True", "Established": "True"}
    assert crd.status.accepted_names.plural == "dynamoworkermetadatas"
    assert custom.list_namespaced_custom_object("nvidia.com", "v1alpha1", "default", "dynamoworkermetadatas")
    extensions.delete_custom_resource_definition(created.metadata.name)
    assert not server.crd_installed
    with pytest.raises(ApiException) as gone:
        custom.list_namespaced_custom_object("nvidia.com", "v1alpha1", "default", "dynamoworkermetadatas")
    assert gone.value.status == 404


def test_pod_status_is_written_through_its_subresource_alone(api: client.ApiClient):
    core = client.CoreV1Api(api)
    pod = {
        "metadata": {"name": "w-0", "labels": {"app": "w"}},
        "spec": {"nodeName": "node-0", "containers": [{"name": "main", "image": "registry.invalid/main:latest"}]},
    }
    assert core.create_namespaced_pod("default", pod).status.phase == "Pending"
    patch = {"metadata": {"labels": {"app": "changed"}}, "status": {"phase": "Running", "podIP": "192.0.2.7"}}
    patched = core.patch_namespaced_pod_status("w-0", "default", patch, _content_type=MERGE)
    assert (patched.status.phase, patched.status.pod_ip) == ("Running", "192.0.2.7")
    assert patched.metadata.labels == {"app": "w"}, "the status subresource ignores everything but status"
    # the main resource, in turn, ignores status
    replaced = core.patch_namespaced_pod("w-0", "default", {"status": {"phase": "Failed"}}, _content_type=MERGE)
    assert replaced.status.phase == "Running"
    assert core.read_namespaced_pod_status("w-0", "default").status.pod_ip == "192.0.2.7"
