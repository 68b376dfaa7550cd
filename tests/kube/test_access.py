"""diagnose() and ``discovery-sync doctor`` check every permission the backend uses with
SelfSubjectAccessReviews, answered by the fake from its denial state: each missing one the client's mode
needs is a problem naming it and the fix; a server that refuses or lacks the reviews is reported as
unchecked, not as missing everything."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import orjson
import pytest

from backends.kube.access import PERMISSIONS
from testrigs.kube_fake import ENDPOINT_SLICES, PODS, WORKER_METADATA

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
RBAC_FIX = "grant the RBAC printed by `discovery-sync manifests --rbac`"


def permission_problems(report: dict) -> list[str]:
    return [p for p in report["problems"] if p.startswith("this client may not ")]


def test_every_permission_used_is_reviewed_in_the_clients_namespace(server, pod_client):
    client = pod_client("worker-0")
    report = client.diagnose()
    reviews = [orjson.loads(r.body) for r in server.requests if r.path == REVIEWS and r.method == "POST"]
    asked = [review["spec"]["resourceAttributes"] for review in reviews]
    assert sorted((a["verb"], a["group"], a["resource"]) for a in asked) == sorted(
        [
            ("list", "nvidia.com", "dynamoworkermetadatas"),
            ("watch", "nvidia.com", "dynamoworkermetadatas"),
            ("create", "nvidia.com", "dynamoworkermetadatas"),
            ("patch", "nvidia.com", "dynamoworkermetadatas"),
            ("delete", "nvidia.com", "dynamoworkermetadatas"),
            ("get", "", "pods"),
            ("list", "", "pods"),
            ("watch", "", "pods"),
            ("list", "discovery.k8s.io", "endpointslices"),
            ("watch", "discovery.k8s.io", "endpointslices"),
        ]
    )
    assert {a["namespace"] for a in asked} == {"default"}
    assert set(report["permissions"]["checked"].values()) == {"allowed"} and report["problems"] == []
    assert report["permissions"]["meaning"] == (
        'every permission this backend uses in pod mode is granted in the namespace "default"'
    )


def test_each_missing_permission_the_mode_needs_is_a_problem_naming_it_and_the_fix(server, pod_client):
    client = pod_client("worker-0")
    server.deny(WORKER_METADATA, "create")
    server.deny(ENDPOINT_SLICES, "watch")
    server.deny(PODS, "list")  # container mode's: no problem in pod mode
    report = client.diagnose()
    problems = permission_problems(report)
    assert [p.split(":")[0] for p in problems] == [
        'this client may not create dynamoworkermetadatas.nvidia.com in the namespace "default"',
        'this client may not watch endpointslices.discovery.k8s.io in the namespace "default"',
    ]
    assert all(f"{RBAC_FIX} (in the package" in p and "kubectl apply -n default -f it" in p for p in problems)
    assert "first registration creates" in problems[0]
    checked = report["permissions"]["checked"]
    assert checked["list pods"] == "missing: not needed in pod mode"
    assert checked["create dynamoworkermetadatas.nvidia.com"] == "missing"
    assert sum(result == "allowed" for result in checked.values()) == len(PERMISSIONS) - 3


def test_container_mode_needs_pods_not_endpointslices(server, connect_as):
    reader = connect_as(read_only=True, mode="container")
    server.deny(ENDPOINT_SLICES, "*")
    server.deny(PODS, "watch")
    report = reader.diagnose()
    assert [p.split(":")[0] for p in permission_problems(report)] == [
        'this client may not watch pods in the namespace "default"'
    ]
    checked = report["permissions"]["checked"]
    assert checked["list endpointslices.discovery.k8s.io"] == "missing: not needed in container mode"
    assert checked["watch endpointslices.discovery.k8s.io"] == "missing: not needed in container mode"


def test_a_refused_list_is_explained_by_the_permission_check_too(server, pod_client):
    client = pod_client("worker-0")
    server.deny(WORKER_METADATA, "list")
    report = client.diagnose()
    assert "listing DynamoWorkerMetadata failed: access denied" in report["problems"][0]
    assert [p.split(":")[0] for p in permission_problems(report)] == [
        'this client may not list dynamoworkermetadatas.nvidia.com in the namespace "default"'
    ]


@pytest.mark.parametrize(
    ("refuse", "why"),
    [
        ("refused", "the API server refuses this client SelfSubjectAccessReviews (403 Forbidden: "),
        ("lacking", "the API server does not serve SelfSubjectAccessReviews (authorization.k8s.io/v1) (404 Not Found"),
    ],
)
def test_a_server_that_refuses_or_lacks_reviews_is_reported_unchecked_not_missing(refuse, why, server, pod_client):
    client = pod_client("worker-0")
    server.deny(WORKER_METADATA, "create")
    if refuse == "refused":
        server.api.access_reviews.refused = True
    else:
        server.api.access_reviews.served = False
    report = client.diagnose()
    assert report["permissions"]["checked"] is False
    assert report["permissions"]["meaning"].startswith(
        f'could not check this client\'s permissions in the namespace "default": {why}'
    )
    assert report["problems"] == []  # nothing is called missing


def test_doctor_names_the_missing_permission_and_the_fix(server, kubeconfig):
    server.deny(WORKER_METADATA, "delete")
    url = f"kube://?kubeconfig={quote(str(kubeconfig))}&namespace=default&connect_timeout=5"
    command = [sys.executable, "-m", "discovery_sync.tools", "--url", url, "doctor"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "ok       the store answers" in lines
    assert (
        "info     permissions: 1 of the 8 permissions this backend uses in pod mode is missing (each is named below "
        "with its fix)"
    ) in lines
    (problem,) = [line for line in lines if line.startswith("PROBLEM  ")]
    assert problem.startswith(
        'PROBLEM  this client may not delete dynamoworkermetadatas.nvidia.com in the namespace "default": shutdown '
        "deletes the worker's CR"
    )
    assert RBAC_FIX in problem and "Traceback" not in result.stderr
