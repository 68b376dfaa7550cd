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
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from testrigs.kube_fake import NAMESPACES, PODS, WORKER_METADATA, FakeKubeServer
from testrigs.kube_fake.jsonwire import encode, sorted_keys, stored_value

from .transcripts import Step, load

REPLAYED = frozenset(
    {"ssa_empty_map", "non_bmp", "numbers", "pruning", "crd_missing", "misc_reads_errors", "pagination"}
)

CR_BASE = "/apis/nvidia.com/v1alpha1/namespaces"
WAIT = 10.0  # bound on every read from the fake


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
    server: FakeKubeServer,
    method: str,
    path: str,
    body: str | bytes | None = None,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One request on a fresh connection; ``body`` goes out as given (a str as UTF-8)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT)
    try:
        sent = {**({"Content-Type": content_type} if content_type else {}), **(headers or {})}
        payload = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=payload, headers=sent)
        response = conn.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        conn.close()


def spec_text(text: str) -> str:
    """The exact text of a CR from its ``"spec":`` key on (the last key: everything run-independent)."""
    return text[text.index('"spec":') :].rstrip()


def managed_fields(obj: dict[str, Any]) -> list[tuple[str, str, bool, Any]]:
    """The ``managedFields`` entries: manager, operation, whether timed, and the fields they own, in
    the server's order (operation, time, manager) but for their times, which differ from the
    recording's by whole seconds (two writes may fall in one second there and in two here)."""
    entries = obj["metadata"].get("managedFields") or []
    listed = [(e["operation"], e.get("time", ""), e["manager"]) for e in entries]
    assert listed == sorted(listed), f"managedFields out of the server's order: {listed}"
    timeless = [(e["manager"], e["operation"], "time" in e, e["fieldsV1"]) for e in entries]
    return sorted(timeless, key=lambda entry: (entry[1], entry[0], entry[2]))


