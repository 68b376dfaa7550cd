"""Writes the API server refuses, on the fake: register() names the permission that is missing (create or
patch) or the CRD, shutdown() without ``delete`` says in one warning what stays and what to grant."""

from __future__ import annotations

import json
import logging
import urllib.request
from urllib.error import HTTPError

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, model_spec
from testrigs.kube_fake import WORKER_METADATA
from tests.kube_fake.transcripts import load

RBAC_FIX = "grant the RBAC printed by `discovery-sync manifests --rbac`"
KUBE_LOG = "discovery_sync.backends.kube"


def test_the_fake_refuses_an_apply_that_would_create_without_create_as_the_real_server_does(server):
    (recorded,) = load("rbac_denials").find("variant no-create-dwm: library apply creating a new CR")
    server.deny(WORKER_METADATA, "create")
    path = recorded.path.replace("/namespaces/rbac-no-create-dwm/", "/namespaces/default/")
    request = urllib.request.Request(
        server.url + path,
        data=recorded.request["body"].encode(),
        method="PATCH",
        headers={"Content-Type": recorded.request["content_type"]},
    )
    with pytest.raises(HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    assert json.loads(refused.value.read()) == recorded.response["body"]
    assert server.get(WORKER_METADATA, "new-0") is None


def test_register_without_create_names_create_and_an_existing_cr_needs_only_patch(server, pod_client):
    server.deny(WORKER_METADATA, "create")
    client = pod_client("worker-0")
    with pytest.raises(ds.BackendUnavailable) as refused:
        client.register(endpoint_spec())
    message = str(refused.value)
    assert (
        'access denied: this client may not create dynamoworkermetadatas.nvidia.com in the namespace "default"'
        in message
    )
    assert f"{RBAC_FIX} (in the package" in message and message.endswith("; nothing was changed")
    assert server.get(WORKER_METADATA, "worker-0") is None and client.owned() == ()

    server.allow(WORKER_METADATA, "create")
    endpoint = client.register(endpoint_spec())  # creates the CR
    server.deny(WORKER_METADATA, "create")
    model = client.register(model_spec())  # applies to the existing CR: patch is enough
    assert set(client.owned()) == {endpoint, model}
    assert len(server.get(WORKER_METADATA, "worker-0")["spec"]["data"]["model_cards"]) == 1


def test_register_without_patch_names_patch(server, pod_client):
    server.deny(WORKER_METADATA, "patch")
    client = pod_client("worker-0")
    with pytest.raises(
        ds.BackendUnavailable, match=r"may not patch dynamoworkermetadatas\.nvidia\.com in the namespace"
    ):
        client.register(endpoint_spec())


def test_register_without_the_crd_says_to_install_it(server, pod_client):
    client = pod_client("worker-0")
    server.set_crd_installed(False)
    with pytest.raises(ds.BackendUnavailable) as refused:
        client.register(endpoint_spec())
    assert "install the DynamoWorkerMetadata CRD (`discovery-sync manifests --crd | kubectl apply -f -`" in str(
        refused.value
    )


def test_register_with_credentials_the_server_rejects_names_the_credentials(server, pod_client):
    client = pod_client("worker-0")
    server.fail_next(1, 401, resource=WORKER_METADATA, verb="patch", message="Unauthorized")
    with pytest.raises(ds.BackendUnavailable) as refused:
        client.register(endpoint_spec())
    message = str(refused.value)
    assert "does not accept this client's credentials" in message and "kubeconfig" in message
    assert RBAC_FIX not in message


def test_shutdown_without_delete_says_in_one_warning_what_stays_and_what_to_grant(server, pod_client, caplog):
    client = pod_client("worker-0")
    client.register(endpoint_spec())
    server.deny(WORKER_METADATA, "delete")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        client.shutdown()
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.name == KUBE_LOG and warning.levelno == logging.WARNING and warning.exc_info is None
    text = warning.getMessage()
    assert text.startswith(
        "this worker's DynamoWorkerMetadata default/worker-0 and its records stay: readers keep serving them while "
        "the pod worker-0 is ready, until the pod is deleted and the garbage collector removes the CR; "
    )
    assert 'may not delete dynamoworkermetadatas.nvidia.com in the namespace "default"' in text and RBAC_FIX in text
    assert server.get(WORKER_METADATA, "worker-0")["spec"]["data"]["endpoints"]  # it did stay
