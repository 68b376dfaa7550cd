"""The reference 1.6.1 HTTP frontend follows a model card that changes under one instance id
(issue 38): a worker of ours that registers another card after unregistering one (file store,
etcd, Kubernetes), and a failover cohort's successor that takes over with another card (file
store only: etcd and Kubernetes clients refuse logical ids, so there no write of ours changes a
card in place but a taint update, which the frontend ignores). The frontend runs in a reference
peer (``cmd_frontend``); what it lists is its ``GET /v1/models``. docs/interop.md ("A card
replaced under one name") says why a card changed in place, or removed and created at once,
stays unseen, and why the etcd and Kubernetes tests are guards that passed before any change.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import discovery_sync as ds
from testrigs.kube_fake import FakeKubeServer
from testrigs.reference import RustPeer
from tests.kube.rig import connect_pod

ROUNDS = 15
ROUND_TIMEOUT = 3.0  # seconds for a round's card to be listed (it takes milliseconds when followed)
COHORT_ROUNDS = 5
LOGICAL_ID = 0x5EED38
FIRST_LISTING = 10.0  # seconds for the first card: the frontend's discovery may still be starting


def card(name: str) -> dict[str, Any]:
    """The smallest card the frontend serves offline: a text model, so no tokenizer is fetched."""
    return {
        "display_name": name,
        "slug": name.lower(),
        "model_type": "Chat",
        "model_input": "Text",
        "worker_type": "aggregated",
        "kv_cache_block_size": 16,
        "context_length": 0,
        "migration_limit": 0,
    }


def model(name: str, namespace: str = "pyns") -> ds.ModelSpec:
    return ds.ModelSpec(namespace, "backend", "generate", card(name))


def endpoint(namespace: str = "pyns") -> ds.EndpointSpec:
    return ds.EndpointSpec(namespace, "backend", "generate", ds.Transport.tcp("127.0.0.1:1/py"))


ENDPOINT = endpoint()


@pytest.fixture
def frontend(file_store, rust_peers):
    """A reference peer on the file store running the HTTP frontend (loopback-only namespace)."""
    peer = rust_peers("file", {"DYN_FILE_KV": str(file_store)}, isolate=True)
    peer.call("frontend")
    return peer


def listed(frontend, names: list[str], timeout: float = ROUND_TIMEOUT) -> dict[str, Any]:
    """Wait until the frontend lists exactly ``names``; its reply (``seen``, ``models``)."""
    return frontend.call("wait_models", models=names, timeout=timeout)


def replaced_rounds(client: ds.Discovery, frontend: RustPeer, rounds: int, namespace: str = "pyns") -> list[Any]:
    """Register an endpoint and card ``m0``; then, ``rounds`` times, unregister the card and at once
    register another (``m1``, ``m2``, ...). The rounds whose card the frontend did not list alone, or
    the reference's model-card watch did not hold, within ROUND_TIMEOUT each, with what they held."""
    client.register(endpoint(namespace))
    registered = client.register(model("m0", namespace))
    assert listed(frontend, ["m0"], timeout=FIRST_LISTING)["seen"]
    missed = []
    for round in range(1, rounds + 1):
        client.unregister(registered)
        registered = client.register(model(f"m{round}", namespace))  # back to back: no pause between them
        seen = listed(frontend, [f"m{round}"])
        watched = card_watched(frontend, f"{namespace}.backend.generate", registered.instance_id, f"m{round}")
        if not seen["seen"] or watched != f"m{round}":
            missed.append((round, seen["models"], watched))
    return missed


def card_watched(peer: RustPeer, endpoint_path: str, instance_id: int, name: str) -> str | None:
    """Poll the reference's own model-card watch (``FpmEventSubscriber``) of the endpoint until
    it holds the card named ``name`` for ``instance_id``, at most ROUND_TIMEOUT; the name it holds."""
    deadline = time.monotonic() + ROUND_TIMEOUT
    while True:
        card = peer.call("model_cards", endpoint=endpoint_path)["cards"].get(str(instance_id))
        held = None if card is None else card.get("display_name")
        if held == name or time.monotonic() > deadline:
            return held
        time.sleep(0.005)  # the runtime offers no notification for this view, only a snapshot