class Replay:
    """Sends a transcript's recorded requests to the fake and compares each answer with the recorded one.

    Run-specific values are mapped as they appear: a recorded resourceVersion, uid or continue token in a
    later request is replaced by the fake's value from the matching earlier answer; an object's
    resourceVersion must stay the same exactly when the recorded one did (a no-op write), and change
    exactly when it changed.
    """

    def __init__(self, server: FakeKubeServer, name: str):
        self.server = server
        self.transcript = load(name)
        self.subs: dict[str, str] = {}  # recorded value -> the fake's
        self.versions: dict[str, tuple[str, str]] = {}  # object name -> (recorded, fake) resourceVersion
        self.watches: list[tuple[Step, http.client.HTTPConnection, http.client.HTTPResponse]] = []

    @property
    def steps(self) -> list[Step]:
        return self.transcript.steps

    def create_setting(self) -> None:
        """The namespaces the requests name and the pods their ownerReferences name (with their uids)."""
        for step in self.steps:
            path = step.path.split("?")[0].split("/")
            if "namespaces" in path[:-1]:
                namespace = path[path.index("namespaces") + 1]
                if namespace != "no-such-namespace":  # the one the recording left missing on purpose
                    self.server.create_namespace(namespace)
            try:
                body = json.loads(step.request.get("body") or "null")
            except ValueError:
                continue
            meta = body.get("metadata") if isinstance(body, dict) else None
            for ref in (meta or {}).get("ownerReferences") or []:
                if ref.get("kind") == "Pod" and self.server.get(PODS, ref["name"], namespace) is None:
                    self.server.create_pod(ref["name"], uid=ref["uid"], namespace=namespace)

    def _substituted(self, text: str) -> str:
        for recorded, fake in self.subs.items():
            text = text.replace(recorded, fake)
        return text

    def send(self, step: Step, headers: dict[str, str] | None = None) -> Answer:
        """The recorded request, with run-specific values mapped to the fake's."""
        body = step.request.get("body")
        return send(
            self.server,
            step.method,
            self._substituted(step.path),
            self._substituted(body) if body is not None else None,
            step.request.get("content_type"),
            {"User-Agent": "OpenAPI-Generator/28.1.0/python", **(headers or {})},
        )

    def _learn(self, recorded: Any, got: Any) -> None:
        if not (isinstance(recorded, dict) and isinstance(got, dict)):
            return
        pairs = [("resourceVersion", "resourceVersion"), ("uid", "uid"), ("continue", "continue")]
        recorded_meta, got_meta = recorded.get("metadata") or {}, got.get("metadata") or {}
        for key, _ in pairs:
            if recorded_meta.get(key) and got_meta.get(key):
                self.subs[f'"{key}": "{recorded_meta[key]}"'] = f'"{key}": "{got_meta[key]}"'
                self.subs[f"{key}={recorded_meta[key]}"] = f"{key}={got_meta[key]}"

    def _check_version(self, name: str, recorded: dict[str, Any], got: dict[str, Any]) -> None:
        """``name``'s resourceVersion (an object's, or a list's by path) changes exactly when the recorded one did."""
        was, now = recorded["metadata"]["resourceVersion"], got["metadata"]["resourceVersion"]
        if name in self.versions:
            recorded_before, fake_before = self.versions[name]
            same = was == recorded_before
            assert (now == fake_before) == same, f"{name}: resourceVersion changed: {not same}"
        self.versions[name] = (was, now)

    def check(self, step: Step, answer: Answer) -> None:
        """The answer matches the recorded one in every run-independent fact."""
        recorded = step.response
        where = f"{self.transcript.name}: {step.method} {step.path}: {step.note}"
        assert answer.status == recorded["status"], (where, answer.raw[:400])
        assert answer.content_type.split(";")[0] == recorded["content_type"].split(";")[0], where
        if not recorded["content_type"].startswith("application/json"):
            assert answer.raw.decode() == recorded["body"], where
            return
        want, got = recorded["body"], answer.json()
        self._learn(want, got)
        if want.get("kind") == "Status":
            assert got == want, where
        elif "items" in want:
            self.check_list(want, got, where)
            self._check_version("list " + re.sub(r"&?continue=[^&]*", "", step.path), want, got)  # pages of one list
        else:
            self.check_object(want, got, where)
        if "body_text" in recorded and '"spec":' in recorded["body_text"]:
            assert spec_text(answer.raw.decode()) == spec_text(recorded["body_text"]), where
        if "warning_header" in recorded:
            assert answer.headers.get_all("Warning") == recorded["warning_header"], where

    def check_object(self, want: dict[str, Any], got: dict[str, Any], where: str) -> None:
        if "metadata" not in want:
            assert got == want, where  # a document without run-specific parts (discovery, version)
            return
        assert set(got) == set(want), where
        assert got.get("spec") == want.get("spec"), where
        assert got["metadata"]["generation"] == want["metadata"]["generation"], where
        assert managed_fields(got) == managed_fields(want), where
        self._check_version(want["metadata"]["name"], want, got)

    @staticmethod
    def check_list(want: dict[str, Any], got: dict[str, Any], where: str) -> None:
        names = [i if isinstance(i, str) else i["metadata"]["name"] for i in want["items"]]
        assert [i["metadata"]["name"] for i in got["items"]] == names, where
        assert set(got) == set(want) - {"_items_note"}, where
        assert set(got["metadata"]) == set(want["metadata"]), where
        assert bool(got["metadata"]["continue"]) == bool(want["metadata"]["continue"]), where
        assert got["metadata"].get("remainingItemCount") == want["metadata"].get("remainingItemCount"), where

    # -- watches --
    def open_watch(self, step: Step) -> None:
        """Open the recorded watch (from the mapped resourceVersion; one no earlier answer gave: the fake's
        current one, as the recording opened it before its writes); its events are checked by :meth:`finish`."""
        recorded = parse_qs(urlsplit(step.path).query)["resourceVersion"][0]
        if recorded not in self.subs:  # a version the fake never gave would be one from its future: silence
            self.subs[recorded] = self.server.resource_version
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=WAIT)
        conn.request("GET", self._substituted(step.path))
        response = conn.getresponse()
        assert response.status == 200
        self.watches.append((step, conn, response))

    def finish(self) -> None:
        """Each watch received the recorded events, in order: types, spec, and the exact spec text."""
        for step, conn, response in self.watches:
            try:
                lines = step.response.get("lines_text") or [None] * len(step.response["body"])
                for want, text in zip(step.response["body"], lines, strict=True):
                    line = response.readline()
                    event = json.loads(line)
                    where = f"{self.transcript.name}: watch event {want['type']} {want['object']['metadata']['name']}"
                    assert (event["type"], event["object"]["metadata"]["name"]) == (
                        want["type"],
                        want["object"]["metadata"]["name"],
                    ), where
                    assert event["object"].get("spec") == want["object"].get("spec"), where
                    if text is not None:
                        assert spec_text(line.decode()) == spec_text(text), where
            finally:
                conn.close()

    def run(
        self,
        skip: dict[int, str] | None = None,
        headers: dict[int, dict[str, str]] | None = None,
        after: dict[int, Callable[[], object]] | None = None,
    ) -> None:
        """Replay every step in order (``skip``: index -> why the fake cannot model it; ``headers``: extra
        request headers by index; ``after``: what to do once a step is checked)."""
        for index, step in enumerate(self.steps):
            if after and index - 1 in after:
                after[index - 1]()
            if skip and index in skip:
                continue
            if "watch=true" in step.path:
                self.open_watch(step)
                continue
            self.check(step, self.send(step, (headers or {}).get(index)))
        self.finish()


