"""The fake API server, driven by the unmodified official ``kubernetes`` client and by raw HTTP.

The raw-HTTP tests replay the requests docs/design.md §8 measured from the reference runtime (kube-rs).
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from testrigs.kube_fake import AUTO_SLICE_NAME, DISCOVERY_LABEL, FakeKubeServer

GROUP, VERSION, PLURAL = "nvidia.com", "v1alpha1", "dynamoworkermetadatas"
CR_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
SLICE_PATH = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
APPLY_CT = "application/apply-patch+yaml"
WAIT = 10.0  # bound on every wait for an event


# ----- fixtures and helpers ------------------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    # no garbage collector: most CRs here name pod uids that do not exist (a real one deletes them)
    with FakeKubeServer(bookmark_interval=0.2, garbage_collector=False) as fake:
        yield fake


@pytest.fixture
def kubeconfig(server: FakeKubeServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def slices(api: client.ApiClient) -> client.DiscoveryV1Api:
    return client.DiscoveryV1Api(api)


def worker_metadata(name: str, pod_uid: str, endpoints: dict[str, Any] | None = None, pod: str | None = None) -> dict:
    """The apply body the reference runtime sends (docs/design.md §8)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DynamoWorkerMetadata",
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "blockOwnerDeletion": False,
                    "controller": (pod or name) == name,
                    "kind": "Pod",
                    "name": pod or name,
                    "uid": pod_uid,
                }
            ],
        },
        "spec": {
            "data": {
                "endpoints": endpoints if endpoints is not None else {"pyns/backend/generate/1": endpoint(1)},
                "model_cards": {},
                "event_channels": {},
                "event_sources": {},
            }
        },
    }


def endpoint(instance_id: int) -> dict[str, Any]:
    return {
        "type": "Endpoint",
        "namespace": "pyns",
        "component": "backend",
        "endpoint": "generate",
        "instance_id": instance_id,
        "transport": {"tcp": f"127.0.0.1:34553/{instance_id:x}/pyns/backend/generate"},
        "device_type": "cuda",
        "request_plane_codec": "msgpack",
    }


def apply(custom: client.CustomObjectsApi, body: dict, manager: str = "dynamo-worker", force: bool | None = True):
    return custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        body["metadata"]["name"],
        body,
        field_manager=manager,
        force=force,
        _content_type=APPLY_CT,
    )


def get_cr(custom: client.CustomObjectsApi, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


class Stream:
    """Runs ``Watch().stream(...)`` in a thread; events (or the exception) come out of a queue."""

    def __init__(self, func: Callable, *args: Any, **kwargs: Any):
        self.watch = watch.Watch()
        self.events: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, func: Callable, args: tuple, kwargs: dict) -> None:
        try:
            for event in self.watch.stream(func, *args, **kwargs):
                self.events.put(event)
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished.set()

    def next(self, *, bookmarks: bool = False, timeout: float = WAIT) -> dict:
        """The next event (BOOKMARKs skipped unless ``bookmarks``)."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            if bookmarks or event["type"] != "BOOKMARK":
                return event

    def wait_finished(self, timeout: float = WAIT) -> None:
        assert self.finished.wait(timeout), "watch stream did not end"

    def stop(self) -> None:
        self.watch.stop()
        self.finished.wait(WAIT)


@pytest.fixture
def streams() -> Iterator[Callable[..., Stream]]:
    opened: list[Stream] = []

    def open_stream(func: Callable, *args: Any, **kwargs: Any) -> Stream:
        opened.append(Stream(func, *args, **kwargs))
        return opened[-1]

    yield open_stream
    for stream in opened:
        stream.stop()


def start_watch(server: FakeKubeServer, streams: Callable[..., Stream], resource: str, func: Callable, *args, **kw):
    """Open a watch and return once the server has registered it (so no event can slip past)."""
    before = server.watch_count(resource)
    stream = streams(func, *args, **kw)
    server.wait_for_watchers(resource, before + 1, timeout=WAIT)
    return stream


def raw(server: FakeKubeServer, method: str, path: str, body: Any = None, content_type: str = "application/json"):
    """One plain ``http.client`` request: (status, headers, decoded JSON body, or the text of a plain-text one)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    try:
        payload = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if payload is not None else {}
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if (resp.getheader("Content-Type") or "").startswith("text/plain"):
            return resp.status, dict(resp.getheaders()), data.decode()
        return resp.status, dict(resp.getheaders()), json.loads(data or b"null")
    finally:
        conn.close()


def read_event(resp: http.client.HTTPResponse) -> dict:
    line = resp.readline()
    assert line.endswith(b"\n"), line
    return json.loads(line)


# ----- discovery and kubeconfig ---------------------------------------------------------------------
def test_kubeconfig_points_the_client_at_the_fake(server: FakeKubeServer, kubeconfig: Path, api: client.ApiClient):
    assert api.configuration.host == server.url
    _, current = config.list_kube_config_contexts(config_file=str(kubeconfig))
    assert current["context"]["namespace"] == "default"


