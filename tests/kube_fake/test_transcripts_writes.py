"""The fake answers writes and reads as the recorded kube-apiserver 1.28 did (``tests/fixtures/kube-apiserver-1.28``).

Each replay sends a transcript's recorded requests to the fake over raw HTTP (exact bytes), after
creating what the recording had set up (namespaces, the pods named in ownerReferences, the CRD state),
and compares step by step: status codes, Status reason/code/message (run-specific uids, names and
versions substituted), stored ``spec.data``, watch events in order, and headers where the fact is
about them.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from testrigs.kube_fake import NAMESPACES, PODS, WORKER_METADATA, FakeKubeServer

REPLAYED: frozenset[str] = frozenset()

CR_BASE = "/apis/nvidia.com/v1alpha1/namespaces"


# ----- helpers ---------------------------------------------------------------------------------------
class Answer:
    """One HTTP answer read off the wire."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, raw: bytes):
        self.status = status
        self.headers = headers
        self.raw = raw

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type") or ""

    def json(self) -> Any:
        return json.loads(self.raw)


def send(
    server: FakeKubeServer, method: str, path: str, body: str | bytes | None = None, content_type: str | None = None
) -> Answer:
    """One request on a fresh connection; ``body`` goes out as given (a str as UTF-8)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        payload = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        conn.close()


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer(bookmark_interval=0.2) as fake:
        yield fake


# ----- namespaces --------------------------------------------------------------------------------------
def test_namespaces_are_a_cluster_scoped_resource_with_default_there_from_the_start(server: FakeKubeServer):
    listed = send(server, "GET", "/api/v1/namespaces").json()
    assert [n["metadata"]["name"] for n in listed["items"]] == ["default"]
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    created = send(server, "POST", "/api/v1/namespaces", body, "application/json")
    assert created.status == 201
    namespace = created.json()
    assert "namespace" not in namespace["metadata"]
    assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-b"}
    assert namespace["status"] == {"phase": "Active"}
    assert send(server, "GET", "/api/v1/namespaces/team-b").json()["metadata"]["uid"] == namespace["metadata"]["uid"]
    assert send(server, "POST", "/api/v1/namespaces", body, "application/json").status == 409
    discovered = {r["name"]: r["namespaced"] for r in send(server, "GET", "/api/v1").json()["resources"]}
    assert {"namespaces": False, "pods": True}.items() <= discovered.items()


def test_deleting_a_namespace_deletes_what_is_in_it(server: FakeKubeServer):
    server.create_pod("p", namespace="team-b")  # control methods create the namespace implicitly
    server.upsert(PODS, {"metadata": {"name": "q", "namespace": "default"}})
    assert server.get(NAMESPACES, "team-b") is not None
    deleted = send(server, "DELETE", "/api/v1/namespaces/team-b")
    assert deleted.status == 200 and deleted.json()["status"] == {"phase": "Terminating"}
    assert [p["metadata"]["name"] for p in server.objects(PODS)] == ["q"]
    assert send(server, "GET", "/api/v1/namespaces/team-b").status == 404
    server.create_namespace("team-c")
    server.delete_namespace("team-c")
    assert [n["metadata"]["name"] for n in server.objects(NAMESPACES)] == ["default"]


def test_a_write_in_a_missing_namespace_is_404_while_a_list_there_is_empty(server: FakeKubeServer):
    body = json.dumps(
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoWorkerMetadata",
            "metadata": {"name": "w"},
            "spec": {"data": {}},
        }
    )
    path = f"{CR_BASE}/nowhere/dynamoworkermetadatas"
    applied = send(server, "PATCH", f"{path}/w?fieldManager=m", body, "application/apply-patch+yaml")
    assert applied.status == 404
    assert applied.json()["message"] == 'namespaces "nowhere" not found'
    assert applied.json()["details"] == {"name": "nowhere", "kind": "namespaces"}
    assert send(server, "POST", path, body, "application/json").status == 404
    listed = send(server, "GET", path)
    assert listed.status == 200 and listed.json()["items"] == []
    server.create_namespace("nowhere")
    assert send(server, "POST", path, body, "application/json").status == 201
    assert server.get(WORKER_METADATA, "w", namespace="nowhere") is not None