@pytest.fixture
def server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer(bookmark_interval=0.2) as fake:
        yield fake


# ----- the replays ------------------------------------------------------------------------------------
def test_ssa_empty_map_stores_null_then_empty_then_nothing(server: FakeKubeServer):
    replay = Replay(server, "ssa_empty_map")
    replay.create_setting()
    replay.run()


def test_non_bmp_escapes_in_apply_are_refused_and_non_ascii_comes_back_as_utf8(server: FakeKubeServer):
    replay = Replay(server, "non_bmp")
    replay.create_setting()
    replay.run()
    assert server.get(WORKER_METADATA, "a-escape", namespace="non-bmp") is None
    lone = server.get(WORKER_METADATA, "g-lone-surrogate", namespace="non-bmp")
    assert lone is not None and "\ufffd" in json.dumps(lone, ensure_ascii=False)


def test_numbers_come_back_as_the_go_server_renders_them(server: FakeKubeServer):
    replay = Replay(server, "numbers")
    replay.create_setting()
    replay.run()


def test_every_recorded_number_is_stored_and_written_as_the_go_server_does():
    step = load("numbers").steps[1]  # the library's apply, and the exact text the server answered
    sent = json.loads(step.request["body"])["spec"]["data"]["model_cards"]
    (card,) = [record["card_json"] for record in sent.values()]
    answered = step.response["body_text"]
    for key in ("nums", "nums_list"):
        start = answered.index(f'"{key}":')
        expected = answered[start : answered.index("}" if key == "nums" else "]", start) + 1]
        assert f'"{key}":' + encode(sorted_keys(stored_value(card[key]))).decode() == expected


def test_pruning_and_schema_validation(server: FakeKubeServer):
    replay = Replay(server, "pruning")
    replay.create_setting()
    replay.run()


def test_crd_missing_is_plain_text_404(server: FakeKubeServer):
    replay = Replay(server, "crd_missing")
    replay.create_setting()
    server.set_crd_installed(False)
    create_crd = next(i for i, step in enumerate(replay.steps) if "customresourcedefinitions" in step.path)
    for index, step in enumerate(replay.steps):
        if index == create_crd:  # the fake has no apiextensions API: installing the CRD is a switch
            server.set_crd_installed(True)
            continue
        replay.check(step, replay.send(step))  # timing (LIST served ~13 ms after the CRD POST) not modelled


def test_misc_reads_and_errors(server: FakeKubeServer):
    replay = Replay(server, "misc_reads_errors")
    replay.create_setting()
    steps = replay.steps
    library_apply = {"w-0": steps[12], "w-1": steps[16]}  # the bodies dynamo-worker had applied before
    for name, step in library_apply.items():
        path = f"{CR_BASE}/pagination/dynamoworkermetadatas/{name}?fieldManager=dynamo-worker&force=true"
        assert send(server, "PATCH", path, step.request["body"], "application/apply-patch+yaml").status == 201
    server.set_valid_tokens({"admin-token"})
    invalid_token = {"Authorization": "Bearer not-a-valid-token"}
    replay.run(
        skip={3: "anonymous LIST -> 403 system:anonymous: RBAC, modelled by the fake's deny() (another replay)"},
        headers={1: invalid_token, 4: invalid_token},
    )


def test_pagination_pages_carry_continue_remaining_count_and_the_first_version(server: FakeKubeServer):
    replay = Replay(server, "pagination")
    for index in range(5):
        body = json.dumps(
            {
                "apiVersion": "nvidia.com/v1alpha1",
                "kind": "DynamoWorkerMetadata",
                "metadata": {"name": f"w-{index}"},
                "spec": {"data": {"endpoints": {}}},
            }
        )
        path = f"{CR_BASE}/pagination/dynamoworkermetadatas/w-{index}?fieldManager=dynamo-worker&force=true"
        server.create_namespace("pagination")
        assert send(server, "PATCH", path, body, "application/apply-patch+yaml").status == 201
    # a write elsewhere between the pages: they still carry the first page's resourceVersion (Replay.check_list)
    replay.run(after={0: lambda: server.create_pod("elsewhere", namespace="other")})


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
