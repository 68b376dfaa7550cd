"""The contract suite's Kubernetes rig on an existing cluster (``DISCOVERY_SYNC_TEST_KUBECONFIG``).

The slow test runs ``pytest tests/contract -k kube`` against a FakeKubeServer in another process, known
only by its kubeconfig, with no EndpointSlice controller and no CRD installed, as a bare API server would
be. The others drive :mod:`testrigs.kube_cluster` directly against an in-process fake: the pods and
slices it makes (compared with the real controller's recorded slice), a cluster whose own controller
makes the slice, and the clean-up of the shared Node and CRD when pytest-xdist workers share a cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testrigs.kube_cluster import CRD_MANIFEST, MADE_BY_LABEL, NODE_NAME, KubeCluster
from testrigs.kube_fake import AUTO_SLICE_NAME, DISCOVERY_LABEL, FakeKubeServer
from testrigs.kube_fake.objects import MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from testrigs.kube_fake.watch import Change
from tests.kube.rig import CLUSTER_VARIABLE
from tests.kube_fake.transcripts import load

REPO = Path(__file__).resolve().parents[2]
CRD_NAME = "dynamoworkermetadatas.nvidia.com"
NODE_PATH = f"/api/v1/nodes/{NODE_NAME}"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"


@pytest.mark.slow
def test_the_contract_suite_runs_on_a_cluster_known_only_by_its_kubeconfig(tmp_path: Path):
    kubeconfig, report = tmp_path / "kubeconfig", tmp_path / "seen.json"
    server = subprocess.Popen(
        [sys.executable, "-m", "testrigs.kube_fake_process", str(kubeconfig), str(report)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        suite = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/contract", "-k", "kube"],
            cwd=REPO,
            env={**os.environ, CLUSTER_VARIABLE: str(kubeconfig)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        assert server.stdin is not None
        server.stdin.close()  # the server writes its report and stops
        server.wait(timeout=30)
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    summary = re.search(r"^(\d+) passed, \d+ deselected in", suite.stdout, re.MULTILINE)
    assert summary, f"not every selected case passed: {suite.stdout[-800:]}"
    cases = int(summary.group(1))
    assert cases >= 80

    seen = json.loads(report.read_text())
    writes: list[tuple[str, str, str | None]] = [tuple(w) for w in seen["writes"]]
    namespaces = [name for method, path, name in writes if (method, path) == ("POST", "/api/v1/namespaces")]
    assert len(namespaces) == len(set(namespaces)) == cases, "one fresh namespace per case"
    assert {p for m, p, _ in writes if m == "DELETE" and re.fullmatch("/api/v1/namespaces/[^/]+", p)} == {
        f"/api/v1/namespaces/{ns}" for ns in namespaces
    }, "every namespace deleted after its case"

    def in_rig_namespaces(method: str, pattern: str) -> list[str]:
        found = [re.fullmatch(pattern, path) for m, path, _ in writes if m == method]
        assert all(match.group(1) in namespaces for match in found if match)
        return [match.group(0) for match in found if match]

    pods = in_rig_namespaces("POST", r"/api/v1/namespaces/([^/]+)/pods")
    statuses = in_rig_namespaces("PATCH", r"/api/v1/namespaces/([^/]+)/pods/[^/]+/status")
    assert len(pods) == len(statuses) >= cases, "every pod made Running and Ready through pods/status"
    assert len(in_rig_namespaces("POST", r"/api/v1/namespaces/([^/]+)/services")) == cases
    assert len(in_rig_namespaces("POST", r"/apis/discovery.k8s.io/v1/namespaces/([^/]+)/endpointslices")) == cases
    assert in_rig_namespaces("PATCH", r"/apis/nvidia.com/v1alpha1/namespaces/([^/]+)/dynamoworkermetadatas/.+")

    creations = [(path, name) for method, path, name in writes if method == "POST" and path.count("/") <= 4]
    assert ("/api/v1/nodes", NODE_NAME) in creations
    assert ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD_NAME) in creations
    deleted = [path for method, path, _ in writes if method == "DELETE"]
    assert (deleted.count(NODE_PATH), deleted.count(CRD_PATH)) == (1, 1), "shared objects deleted once, at the end"
    assert seen["left"] == {"namespaces": ["default"], "nodes": [], "customresourcedefinitions": []}


# ----- the rig against an in-process fake ------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as fake:
        fake.set_crd_installed(False)
        yield fake


@pytest.fixture
def kubeconfig(server: FakeKubeServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


def _recorded_ready_slice() -> dict[str, Any]:
    """The EndpointSlice the real controller wrote for a Service with one ready pod."""
    (watch,) = [step for step in load("endpointslices_pod_start").steps if "watch=true" in step.path]
    for event in watch.response["body"]:
        endpoints = event["object"].get("endpoints") or []
        if endpoints and endpoints[0]["conditions"]["ready"]:
            return dict(event["object"])
    raise AssertionError("the transcript shows no ready endpoint")


def test_a_pod_is_made_as_a_kubelet_and_its_slice_as_the_controller_would(server: FakeKubeServer, kubeconfig):
    cluster = KubeCluster(kubeconfig)
    try:
        namespace = cluster.open_namespace()
        uid = namespace.start_pod("worker-0")
        assert cluster.slice_controller is False, "the fake runs no EndpointSlice controller for Services"
        pod = server.get("pods", "worker-0", namespace.name)
        assert pod is not None and pod["metadata"]["uid"] == uid
        assert pod["metadata"]["labels"] == {DISCOVERY_LABEL: "true"}
        node = server.get("nodes", NODE_NAME, "")
        assert pod["spec"]["nodeName"] == NODE_NAME and node is not None
        # reported Ready as a kubelet would, or a node lifecycle controller would evict its pods
        (ready,) = node["status"]["conditions"]
        assert (ready["type"], ready["status"]) == ("Ready", "True") and ready["lastHeartbeatTime"]
        assert pod["status"]["phase"] == "Running" and pod["status"]["podIP"].startswith("192.0.2.")
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
        assert [c["ready"] for c in pod["status"]["containerStatuses"]] == [True]

        (made,) = server.objects("endpointslices", namespace.name)
        recorded = _recorded_ready_slice()
        assert made["metadata"]["labels"].keys() == recorded["metadata"]["labels"].keys()
        assert made["metadata"]["generateName"] == recorded["metadata"]["generateName"]
        (owner,) = made["metadata"]["ownerReferences"]
        service = server.get("services", "dynamo-workers", namespace.name)
        assert service is not None and owner["uid"] == service["metadata"]["uid"]
        assert owner.keys() == recorded["metadata"]["ownerReferences"][0].keys()
        (endpoint,) = made["endpoints"]
        assert endpoint.keys() == recorded["endpoints"][0].keys()
        assert endpoint["conditions"] == recorded["endpoints"][0]["conditions"]
        assert endpoint["targetRef"] == {"kind": "Pod", "namespace": namespace.name, "name": "worker-0", "uid": uid}
        assert endpoint["addresses"] == [pod["status"]["podIP"]]
        assert made["ports"] == recorded["ports"]
        namespace.close()
        assert server.get("namespaces", namespace.name, "") is None
    finally:
        cluster.close()
    assert server.objects("nodes") == [] and server.objects("customresourcedefinitions") == []
    assert "discovery-sync-test-node-heartbeat" not in {thread.name for thread in threading.enumerate()}


def test_the_clusters_own_slice_controller_is_used_when_it_runs(tmp_path: Path):
    controlled = FakeKubeServer(auto_endpoint_slices=True)  # keeps the endpoints of the slice made below

    def controller(change: Change) -> None:  # the Service's slice at once, as the EndpointSlice controller
        if change.resource.plural == "services" and change.old is None and change.new is not None:
            labels = {DISCOVERY_LABEL: "true", SERVICE_NAME_LABEL: AUTO_SLICE_NAME, MANAGED_BY_LABEL: "controller"}
            controlled.upsert_endpoint_slice(AUTO_SLICE_NAME, [], labels, change.new["metadata"]["namespace"])

    controlled.store.add_hook(controller)
    with controlled:
        cluster = KubeCluster(controlled.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            namespace = cluster.open_namespace()
            uid = namespace.start_pod("worker-0")
            assert cluster.slice_controller is True
            (slice_,) = controlled.objects("endpointslices", namespace.name)
            assert slice_["metadata"]["name"] == AUTO_SLICE_NAME, "the rig wrote no slice of its own"
            assert [e["targetRef"]["uid"] for e in slice_["endpoints"]] == [uid]
            assert not [r for r in controlled.requests if "endpointslices" in r.path and r.method != "GET"]
            namespace.close()
        finally:
            cluster.close()


def test_workers_sharing_a_cluster_leave_the_shared_node_and_crd_to_the_last_one(server, kubeconfig):
    first, second = KubeCluster(kubeconfig, slice_controller=False), KubeCluster(kubeconfig, slice_controller=False)
    try:
        one, two = first.open_namespace(), second.open_namespace()
        assert len(server.objects("customresourcedefinitions")) == 1 and len(server.objects("nodes")) == 1
        one.close()
        first.close()  # the second worker's namespace is still active
        assert server.get("nodes", NODE_NAME, "") is not None
        assert server.get("customresourcedefinitions", CRD_NAME, "") is not None
        two.start_pod("worker-0")  # it still works
        two.close()
    finally:
        second.close()
    assert server.objects("nodes") == [] and server.objects("customresourcedefinitions") == []
    assert [ns["metadata"]["name"] for ns in server.objects("namespaces")] == ["default"]


def test_a_worker_starting_between_the_check_and_the_delete_keeps_the_shared_objects(server, kubeconfig):
    late = KubeCluster(kubeconfig, slice_controller=False)
    opened = []

    class Leaving(KubeCluster):
        def _rig_namespaces_in_use(self) -> bool:
            if not opened:  # the late worker starts right after this check found no one
                opened.append(late.open_namespace())
                return False
            return super()._rig_namespaces_in_use()

    leaving = Leaving(kubeconfig, slice_controller=False)
    try:
        leaving.open_namespace().close()
        leaving.close()  # its delete carries the version it read: the late worker's touch made it stale
        assert server.get("customresourcedefinitions", CRD_NAME, "") is not None
        assert server.get("nodes", NODE_NAME, "") is not None
        opened[0].start_pod("worker-0")
        opened[0].close()
    finally:
        late.close()
    assert server.objects("nodes") == [] and server.objects("customresourcedefinitions") == []


def test_a_node_and_crd_the_rig_did_not_create_are_left_alone(server: FakeKubeServer, kubeconfig):
    server.upsert("nodes", {"metadata": {"name": NODE_NAME, "namespace": ""}})
    server.upsert("customresourcedefinitions", yaml.safe_load(CRD_MANIFEST.read_text()))
    cluster = KubeCluster(kubeconfig, slice_controller=False)
    try:
        namespace = cluster.open_namespace()
        namespace.start_pod("worker-0")
        namespace.close()
    finally:
        cluster.close()
    assert [n["metadata"]["name"] for n in server.objects("nodes")] == [NODE_NAME]
    (crd,) = server.objects("customresourcedefinitions")
    assert MADE_BY_LABEL not in crd["metadata"].get("labels", {}) and "annotations" not in crd["metadata"]