def test_discovery_documents(api: client.ApiClient):
    assert client.VersionApi(api).get_code().major == "1"
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert groups["nvidia.com"].preferred_version.group_version == "nvidia.com/v1alpha1"
    assert "discovery.k8s.io" in groups
    assert [r.name for r in client.CoreV1Api(api).get_api_resources().resources] == [
        "namespaces",
        "nodes",
        "pods",
        "services",
    ]
    assert [r.name for r in client.DiscoveryV1Api(api).get_api_resources().resources] == ["endpointslices"]
    (crd,) = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION).resources
    assert (crd.name, crd.kind, crd.namespaced, crd.short_names) == (PLURAL, "DynamoWorkerMetadata", True, ["dwm"])
    assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(crd.verbs)


def test_crd_not_installed_is_404_everywhere(server: FakeKubeServer, api: client.ApiClient, custom):
    pod = server.create_pod("worker-0")
    apply(custom, worker_metadata("worker-0", pod["metadata"]["uid"]))
    server.set_crd_installed(False)
    with pytest.raises(ApiException) as listing:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listing.value.status == 404 and listing.value.body == "404 page not found\n"  # plain text (crd_missing.json)
    with pytest.raises(ApiException) as applying:
        apply(custom, worker_metadata("worker-0", pod["metadata"]["uid"]))
    assert applying.value.status == 404
    with pytest.raises(ApiException) as resources:
        custom.get_api_resources(GROUP, VERSION)
    assert resources.value.status == 404
    assert "nvidia.com" not in {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert raw(server, "GET", f"{CR_PATH}?watch=true")[0] == 404
    server.set_crd_installed(True)  # removing the CRD deleted its objects
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []


# ----- custom objects: CRUD ---------------------------------------------------------------------------
def test_create_get_list_custom_objects(server: FakeKubeServer, custom):
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("w-a", "u-1"))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["generation"] == 1
    assert meta["resourceVersion"] == server.resource_version
    assert meta["managedFields"][0]["manager"] == "OpenAPI-Generator"  # from the User-Agent, as the real server does
    assert meta["managedFields"][0]["operation"] == "Update"
    assert get_cr(custom, "w-a") == created
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("w-b", "u-2"))
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listed["kind"] == "DynamoWorkerMetadataList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w-a", "w-b"]
    assert listed["metadata"]["resourceVersion"] == server.resource_version
    with pytest.raises(ApiException) as duplicate:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("w-a", "u-1"))
    assert duplicate.value.status == 409 and status_of(duplicate.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as missing:
        get_cr(custom, "nope")
    assert missing.value.status == 404
    assert status_of(missing.value)["message"] == 'dynamoworkermetadatas.nvidia.com "nope" not found'


def test_schema_and_name_validation_is_422(custom):
    body = worker_metadata("w-a", "u-1")
    del body["spec"]["data"]
    with pytest.raises(ApiException) as no_data:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    assert no_data.value.status == 422 and status_of(no_data.value)["reason"] == "Invalid"
    assert status_of(no_data.value)["details"]["causes"][0]["field"] == "spec.data"
    with pytest.raises(ApiException) as bad_name:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("Worker_0", "u"))
    assert bad_name.value.status == 422


def test_replace_checks_resource_version(server: FakeKubeServer, custom):
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("w-a", "u-1"))
    changed = json.loads(json.dumps(created))
    changed["spec"]["data"]["endpoints"] = {"pyns/backend/generate/2": endpoint(2)}
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-a", changed)
    assert replaced["metadata"]["generation"] == 2
    assert int(replaced["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as stale:  # `changed` still carries the old resourceVersion
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-a", changed)
    assert stale.value.status == 409 and status_of(stale.value)["reason"] == "Conflict"
    del changed["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as unconditional:
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-a", changed)
    assert unconditional.value.status == 422


def test_merge_patch_is_the_client_default(server: FakeKubeServer, custom):
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("w-a", "u-1"))
    patch = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"data": {"model_cards": {"m": {"x": 1}}, "event_sources": None}},
    }
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-a", patch)
    assert server.requests[-1].content_type == "application/merge-patch+json"
    assert patched["metadata"]["labels"] == {"a": "b"}
    assert patched["spec"]["data"]["model_cards"] == {"m": {"x": 1}}
    assert "event_sources" not in patched["spec"]["data"]
    assert patched["metadata"]["generation"] == 2


def test_delete_custom_object_with_preconditions(custom):
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, worker_metadata("w-a", "u-1"))
    wrong = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    with pytest.raises(ApiException) as precondition:
        custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-a", body=wrong)
    assert precondition.value.status == 409
    deleted = custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w-a")
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(ApiException) as gone:
        get_cr(custom, "w-a")
    assert gone.value.status == 404


