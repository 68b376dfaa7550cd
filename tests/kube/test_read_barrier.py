"""The read barrier of consistent reads, what the view keeps of the objects it watches, and what
connecting makes of the official client (issue 37)."""

from __future__ import annotations

from pathlib import Path

from discovery_sync.backends.kube.summary import ObjectSummary
from discovery_sync.backends.kube.wire import PLURAL, KubeApi, load_cluster

import discovery_sync as ds
from testrigs.helpers import endpoint_spec
from testrigs.kube_fake import FakeKubeServer, RecordedRequest
from tests.kube.recorded_answers import recorded_api
from tests.kube_fake import transcripts

WORKERS = 20


def _registered(pod_client, count: int) -> list[ds.Endpoint]:
    return [pod_client(f"worker-{i}").register(endpoint_spec(endpoint=f"e{i}")) for i in range(count)]


def _lists(server: FakeKubeServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "GET" and "watch" not in r.query and r.path.endswith("s")]


def test_a_warm_consistent_list_asks_for_pages_of_one_object_alone(server, pod_client):
    served = _registered(pod_client, WORKERS)
    reader = pod_client("reader")
    assert sorted(reader.list(ds.Query.endpoints()), key=str) == sorted(served, key=str)
    server.clear_requests()  # the first read may list what its watches had not reached
    for _ in range(3):
        assert len(reader.list(ds.Query.endpoints())) == WORKERS
    lists = _lists(server)
    assert {r.path.rsplit("/", 1)[1] for r in lists} == {PLURAL, "endpointslices"}
    assert all(r.query.get("limit") == "1" for r in lists), [r.raw_query for r in lists]
    assert len(lists) == 6  # one per resource and read


def test_a_consistent_list_sees_what_another_pod_wrote_just_before(server, pod_client):
    reader = pod_client("reader")
    reader.list(ds.Query.endpoints())
    writer = pod_client("writer")
    written: list[ds.Endpoint] = []
    for i in range(5):
        written.append(writer.register(endpoint_spec(endpoint=f"e{i}")))
        assert sorted(reader.list(ds.Query.endpoints()), key=str) == sorted(written, key=str)
    writer.unregister(written.pop().id())
    assert sorted(reader.list(ds.Query.endpoints()), key=str) == sorted(written, key=str)


def test_a_read_without_consistent_reads_asks_the_api_server_nothing(server, pod_client):
    _registered(pod_client, 3)
    reader = pod_client("reader", consistent_reads="false")
    reader.list(ds.Query.endpoints())
    server.clear_requests()
    assert len(reader.list(ds.Query.endpoints())) == 3
    assert _lists(server) == []


def test_the_view_keeps_summaries_not_the_objects(server, pod_client):
    _registered(pod_client, 3)
    reader = pod_client("reader")
    assert len(reader.list(ds.Query.endpoints())) == 3
    caches = reader.daemon._caches.values()
    assert all(type(o) is ObjectSummary for cache in caches for o in cache.objects.values())
    assert all(o.payload is None for o in reader.daemon._crs.objects.values())  # parsed into entries


def test_a_pod_mode_client_never_makes_the_core_api(server, pod_client):
    """The official client builds the pydantic models of the whole core group with its CoreV1Api
    (about half a second of the first connect, from release 37 on): pod mode needs none of it."""
    reader = pod_client("reader")
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert isinstance(watch.get(timeout=10), ds.Resync)
    assert reader.api._core is None


def test_a_page_of_one_is_answered_as_a_real_api_server_does(server: FakeKubeServer, kubeconfig: Path, tmp_path):
    recorded = transcripts.load("pagination").steps[0]  # limit=2 over 5 CRs
    real = recorded.response["body"]
    for i in range(5):
        server.upsert(PLURAL, {"metadata": {"name": f"w-{i}", "namespace": "default"}, "spec": {"data": {}}})
    api = KubeApi(load_cluster(kubeconfig).api_client, "default")
    try:
        page = api.list_page(api.worker_metadata, limit=1)
        assert page.keys() == real.keys() - {"_items_note"}
        assert page["metadata"].keys() == real["metadata"].keys()
        assert page["metadata"]["remainingItemCount"] == 4 and page["metadata"]["continue"]
        assert [item["metadata"]["name"] for item in page["items"]] == ["w-0"]
        assert api.collection_version(api.worker_metadata) == server.resource_version  # the revision read at
    finally:
        api.close()
    with recorded_api(recorded, tmp_path) as real_api:
        assert real_api.collection_version(real_api.worker_metadata) == real["metadata"]["resourceVersion"]
