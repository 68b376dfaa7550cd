"""The etcd backend and records that register() refuses, put by another writer (issue 25, case 5):
nested deeper than 100 levels, they are skipped like values that do not parse."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import discovery_sync as ds
from discovery_sync.jsonsafe import MAX_DEPTH
from testrigs.helpers import assert_quiet, caught_logs, initial_state
from tests.unstorable import ORJSON_MAX_DEPTH, deep_model

TOO_DEEP = f"more than {MAX_DEPTH} levels deep"
DEPTHS = {0xA: MAX_DEPTH + 1, 0xB: ORJSON_MAX_DEPTH}  # instance id -> depth of its record


@pytest.fixture
def client(etcd_server, prefix) -> Iterator[ds.Discovery]:
    with ds.connect(f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?ttl=5") as client:
        yield client


def model_id(instance_id: int) -> ds.ModelCardInstanceId:
    return ds.ModelCardInstanceId("ns", "backend", "generate", instance_id)


def put(client: ds.Discovery, instance_id: int, depth: int) -> None:
    """A model record of that depth, as another writer puts it (no lease: it stays)."""
    client.gateway.put(client.keys.key(model_id(instance_id)), deep_model(depth, instance_id=instance_id))


def warned(warnings, instance_id: int) -> int:
    about = warnings.matching(f"ns/backend/generate/{instance_id:x}")
    assert all(TOO_DEEP in message for message in about), about
    return len(about)


def test_list_get_and_watch_skip_them_with_one_warning_per_read(client):
    put(client, 0xC, MAX_DEPTH)  # the deepest record register() stores
    for instance_id, depth in DEPTHS.items():
        put(client, instance_id, depth)
    with caught_logs("discovery_sync.backends.etcd") as warnings:
        assert [model.id() for model in client.list(ds.Query.models())] == [model_id(0xC)]
        assert [warned(warnings, instance_id) for instance_id in DEPTHS] == [1, 1]
        for instance_id in DEPTHS:
            assert client.get(model_id(instance_id)) is None
        assert [warned(warnings, instance_id) for instance_id in DEPTHS] == [2, 2]
        with client.list_and_watch(ds.Query.models()) as watch:
            _, resync = initial_state(watch)
            assert [model.id() for model in resync.instances] == [model_id(0xC)]
            put(client, 0xC, MAX_DEPTH + 1)  # the valid record replaced by one too deep
            assert warnings.count("ns/backend/generate/c", at_least=1) == 1
            assert_quiet(watch, 0.5)  # the watch keeps its last valid value, as for a value that does not parse