# ----- server-side apply -------------------------------------------------------------------------------
def test_server_side_apply_creates_then_updates(server: FakeKubeServer, custom):
    pod = server.create_pod("worker-0")
    body = worker_metadata("worker-0", pod["metadata"]["uid"])
    # The real server answers 201 when an apply creates the object; kubernetes 37's patch methods only map 200 to a
    # return type, so the call returns None (older generated clients deserialized any 2xx). The object exists.
    created = apply(custom, body)
    assert created is None or created["metadata"]["name"] == "worker-0"
    request = server.wait_for_request(lambda r: r.method == "PATCH", timeout=WAIT)
    assert request == server.requests[-1] and request.content_type == APPLY_CT
    assert request.query == {"fieldManager": "dynamo-worker", "force": "true"}
    assert json.loads(request.body) == body
    first = get_cr(custom, "worker-0")
    assert first["spec"] == body["spec"]
    (entry,) = first["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["fieldsType"]) == ("dynamo-worker", "Apply", "FieldsV1")
    uid = body["metadata"]["ownerReferences"][0]["uid"]
    assert entry["fieldsV1"]["f:metadata"] == {"f:ownerReferences": {f'k:{{"uid":"{uid}"}}': {}}}  # keyed by uid
    assert "f:pyns/backend/generate/1" in entry["fieldsV1"]["f:spec"]["f:data"]["f:endpoints"]

    body["spec"]["data"]["endpoints"] = {"pyns/backend/generate/2": endpoint(2)}
    second = apply(custom, body)
    assert second["spec"]["data"]["endpoints"] == {"pyns/backend/generate/2": endpoint(2)}  # the dropped key is gone
    assert second["metadata"]["generation"] == 2 and second["metadata"]["uid"] == first["metadata"]["uid"]
    assert len(second["metadata"]["managedFields"]) == 1

    again = apply(custom, body)  # an unchanged apply writes nothing
    assert again["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]


def test_apply_keeps_fields_other_managers_own(custom):
    base = worker_metadata("worker-0", "u-1")
    apply(custom, base)
    other = {
        "apiVersion": base["apiVersion"],
        "kind": base["kind"],
        "metadata": {"name": "worker-0", "labels": {"team": "a"}},
        "spec": {"data": {"model_cards": {"card": {"name": "m"}}}},
    }
    apply(custom, other, manager="card-writer")
    base["spec"]["data"]["endpoints"] = {}
    merged = apply(custom, base)  # dynamo-worker never owned model_cards.card or the label: they stay
    assert merged["spec"]["data"]["model_cards"] == {"card": {"name": "m"}}
    assert merged["spec"]["data"]["endpoints"] is None  # emptied by its manager: null, as ssa_empty_map.json shows
    assert merged["metadata"]["labels"] == {"team": "a"}
    assert {e["manager"] for e in merged["metadata"]["managedFields"]} == {"dynamo-worker", "card-writer"}


def test_apply_conflict_without_force_and_takeover_with_force(server: FakeKubeServer, custom):
    body = worker_metadata("worker-0", "u-1")
    apply(custom, body, manager="someone-else")
    body["spec"]["data"]["endpoints"]["pyns/backend/generate/1"]["device_type"] = "cpu"
    with pytest.raises(ApiException) as conflict:
        apply(custom, body, force=None)
    status = status_of(conflict.value)
    assert conflict.value.status == 409 and status["reason"] == "Conflict"
    fields = {c["field"] for c in status["details"]["causes"]}
    assert ".spec.data.endpoints.pyns/backend/generate/1.device_type" in fields
    assert 'conflict with "someone-else"' in status["message"]
    assert get_cr(custom, "worker-0")["spec"]["data"]["endpoints"]["pyns/backend/generate/1"]["device_type"] == "cuda"

    taken = apply(custom, body, force=True)
    assert taken["spec"]["data"]["endpoints"]["pyns/backend/generate/1"]["device_type"] == "cpu"
    owners = {e["manager"]: e["fieldsV1"] for e in taken["metadata"]["managedFields"]}
    other_endpoint = owners["someone-else"]["f:spec"]["f:data"]["f:endpoints"]["f:pyns/backend/generate/1"]
    assert "f:device_type" not in other_endpoint and "f:instance_id" in other_endpoint  # shared, unchanged fields stay


def test_apply_needs_the_apply_content_type_and_a_field_manager(server: FakeKubeServer, custom):
    body = worker_metadata("worker-0", "u-1")
    # Without _content_type the client sends application/merge-patch+json, and force=true is then rejected.
    with pytest.raises(ApiException) as merge_with_force:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "worker-0", body, field_manager="dynamo-worker", force=True
        )
    assert merge_with_force.value.status == 422
    assert server.requests[-1].content_type == "application/merge-patch+json"
    with pytest.raises(ApiException) as no_manager:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "worker-0", body, force=True, _content_type=APPLY_CT
        )
    assert no_manager.value.status == 422
    assert "fieldManager" in status_of(no_manager.value)["message"]
    assert raw(server, "PATCH", f"{CR_PATH}/worker-0", body, "application/json-patch+json")[0] == 415


