"""The messages of refusals, on what a real kube-apiserver 1.28 answered (tests/fixtures/kube-apiserver-1.28/):
each recorded answer is served byte for byte on loopback, the library's own call raises what the official
client raises on it, and the message must name the cause and the fix the server's words leave out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from backends.kube.refusals import status_message
from backends.kube.wire import GROUP, PLURAL, VERSION, KubeApi, explain
from tests.kube.recorded_answers import recorded_api
from tests.kube_fake.transcripts import Step, load

RBAC_FIX = "grant the RBAC printed by `discovery-sync manifests --rbac`"


def step(transcript: str, note: str) -> Step:
    (found,) = [s for s in load(transcript).steps if s.note == note]
    return found


def apply_recorded(api: KubeApi, recorded: Step) -> Any:
    """The library's apply, of the body and CR name the recorded request carried."""
    return api.apply_worker_metadata(
        recorded.path.split("?")[0].rsplit("/", 1)[1], json.loads(recorded.request["body"])
    )


def refusal(recorded: Step, tmp_path: Path, call: Callable[[KubeApi], Any]) -> tuple[ApiException, str]:
    """What ``call`` raises against the recorded answer, and its message."""
    with recorded_api(recorded, tmp_path) as api, pytest.raises(ApiException) as raised:
        call(api)
    assert raised.value.status == recorded.status
    return raised.value, explain(raised.value, "doing it", api.server, namespace=api.namespace)


@pytest.mark.parametrize(
    ("note", "call"),
    [
        ("the library's LIST before the CRD is installed", lambda api: api.list_page(api.worker_metadata)),
        ("the library's apply before the CRD is installed", None),
    ],
)
def test_the_plain_text_404_of_a_missing_crd_says_to_install_it(note, call, tmp_path):
    recorded = step("crd_missing", note)
    assert recorded.response["content_type"].startswith("text/plain")
    exc, message = refusal(recorded, tmp_path, call or (lambda api: apply_recorded(api, recorded)))
    assert status_message(exc) == "404 Not Found: 404 page not found"  # the text, not a bytes repr
    assert message.startswith("doing it failed: the DynamoWorkerMetadata resource type (dynamoworkermetadatas")
    assert "install the DynamoWorkerMetadata CRD (`discovery-sync manifests --crd | kubectl apply -f -`" in message
    assert message.endswith("(404 Not Found: 404 page not found)")


def test_an_apply_in_a_missing_namespace_names_the_namespace_not_the_crd(tmp_path):
    recorded = step("misc_reads_errors", "the library's apply in a namespace that does not exist")
    _, message = refusal(recorded, tmp_path, lambda api: apply_recorded(api, recorded))
    assert 'the namespace "no-such-namespace" does not exist' in message
    assert "kubectl create namespace no-such-namespace" in message
    assert "CRD" not in message and "RBAC" not in message


def test_a_missing_object_is_named_not_blamed_on_the_crd(tmp_path):
    recorded = step("misc_reads_errors", "GET of a CR that does not exist")
    _, message = refusal(
        recorded, tmp_path, lambda api: api.custom.get_namespaced_custom_object(GROUP, VERSION, "x", PLURAL, "nope")
    )
    assert message.startswith('doing it failed: dynamoworkermetadatas.nvidia.com "nope" does not exist (404 Not Found')
    assert "CRD" not in message
    deleted = step("misc_reads_errors", "the library's DELETE of a CR that does not exist")
    with recorded_api(deleted, tmp_path) as api:
        assert api.delete_worker_metadata("nope") is False  # a CR already gone is no failure


@pytest.mark.parametrize("note", ["LIST CRs with an invalid bearer token", "LIST CRs with no credentials (anonymous)"])
def test_bad_or_missing_credentials_are_named_as_such_not_as_rbac(note, tmp_path):
    recorded = step("misc_reads_errors", note)
    _, message = refusal(recorded, tmp_path, lambda api: api.list_page(api.worker_metadata))
    assert "check the user credentials of the kubeconfig's current context" in message
    assert RBAC_FIX not in message and "may not" not in message
    if recorded.status == 401:
        assert "does not accept this client's credentials (wrong or expired)" in message
    else:
        assert "took this client for an anonymous user (system:anonymous)" in message


def test_an_apply_refused_for_want_of_create_names_create_though_the_server_does_not(tmp_path):
    recorded = step("rbac_denials", "variant no-create-dwm: library apply creating a new CR")
    assert recorded.response["body"]["message"] == 'dynamoworkermetadatas.nvidia.com "new-0" is forbidden: '
    _, message = refusal(recorded, tmp_path, lambda api: apply_recorded(api, recorded))
    assert 'may not create dynamoworkermetadatas.nvidia.com in the namespace "rbac-no-create-dwm"' in message
    assert f"{RBAC_FIX} (in the package" in message and "kubectl apply -n rbac-no-create-dwm -f it" in message


@pytest.mark.parametrize(
    ("note", "verb", "call"),
    [
        ("variant no-patch-dwm: library apply to an existing CR (patch)", "patch", None),
        ("variant no-patch-dwm: library apply creating a new CR", "patch", None),
        ("variant no-delete-dwm: library DELETE of an existing CR", "delete", lambda a: a.delete_worker_metadata("x")),
        ("variant no-list-dwm: library LIST dynamoworkermetadatas", "list", lambda a: a.list_page(a.worker_metadata)),
    ],
)
def test_a_named_denial_names_the_verb_the_account_and_the_fix(note, verb, call, tmp_path):
    recorded = step("rbac_denials", note)
    exc, message = refusal(recorded, tmp_path, call or (lambda api: apply_recorded(api, recorded)))
    namespace = recorded.path.split("/namespaces/")[1].split("/")[0]
    assert (
        f"access denied: the service account {namespace}/default may not {verb} dynamoworkermetadatas.nvidia.com "
        f'in the namespace "{namespace}"; {RBAC_FIX}'
    ) in message
    assert message.endswith(f"to the service account {namespace}/default ({status_message(exc)})")


def test_a_denied_readiness_list_names_endpointslices(tmp_path):
    recorded = step("rbac_denials", "variant no-list-eps: library LIST endpointslices (label selector)")
    _, message = refusal(recorded, tmp_path, lambda api: api.list_page(api.endpoint_slices))
    assert 'may not list endpointslices.discovery.k8s.io in the namespace "rbac-no-list-eps"' in message


def test_a_body_given_as_bytes_is_read_as_text_too():
    """Clients older than the one installed kept the raw bytes as the body: no ``b'...'`` repr either way."""
    recorded = step("crd_missing", "the library's LIST before the CRD is installed")
    exc = ApiException(status=404, reason="Not Found")
    exc.body = recorded.response["body"].encode()
    assert status_message(exc) == "404 Not Found: 404 page not found"
    assert "install the DynamoWorkerMetadata CRD" in explain(exc, "listing")
