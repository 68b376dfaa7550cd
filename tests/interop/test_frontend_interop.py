"""The reference 1.6.1 HTTP frontend follows a model card that changes under one instance id
(issue 38): a worker of ours that registers another card after unregistering one, and a failover
cohort's successor that takes over with another card. The frontend runs in a reference peer
(``cmd_frontend``); what it lists is its ``GET /v1/models``. docs/interop.md ("A card replaced
under one name") says why a card changed in place, or removed and created at once, stays unseen.
"""

from __future__ import annotations

from typing import Any

import pytest

import discovery_sync as ds

ROUNDS = 15
ROUND_TIMEOUT = 3.0  # seconds for a round's card to be listed (it takes milliseconds when followed)
COHORT_ROUNDS = 5
LOGICAL_ID = 0x5EED38


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


def model(name: str) -> ds.ModelSpec:
    return ds.ModelSpec("pyns", "backend", "generate", card(name))


ENDPOINT = ds.EndpointSpec("pyns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1/py"))


@pytest.fixture
def frontend(file_store, rust_peers):
    """A reference peer on the file store running the HTTP frontend (loopback-only namespace)."""
    peer = rust_peers("file", {"DYN_FILE_KV": str(file_store)}, isolate=True)
    peer.call("frontend")
    return peer


def listed(frontend, names: list[str], timeout: float = ROUND_TIMEOUT) -> dict[str, Any]:
    """Wait until the frontend lists exactly ``names``; its reply (``seen``, ``models``)."""
    return frontend.call("wait_models", models=names, timeout=timeout)


def test_a_card_registered_again_under_one_id_replaces_the_old_one_in_the_frontend(file_store, frontend):
    client = ds.connect(f"file://{file_store}")
    try:
        client.register(ENDPOINT)
        registered = client.register(model("m0"))
        assert listed(frontend, ["m0"], timeout=10)["seen"]
        missed = []
        for round in range(1, ROUNDS + 1):
            client.unregister(registered)
            registered = client.register(model(f"m{round}"))  # back to back: no pause between them
            seen = listed(frontend, [f"m{round}"])
            if not seen["seen"]:
                missed.append((round, seen["models"]))
        assert not missed, f"{len(missed)} of {ROUNDS} rounds: the frontend still listed {missed}"
    finally:
        client.shutdown()


def test_a_cohort_successor_with_another_card_replaces_it_in_the_frontend(file_store, frontend):
    url = f"file://{file_store}"
    members = [ds.connect(url, logical_instance_id=LOGICAL_ID)]
    try:
        members[0].register(ENDPOINT)
        members[0].register(model("c0"))
        assert listed(frontend, ["c0"], timeout=10)["seen"]
        missed = []
        for round in range(1, COHORT_ROUNDS + 1):
            successor = ds.connect(url, logical_instance_id=LOGICAL_ID)
            members.append(successor)
            successor.register(ENDPOINT)
            successor.register(model(f"c{round}"))  # replaces the predecessor's card under the same id
            seen = listed(frontend, [f"c{round}"])
            if not seen["seen"]:
                missed.append((round, seen["models"]))
        assert not missed, f"{len(missed)} of {COHORT_ROUNDS} takeovers: the frontend still listed {missed}"
    finally:
        for member in members:
            member.shutdown()