# ----- watches -----------------------------------------------------------------------------------------
def test_watch_sees_added_modified_deleted_and_bookmarks(server: FakeKubeServer, custom, streams):
    apply(custom, worker_metadata("early", "u-0"))
    stream = start_watch(
        server,
        streams,
        PLURAL,
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        allow_watch_bookmarks=True,
        timeout_seconds=60,
    )
    initial = stream.next()  # no resourceVersion: synthetic ADDED for what exists
    assert (initial["type"], initial["object"]["metadata"]["name"]) == ("ADDED", "early")

    body = worker_metadata("worker-0", "u-1")
    apply(custom, body)
    assert stream.next()["type"] == "ADDED"
    body["spec"]["data"]["endpoints"] = {}
    apply(custom, body)
    modified = stream.next()
    # emptying a map the manager had filled stores null (tests/fixtures/kube-apiserver-1.28/ssa_empty_map.json)
    assert modified["type"] == "MODIFIED" and modified["object"]["spec"]["data"]["endpoints"] is None
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "worker-0")
    deleted = stream.next()
    assert deleted["type"] == "DELETED" and deleted["object"]["spec"]["data"]["endpoints"] is None
    assert deleted["object"]["metadata"]["resourceVersion"] == server.resource_version

    mark = stream.next(bookmarks=True)
    assert mark["type"] == "BOOKMARK"
    assert mark["raw_object"] == {
        "kind": "DynamoWorkerMetadata",
        "apiVersion": "nvidia.com/v1alpha1",
        "metadata": {"resourceVersion": server.resource_version},
    }
    assert stream.watch.resource_version == server.resource_version  # the client tracks bookmarks


def test_bookmarks_come_only_after_the_type_changed_and_are_counted_per_resource(server: FakeKubeServer):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    conn.request("GET", f"{CR_PATH}?watch=true&allowWatchBookmarks=true&timeoutSeconds=30")
    resp = conn.getresponse()
    plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    plain.request("GET", "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=30")  # no bookmarks asked
    plain_resp = plain.getresponse()
    server.wait_for_watchers(PLURAL, 1, timeout=WAIT)
    with pytest.raises(TimeoutError):  # several bookmark periods, nothing changed: none at all
        server.wait_for_bookmarks(PLURAL, 1, timeout=0.7)
    server.create_pod("bystander")  # another type changing does not count either
    with pytest.raises(TimeoutError):
        server.wait_for_bookmarks(PLURAL, 1, timeout=0.5)
    other = worker_metadata("elsewhere", "u-9")
    other["metadata"]["namespace"] = "other"
    server.upsert(PLURAL, other)  # a CR outside the watched namespace: no event, but the cache moved on
    version = server.resource_version
    server.wait_for_bookmarks(PLURAL, 2, timeout=WAIT)
    marks = [read_event(resp) for _ in range(2)]
    assert [m["type"] for m in marks] == ["BOOKMARK", "BOOKMARK"]
    assert {m["object"]["metadata"]["resourceVersion"] for m in marks} == {version}
    assert read_event(plain_resp)["object"]["metadata"]["name"] == "bystander"
    assert server.bookmarks_sent("pods") == 0
    with pytest.raises(TimeoutError):
        server.wait_for_bookmarks("pods", 1, timeout=0.5)
    server.create_pod("worker-0")
    assert read_event(plain_resp)["type"] == "ADDED"  # the plain stream works, just without bookmarks
    server.end_watches()
    conn.close()
    plain.close()


def test_watch_resumes_from_a_resource_version(server: FakeKubeServer, custom, streams):
    apply(custom, worker_metadata("before", "u-0"))
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    apply(custom, worker_metadata("after", "u-1"))
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "before")
    stream = streams(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=60,
    )
    replay = [stream.next(), stream.next()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in replay] == [("ADDED", "after"), ("DELETED", "before")]


def test_a_compaction_does_not_expire_watches_the_watch_cache_serves(server: FakeKubeServer, custom):
    apply(custom, worker_metadata("worker-0", "u-1"))
    old = server.resource_version
    apply(custom, worker_metadata("worker-1", "u-2"))
    server.compact()
    events = watch.Watch().stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, resource_version=old, timeout_seconds=1
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "worker-1")]


def test_watch_from_a_version_older_than_the_watch_cache_fails_with_410():
    server = FakeKubeServer(history_limit=2, garbage_collector=False).start()  # the window overflows
    api_client = client.ApiClient(client.Configuration(host=server.url))
    try:
        _watch_410(server, client.CustomObjectsApi(api_client))
    finally:
        api_client.close()
        server.stop()


def _watch_410(server: FakeKubeServer, custom: client.CustomObjectsApi) -> None:
    apply(custom, worker_metadata("worker-0", "u-1"))
    old = server.resource_version
    for i in range(1, 4):
        apply(custom, worker_metadata(f"worker-{i}", "u-2"))
    events = watch.Watch().stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, resource_version=old, timeout_seconds=5
    )
    with pytest.raises(ApiException) as expired:  # the client turns the ERROR event into an exception
        next(events)
    assert expired.value.status == 410 and "Expired" in expired.value.reason

    server.clear_requests()
    retrying = watch.Watch().stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, resource_version=old
    )
    with pytest.raises(ApiException) as again:  # without timeout_seconds it retries once from the same version
        next(retrying)
    assert again.value.status == 410
    assert [r.query.get("resourceVersion") for r in server.requests] == [old, old]


def test_raw_watch_error_event_shape(server: FakeKubeServer, custom):
    apply(custom, worker_metadata("worker-0", "u-1"))
    old = server.resource_version
    apply(custom, worker_metadata("worker-1", "u-2"))
    floor = server.reinitialise_watch_cache(PLURAL)
    status, headers, _ = (None, None, None)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    conn.request("GET", f"{CR_PATH}?watch=1&resourceVersion={old}")
    resp = conn.getresponse()
    status, headers = resp.status, dict(resp.getheaders())
    event = read_event(resp)
    assert resp.read() == b""  # then the stream ends
    conn.close()
    assert status == 200 and headers["Transfer-Encoding"] == "chunked"
    assert event["type"] == "ERROR"
    assert {k: event["object"][k] for k in ("kind", "apiVersion", "status", "code", "reason")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": 410,
        "reason": "Expired",
    }
    assert event["object"]["message"] == f"too old resource version: {old} ({floor})"
    # a plain list from a too-old version is still served
    assert raw(server, "GET", f"{CR_PATH}?resourceVersion={old}&resourceVersionMatch=NotOlderThan")[0] == 200