def test_a_card_registered_again_under_one_id_replaces_the_old_one_in_the_frontend(file_store, frontend):
    client = ds.connect(f"file://{file_store}")
    try:
        missed = replaced_rounds(client, frontend, ROUNDS)
        assert not missed, f"{len(missed)} of {ROUNDS} rounds: the frontend still listed {missed}"
    finally:
        client.shutdown()


def test_a_cohort_successor_with_another_card_replaces_it_in_the_frontend(file_store, frontend):
    url = f"file://{file_store}"
    members = [ds.connect(url, logical_instance_id=LOGICAL_ID)]
    try:
        members[0].register(ENDPOINT)
        members[0].register(model("c0"))
        assert listed(frontend, ["c0"], timeout=FIRST_LISTING)["seen"]
        missed = []
        for round in range(1, COHORT_ROUNDS + 1):
            successor = ds.connect(url, logical_instance_id=LOGICAL_ID)
            members.append(successor)
            successor.register(ENDPOINT)
            successor.register(model(f"c{round}"))  # replaces the predecessor's card under the same id
            seen = listed(frontend, [f"c{round}"])
            watched = card_watched(frontend, "pyns.backend.generate", LOGICAL_ID, f"c{round}")
            if not seen["seen"] or watched != f"c{round}":
                missed.append((round, seen["models"], watched))
        assert not missed, f"{len(missed)} of {COHORT_ROUNDS} takeovers: the frontend still listed {missed}"
    finally:
        for member in members:
            member.shutdown()


# ----- etcd and Kubernetes: a worker of ours unregisters a card and registers another ------------------
ETCD_ROUNDS = KUBE_ROUNDS = 12


def test_a_card_registered_again_under_one_id_replaces_the_old_one_in_a_frontend_on_etcd(etcd_server, rust_peers):
    """A guard: each etcd watcher receives the delete and the put as two revisions, in order, so
    this passed before any change (the issue saw 6 of 6 followed)."""
    namespace = f"frontend{uuid.uuid4().hex[:12]}"  # the session's etcd, unprefixed: the reference's keys
    peer = rust_peers("etcd", {"ETCD_ENDPOINTS": etcd_server.url, "ETCD_LEASE_TTL": "3"})
    peer.call("frontend", namespace=namespace)  # only this test's models: others may linger in etcd
    client = ds.connect(f"etcd://127.0.0.1:{etcd_server.client_port}")
    try:
        missed = replaced_rounds(client, peer, ETCD_ROUNDS, namespace)
        assert not missed, f"{len(missed)} of {ETCD_ROUNDS} rounds: the frontend still listed {missed}"
    finally:
        client.shutdown()


def test_a_card_registered_again_under_one_id_replaces_the_old_one_in_a_frontend_on_kubernetes(
    kube_server: FakeKubeServer, kubeconfig: Path, rust_kube_peer
):
    """A guard: the reference frontend runs as a pod of the fake API server, our worker is the pod
    ``py-0``, whose whole CR each unregister and register applies. The 1.6.1 daemon handles each CR
    watch event on its own (it does not diff the latest CR against what it knew), so this passed
    before any change; a reader that took both applies as one change would refuse the new card."""
    peer = rust_kube_peer("frontend-0")
    peer.call("frontend")
    client = connect_pod(kube_server, kubeconfig, "py-0")
    try:
        missed = replaced_rounds(client, peer, KUBE_ROUNDS)
        refused = peer.log().count("Rejecting immutable discovery model-card mutation")
        assert not missed, (
            f"{len(missed)} of {KUBE_ROUNDS} rounds: the frontend still listed {missed} "
            f"(its log refused a card mutation {refused} time(s))"
        )
    finally:
        client.shutdown()
