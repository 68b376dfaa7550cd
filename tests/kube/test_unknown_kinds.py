"""The Kubernetes backend beside kinds of records this version does not know (issue 38, point 11).

Newer runtimes add record kinds to a DynamoWorkerMetadata's ``spec.data``: a map of their own
(Velo peers: ``velo_peers``) beside ``endpoints`` and ``model_cards``, or records of a type of
their own. A map of another name is never read, whatever it holds; a record of an unknown type in
one of our maps is skipped like an unreadable one but not warned about: the first of its type is
said once, at INFO, however often its CR changes. The valid records of the CR are served all along."""

from __future__ import annotations

import copy
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

import discovery_sync as ds
from testrigs.helpers import LogCatcher, assert_quiet, endpoint_spec, initial_state, model_spec
from testrigs.kube_fake import WORKER_METADATA
from tests.unknown_kinds import backend_logs, velo_peer

LOGGER = "discovery_sync.backends.kube"
QUIET = 0.5


@pytest.fixture
def logs() -> Iterator[LogCatcher]:
    """Every line of the kube backend at INFO and above."""
    with backend_logs(LOGGER) as catcher:
        yield catcher


def unknown_maps(rounds: int) -> dict[str, Any]:
    """Maps of names this version does not know, holding anything (a newer runtime's, and junk)."""
    return {
        "velo_peers": {f"ns/backend/{n:x}": velo_peer(instance_id=n) for n in range(1, rounds + 2)},
        "future_list": [1, 2, rounds],
        "future_text": "x" * rounds,
        "future_null": None,
    }


def owned_by(server, pod_name: str) -> list[dict[str, Any]]:
    uid = server.get("pods", pod_name)["metadata"]["uid"]
    return [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid, "controller": True}]


def with_data(cr: dict[str, Any], **maps: Any) -> dict[str, Any]:
    """``cr`` (a copy) with these maps added to, or replacing those of, its spec.data."""
    changed = copy.deepcopy(cr)
    changed["spec"]["data"].update(maps)
    return changed


def warnings_in(logs: LogCatcher) -> list[str]:
    return [m for m, at in zip(logs.messages, logs.levels, strict=True) if at >= logging.WARNING]


def test_unknown_maps_in_a_cr_are_ignored_by_lists_watches_and_status(server, pod_client, logs):
    worker, reader = pod_client("worker-a"), pod_client("reader")
    endpoint, model = worker.register(endpoint_spec()), worker.register(model_spec())
    cr = server.get(WORKER_METADATA, "worker-a")
    server.upsert(WORKER_METADATA, with_data(cr, **unknown_maps(1)))
    server.create_pod("velo-only")  # a newer worker that serves nothing this version knows
    velo_only = {
        "apiVersion": cr["apiVersion"],
        "kind": cr["kind"],
        "metadata": {"name": "velo-only", "ownerReferences": owned_by(server, "velo-only")},
        "spec": {"data": unknown_maps(1)},
    }
    server.upsert(WORKER_METADATA, velo_only)
    assert reader.list(ds.Query.endpoints()) == [endpoint]
    assert reader.list(ds.Query.models()) == [model]
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        added, resync = initial_state(watch)
        assert added == [ds.Added(endpoint)] and resync.instances == (endpoint,)
        for rounds in (2, 3):  # the unknown maps change: nothing to tell
            server.upsert(WORKER_METADATA, with_data(server.get(WORKER_METADATA, "worker-a"), **unknown_maps(rounds)))
            server.upsert(WORKER_METADATA, with_data(server.get(WORKER_METADATA, "velo-only"), **unknown_maps(rounds)))
        assert_quiet(watch, QUIET)
        later = worker.register(endpoint_spec(endpoint="later"))  # a later change beside them
        assert watch.get(timeout=10) == ds.Added(later)
        fresh = endpoint_spec(endpoint="fresh").to_instance(worker.instance_id)
        cr = server.get(WORKER_METADATA, "worker-a")
        server.upsert(  # a change of another writer's making, beside the unknown maps
            WORKER_METADATA,
            with_data(cr, endpoints={**cr["spec"]["data"]["endpoints"], fresh.id().to_path(): fresh.to_dict()}),
        )
        assert watch.get(timeout=10) == ds.Added(fresh)
    assert set(reader.list(ds.Query.endpoints())) == {endpoint, later, fresh}
    assert reader.status()["closed"] is False
    assert reader.diagnose()["problems"] == []
    assert warnings_in(logs) == []
    assert not [m for m in logs.messages if "velo" in m.lower() or "future" in m]


def test_a_record_of_an_unknown_type_in_a_known_map_is_skipped_and_said_once(server, pod_client, logs):
    type_name = f"VeloPeer{secrets.token_hex(4)}"
    worker, reader = pod_client("worker-a"), pod_client("reader")
    endpoint = worker.register(endpoint_spec())
    cr = server.get(WORKER_METADATA, "worker-a")
    planted = {"ns/backend/velo/7": velo_peer(type_name, 7), "ns/backend/velo/8": velo_peer(type_name, 8)}
    endpoints = {**cr["spec"]["data"]["endpoints"], **planted}
    server.upsert(WORKER_METADATA, with_data(cr, endpoints=endpoints))
    assert reader.list(ds.Query.endpoints()) == [endpoint]
    with reader.list_and_watch(ds.Query.endpoints()) as watch:
        added, resync = initial_state(watch)
        assert added == [ds.Added(endpoint)] and resync.instances == (endpoint,)
        for n in (9, 10):  # the CR changes again and again: each version parsed anew
            endpoints[f"ns/backend/velo/{n:x}"] = velo_peer(type_name, n)
            server.upsert(WORKER_METADATA, with_data(server.get(WORKER_METADATA, "worker-a"), endpoints=endpoints))
        assert_quiet(watch, QUIET)
        fresh = endpoint_spec(endpoint="fresh").to_instance(worker.instance_id)
        endpoints[fresh.id().to_path()] = fresh.to_dict()
        server.upsert(WORKER_METADATA, with_data(server.get(WORKER_METADATA, "worker-a"), endpoints=endpoints))
        assert watch.get(timeout=10) == ds.Added(fresh)
    assert set(reader.list(ds.Query.endpoints())) == {endpoint, fresh}
    assert reader.diagnose()["problems"] == []
    assert warnings_in(logs) == []
    (said,) = logs.matching(type_name)
    assert "endpoints" in said and "skipping" in said