def test_a_reinitialised_watch_cache_ends_streams_cleanly_and_older_resumes_get_410(
    server: FakeKubeServer, custom, core, streams
):
    apply(custom, worker_metadata("worker-0", "u-1"))
    old = server.resource_version
    crs = start_watch(
        server,
        streams,
        PLURAL,
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        resource_version=old,
        timeout_seconds=60,
    )
    pods = start_watch(server, streams, "pods", core.list_namespaced_pod, "default", timeout_seconds=60)
    apply(custom, worker_metadata("worker-1", "u-2"))
    assert crs.next()["object"]["metadata"]["name"] == "worker-1"

    floor = server.reinitialise_watch_cache(PLURAL)
    assert floor == server.resource_version
    crs.wait_finished()
    assert crs.error is None  # a clean end, not an ERROR event
    assert server.watch_count("pods") == 1  # other resources keep theirs

    code, _, _ = raw(server, "GET", f"{CR_PATH}?watch=true&timeoutSeconds=1&resourceVersion={old}")
    assert code == 200  # an ERROR event: the old version is older than the new window
    with pytest.raises(ApiException) as again:
        next(
            watch.Watch().stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                resource_version=old,
                timeout_seconds=1,
            )
        )
    assert again.value.status == 410
    resumed = list(  # from the floor: fine, nothing new
        watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            PLURAL,
            resource_version=floor,
            timeout_seconds=1,
        )
    )
    assert resumed == []
    server.create_pod("worker-0")
    assert pods.next()["type"] == "ADDED"


def test_watch_ends_at_timeout_seconds(server: FakeKubeServer, custom):
    started = time.monotonic()
    events = list(
        watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, timeout_seconds=1)
    )
    assert events == [] and 0.9 < time.monotonic() - started < 5


def watching_crs(fake: FakeKubeServer, api_client: client.ApiClient) -> Stream:
    """A watch of the default namespace's CRs (asked to last 600 s), open on ``fake``."""
    stream = Stream(
        client.CustomObjectsApi(api_client).list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        timeout_seconds=600,
    )
    fake.wait_for_watchers(PLURAL, 1, timeout=WAIT)
    return stream


def test_stop_ends_open_watch_streams(custom):
    fake = FakeKubeServer().start()
    api_client = client.ApiClient(client.Configuration(host=fake.url))
    try:
        stream = watching_crs(fake, api_client)
        started = time.monotonic()
        fake.stop()
        stream.wait_finished(timeout=5)
        assert time.monotonic() - started < 5
        assert stream.error is None  # a clean end of the chunked stream, not a broken connection
    finally:
        fake.stop()
        api_client.close()


def test_a_server_stopped_holding_its_port_refuses_then_serves_the_same_objects_again():
    fake = FakeKubeServer().start()
    try:
        pod = fake.create_pod("worker-0")
        port, version = fake.port, fake.resource_version
        fake.stop(hold_port=True)
        with pytest.raises(ConnectionRefusedError):
            raw(fake, "GET", "/api/v1/namespaces/default/pods/worker-0")  # still this port: refused
        fake.start()
        assert fake.port == port and int(fake.resource_version) > int(version)  # its own writes at start
        status, _, body = raw(fake, "GET", "/api/v1/namespaces/default/pods/worker-0")
        assert status == 200 and body["metadata"]["uid"] == pod["metadata"]["uid"]
    finally:
        fake.stop()


def test_stop_cuts_a_graceful_shutdown_short_and_start_serves_again_on_the_port():
    fake = FakeKubeServer(time_scale=0.01).start()  # timeoutSeconds=600 lasts 6 s
    api_client = client.ApiClient(client.Configuration(host=fake.url))
    try:
        stream = watching_crs(fake, api_client)
        port = fake.port
        fake.shut_down_gracefully(watch_grace=600)
        with pytest.raises(ConnectionRefusedError):
            raw(fake, "GET", "/api/v1/namespaces/default/pods")
        assert not stream.finished.wait(0.2)  # the watch is kept through the grace
        started = time.monotonic()
        fake.stop(hold_port=True)
        stream.wait_finished(timeout=5)
        assert stream.error is None and time.monotonic() - started < 5
        fake.start()
        assert fake.port == port and raw(fake, "GET", "/api/v1/namespaces/default/pods")[0] == 200
    finally:
        fake.stop()
        api_client.close()


def test_end_watches_closes_streams_cleanly(server: FakeKubeServer, core, streams):
    stream = start_watch(server, streams, "pods", core.list_namespaced_pod, "default", timeout_seconds=60)
    server.end_watches("pods")
    stream.wait_finished()
    assert stream.error is None and server.watch_count("pods") == 0


# ----- pods, garbage collection, readiness --------------------------------------------------------------
def test_pod_deletion_garbage_collects_owned_objects(server: FakeKubeServer, custom, core, streams):
    server.set_garbage_collector(True)
    pod_a, pod_b = server.create_pod("pod-a", containers=("main", "sidecar")), server.create_pod("pod-b")
    apply(custom, worker_metadata("pod-a", pod_a["metadata"]["uid"]))
    apply(custom, worker_metadata("pod-a-sidecar", pod_a["metadata"]["uid"], pod="pod-a"))
    apply(custom, worker_metadata("pod-b", pod_b["metadata"]["uid"]))
    stream = start_watch(
        server,
        streams,
        PLURAL,
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        resource_version=server.resource_version,
        timeout_seconds=60,
    )
    server.delete_pod("pod-a")
    gone = {stream.next()["object"]["metadata"]["name"] for _ in range(2)}
    assert gone == {"pod-a", "pod-a-sidecar"}
    assert [o["metadata"]["name"] for o in server.objects(PLURAL)] == ["pod-b"]

    core.delete_namespaced_pod("pod-b", "default")  # through the API: only terminating (no kubelet)
    server.wait_for_garbage_collection()
    assert server.get(PLURAL, "pod-b") is not None and server.get("pods", "pod-b")["metadata"]["deletionTimestamp"]
    core.delete_namespaced_pod("pod-b", "default", grace_period_seconds=0)  # the kubelet's final delete
    deleted = stream.next()
    assert (deleted["type"], deleted["object"]["metadata"]["name"]) == ("DELETED", "pod-b")


def test_orphan_deletion_keeps_dependents(server: FakeKubeServer, custom, core):
    server.set_garbage_collector(True)
    pod = server.create_pod("worker-0")
    apply(custom, worker_metadata("worker-0", pod["metadata"]["uid"]))
    core.delete_namespaced_pod("worker-0", "default", propagation_policy="Orphan", grace_period_seconds=0)
    assert server.get("pods", "worker-0") is None
    server.wait_for_garbage_collection()
    assert [o["metadata"]["name"] for o in server.objects(PLURAL)] == ["worker-0"]


def test_pod_readiness_reaches_a_typed_pod_watch(server: FakeKubeServer, core, streams):
    server.create_pod("worker-0", containers=("main", "sidecar"))
    stream = start_watch(server, streams, "pods", core.list_namespaced_pod, "default", timeout_seconds=60)
    added = stream.next()["object"]
    assert isinstance(added, client.V1Pod) and all(c.ready for c in added.status.container_statuses)
    server.set_pod_ready("worker-0", False, container="sidecar")
    pod = stream.next()["object"]
    assert {c.name: c.ready for c in pod.status.container_statuses} == {"main": True, "sidecar": False}
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"
    server.delete_pod("worker-0", graceful=True)
    terminating = stream.next()
    assert terminating["type"] == "MODIFIED" and terminating["object"].metadata.deletion_timestamp is not None
    assert terminating["object"].metadata.deletion_grace_period_seconds == 30
    stopped = stream.next()["object"]  # the kubelet: containers stopped, then its final delete
    assert stopped.metadata.deletion_timestamp and not any(c.ready for c in stopped.status.container_statuses)
    final = stream.next()
    assert final["type"] == "MODIFIED" and final["object"].metadata.deletion_grace_period_seconds == 0
    assert stream.next()["type"] == "DELETED"


def test_pods_carry_the_discovery_label_by_default(server: FakeKubeServer, core):
    server.create_pod("labelled")
    server.create_pod("plain", labels={})
    chosen = core.list_namespaced_pod("default", label_selector=f"{DISCOVERY_LABEL}=true", limit=500)
    assert [p.metadata.name for p in chosen.items] == ["labelled"]


def test_pods_through_the_api(server: FakeKubeServer, core):
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p1"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="x")]),
    )
    created = core.create_namespaced_pod("default", body)
    assert created.metadata.uid and created.status.phase == "Pending"
    assert core.read_namespaced_pod("p1", "default").metadata.name == "p1"
    assert [p.metadata.name for p in core.list_namespaced_pod("default", field_selector="metadata.name=p1").items] == [
        "p1"
    ]
    assert core.list_namespaced_pod("default", field_selector="metadata.name=other").items == []


# ----- endpoint slices and selectors -------------------------------------------------------------------
def test_label_and_field_selectors_on_endpoint_slices(server: FakeKubeServer, slices):
    pod = server.create_pod("worker-0")
    server.upsert_endpoint_slice("dynamo", [("worker-0", pod["metadata"]["uid"], True), (None, None, False)])
    server.upsert_endpoint_slice("other", [("x", "ux", True)], labels={"app": "other"})
    chosen = slices.list_namespaced_endpoint_slice("default", label_selector=f"{DISCOVERY_LABEL}=true").items
    assert [s.metadata.name for s in chosen] == ["dynamo"]
    first, second = chosen[0].endpoints
    assert (first.conditions.ready, first.target_ref.name, first.target_ref.uid) == (
        True,
        "worker-0",
        pod["metadata"]["uid"],
    )
    assert first.addresses == [pod["status"]["podIP"]]
    assert (second.conditions.ready, second.target_ref.name, second.target_ref.uid) == (False, None, None)

    def names(**kwargs: str) -> list[str]:
        return [s.metadata.name for s in slices.list_namespaced_endpoint_slice("default", **kwargs).items]

    assert names(label_selector="app!=other") == ["dynamo"]
    assert names(label_selector="app in (other, more)") == ["other"]
    assert names(label_selector=f"!{DISCOVERY_LABEL}") == ["other"]
    assert names(label_selector="app,app=other") == ["other"]
    assert names(field_selector="metadata.name=dynamo") == ["dynamo"]
    assert slices.read_namespaced_endpoint_slice("other", "default").metadata.labels == {"app": "other"}
    with pytest.raises(ApiException) as bad:
        names(label_selector="a in (b")
    assert bad.value.status == 400


def test_selector_watch_turns_relabelling_into_added_and_deleted(server: FakeKubeServer, slices, streams):
    stream = start_watch(
        server,
        streams,
        "endpointslices",
        slices.list_namespaced_endpoint_slice,
        "default",
        label_selector=f"{DISCOVERY_LABEL}=true",
        allow_watch_bookmarks=True,
        timeout_seconds=60,
    )
    server.upsert_endpoint_slice("s", [("worker-0", "u", True)], labels={"app": "x"})  # not selected
    server.upsert_endpoint_slice("s", [("worker-0", "u", True)])
    added = stream.next()
    assert added["type"] == "ADDED" and isinstance(added["object"], client.V1EndpointSlice)
    server.upsert_endpoint_slice("s", [("worker-0", "u", False)])
    assert stream.next()["object"].endpoints[0].conditions.ready is False
    server.upsert_endpoint_slice("s", [("worker-0", "u", False)], labels={"app": "x"})
    assert stream.next()["type"] == "DELETED"


def test_auto_endpoint_slices_follow_pods(tmp_path: Path):
    with FakeKubeServer(auto_endpoint_slices=True) as fake:
        fake.create_pod("worker-0")
        fake.create_pod("worker-1", ready=False)

        def endpoints() -> dict[str, bool]:
            (slice_,) = fake.objects("endpointslices")
            assert slice_["metadata"]["name"] == AUTO_SLICE_NAME
            assert slice_["metadata"]["labels"][DISCOVERY_LABEL] == "true"
            return {e["targetRef"]["name"]: e["conditions"]["ready"] for e in slice_["endpoints"]}

        assert endpoints() == {"worker-0": True, "worker-1": False}
        fake.set_pod_ready("worker-1", True)
        assert endpoints() == {"worker-0": True, "worker-1": True}
        fake.delete_pod("worker-0")
        assert endpoints() == {"worker-1": True}


# ----- pagination --------------------------------------------------------------------------------------
def test_pagination_with_limit_and_continue(server: FakeKubeServer, custom):
    for i in range(7):
        apply(custom, worker_metadata(f"w-{i}", f"u-{i}"))
    page = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=3)
    names = [i["metadata"]["name"] for i in page["items"]]
    assert len(names) == 3 and page["metadata"]["remainingItemCount"] == 4
    snapshot_rv = page["metadata"]["resourceVersion"]
    apply(custom, worker_metadata("w-9", "u-9"))  # after the first page: not part of this list
    while page["metadata"].get("continue"):
        page = custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, limit=3, _continue=page["metadata"]["continue"]
        )
        assert page["metadata"]["resourceVersion"] == snapshot_rv
        names += [i["metadata"]["name"] for i in page["items"]]
    assert names == [f"w-{i}" for i in range(7)]

    first = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=2)
    apply(custom, worker_metadata("w-10", "u-10"))  # the token's revision is now older than a compaction
    server.compact()
    with pytest.raises(ApiException) as expired:
        custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, limit=2, _continue=first["metadata"]["continue"]
        )
    assert expired.value.status == 410
    with pytest.raises(ApiException) as garbage:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _continue="not-a-token")
    assert garbage.value.status == 400


# ----- faults ------------------------------------------------------------------------------------------
def test_deny_answers_403(server: FakeKubeServer, custom, slices, streams):
    apply(custom, worker_metadata("worker-0", "u-1"))
    server.deny("dynamoworkermetadatas", "patch")
    with pytest.raises(ApiException) as denied:
        apply(custom, worker_metadata("worker-0", "u-1"))
    assert denied.value.status == 403 and status_of(denied.value)["reason"] == "Forbidden"
    assert (
        'cannot patch resource "dynamoworkermetadatas" in API group "nvidia.com"' in status_of(denied.value)["message"]
    )
    assert get_cr(custom, "worker-0")  # other verbs still allowed
    server.allow("dynamoworkermetadatas", "patch")
    apply(custom, worker_metadata("worker-0", "u-2"))

    server.deny("endpointslices", "watch")
    with pytest.raises(ApiException) as watch_denied:
        next(watch.Watch().stream(slices.list_namespaced_endpoint_slice, "default", timeout_seconds=5))
    assert watch_denied.value.status == 403
    assert slices.list_namespaced_endpoint_slice("default").items == []


def test_fail_next_injects_errors(server: FakeKubeServer, core):
    server.create_pod("worker-0")
    server.fail_next(2, 503, resource="pods", verb="list")
    for _ in range(2):
        with pytest.raises(ApiException) as failure:
            core.list_namespaced_pod("default")
        assert failure.value.status == 503 and status_of(failure.value)["reason"] == "ServiceUnavailable"
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["worker-0"]

    # With Retry-After, urllib3 inside the client retries 429/503 by itself: the caller only sees the success.
    server.clear_requests()
    server.fail_next(2, 429, resource="pods", retry_after=0)
    assert core.read_namespaced_pod("worker-0", "default").metadata.name == "worker-0"
    assert len(server.requests) == 3

    server.fail_next(1, 500)
    assert raw(server, "GET", "/api/v1/namespaces/default/pods/worker-0")[0] == 500
    assert raw(server, "GET", "/api/v1/namespaces/default/pods/worker-0")[0] == 200


# ----- raw HTTP: what kube-rs sends (docs/design.md §8) ---------------------------------------------------
def test_reference_runtime_requests(server: FakeKubeServer):
    pod = server.create_pod("worker-0")
    server.upsert_endpoint_slice("dynamo", [("worker-0", pod["metadata"]["uid"], True)])
    code, _, slice_list = raw(
        server, "GET", f"{SLICE_PATH}?labelSelector=nvidia.com%2Fdynamo-discovery-enabled%3Dtrue&limit=500"
    )
    assert code == 200 and slice_list["kind"] == "EndpointSliceList" and "continue" not in slice_list["metadata"]
    assert [s["metadata"]["name"] for s in slice_list["items"]] == ["dynamo"]
    code, _, cr_list = raw(server, "GET", f"{CR_PATH}?limit=500")
    assert code == 200 and cr_list["items"] == [] and cr_list["metadata"]["resourceVersion"]

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)  # one keep-alive connection throughout
    since = cr_list["metadata"]["resourceVersion"]
    query = f"watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion={since}"
    conn.request("GET", f"{CR_PATH}?{query}")
    watch_resp = conn.getresponse()
    assert watch_resp.status == 200

    body = json.dumps(worker_metadata("worker-0", pod["metadata"]["uid"])).encode()
    apply_path = f"{CR_PATH}/worker-0?force=true&fieldManager=dynamo-worker"
    assert raw(server, "PATCH", apply_path, body, APPLY_CT)[0] == 201
    event = read_event(watch_resp)  # delivered while the stream stays open
    assert event["type"] == "ADDED" and event["object"]["spec"]["data"]["endpoints"]["pyns/backend/generate/1"]
    code, _, updated = raw(server, "PATCH", apply_path, body, APPLY_CT)
    assert code == 200 and updated["metadata"]["resourceVersion"] == event["object"]["metadata"]["resourceVersion"]
    mark = read_event(watch_resp)
    assert mark == {
        "type": "BOOKMARK",
        "object": {
            "kind": "DynamoWorkerMetadata",
            "apiVersion": "nvidia.com/v1alpha1",
            "metadata": {"resourceVersion": server.resource_version},
        },
    }
    watch_resp.close()
    conn.close()


def test_keep_alive_after_a_finished_watch_and_yaml_bodies(server: FakeKubeServer):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    conn.request("GET", f"{CR_PATH}?watch=true&timeoutSeconds=1")
    resp = conn.getresponse()
    assert resp.read() == b""  # ends with the terminating chunk
    yaml_body = (
        "apiVersion: nvidia.com/v1alpha1\nkind: DynamoWorkerMetadata\nmetadata:\n  name: w-yaml\n"
        "spec:\n  data:\n    endpoints: {}\n"
    )
    conn.request(
        "PATCH", f"{CR_PATH}/w-yaml?fieldManager=kubectl&force=true", body=yaml_body, headers={"Content-Type": APPLY_CT}
    )
    resp = conn.getresponse()
    assert resp.status == 201 and json.loads(resp.read())["spec"] == {"data": {"endpoints": {}}}
    conn.request("GET", f"{CR_PATH}/w-yaml")
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["metadata"]["name"] == "w-yaml"
    conn.close()


def test_error_statuses_and_unknown_paths(server: FakeKubeServer):
    code, _, text = raw(server, "GET", "/apis/example.com/v1/namespaces/default/things")
    assert code == 404 and text == "404 page not found\n"  # no such group version: plain text
    code, _, status = raw(server, "GET", "/apis/nvidia.com/v1alpha1/namespaces/default/things")
    assert code == 404 and status["kind"] == "Status" and status["reason"] == "NotFound"
    assert raw(server, "POST", CR_PATH, b"{not json")[0] == 400
    code, _, status = raw(server, "PUT", f"{CR_PATH}/nope", worker_metadata("nope", "u"))
    assert code == 404 and status["details"] == {"name": "nope", "kind": PLURAL, "group": GROUP}
    assert raw(server, "GET", "/version")[2]["major"] == "1"


def test_send_initial_events_ends_with_an_annotated_bookmark(server: FakeKubeServer):
    server.create_pod("worker-0")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    conn.request(
        "GET",
        "/api/v1/namespaces/default/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=5",
    )
    resp = conn.getresponse()
    assert read_event(resp)["type"] == "ADDED"
    mark = read_event(resp)
    assert mark["type"] == "BOOKMARK"
    assert mark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    conn.close()
