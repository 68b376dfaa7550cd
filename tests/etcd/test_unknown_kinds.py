"""The etcd backend beside kinds of records this version does not know (issue 38, point 11).

Newer runtimes add record kinds: Velo peers under a key prefix of their own (``velo-peers/…``,
upstream's KV peer discovery bucket, or ``v1/velo_peers/…`` beside ours), or as a record type of
their own. Keys under an unknown prefix are never read nor deleted; a value of an unknown type
under one of our prefixes is skipped like an unreadable one but not warned about: the first of
its type is said once, at INFO, however often it is read. The valid records are served all along."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator

import pytest

import discovery_sync as ds
from testrigs.helpers import LogCatcher, assert_quiet, endpoint_spec, initial_state
from tests.unknown_kinds import backend_logs, velo_record

LOGGER = "discovery_sync.backends.etcd"


@pytest.fixture
def url(etcd_server, prefix) -> str:
    return f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?ttl=5"


@pytest.fixture
def logs() -> Iterator[LogCatcher]:
    """Every line of the etcd backend at INFO and above."""
    with backend_logs(LOGGER) as catcher:
        yield catcher


def unknown_keys(client: ds.Discovery, type_name: str) -> dict[bytes, bytes]:
    """Keys under prefixes of unknown kinds, beside ours, as another writer puts them (no lease)."""
    root = client.keys.root
    return {
        f"{root}velo-peers/by-instance/5f1c39a6-0d4e-4d8e-9a55-6c1f7d7c2b10".encode(): b'{"instance_id":"5f1c"}',
        f"{root}velo-peers/by-worker/42".encode(): b"5f1c39a6-0d4e-4d8e-9a55-6c1f7d7c2b10",
        f"{root}v1/velo_peers/ns/backend/9".encode(): velo_record(type_name, 9),
        f"{root}v1/instances_v2/ns/backend/generate/9".encode(): b"not even JSON",
    }


def warnings_in(logs: LogCatcher) -> list[str]:
    return [m for m, at in zip(logs.messages, logs.levels, strict=True) if at >= logging.WARNING]


def test_unknown_prefixes_and_types_are_skipped_quietly_and_left_in_place(url, logs):
    type_name = f"VeloPeer{secrets.token_hex(4)}"
    with ds.connect(url) as client:
        planted = unknown_keys(client, type_name)
        for key, value in planted.items():
            client.gateway.put(key, value)
        unknown_typed = f"{client.keys.root}v1/instances/ns/backend/velo/7".encode()
        client.gateway.put(unknown_typed, velo_record(type_name, 7))
        valid = client.register(endpoint_spec())
        assert client.list(ds.Query.endpoints()) == [valid]
        assert client.list(ds.Query.endpoints()) == [valid]
        assert client.list(ds.Query.models()) == []
        with client.list_and_watch(ds.Query.endpoints()) as watch, client.list_and_watch(ds.Query.models()) as models:
            added, resync = initial_state(watch)
            assert added == [ds.Added(valid)] and resync.instances == (valid,)
            assert initial_state(models) == ([], ds.Resync(()))
            client.gateway.put(f"{client.keys.root}v1/instances/ns/backend/velo/8".encode(), velo_record(type_name, 8))
            client.gateway.put(unknown_typed, velo_record(type_name, 7) + b" ")  # changed, still unknown
            client.gateway.delete(unknown_typed)
            later = client.register(endpoint_spec("ns2", port=9001))
            assert watch.get(timeout=5) == ds.Added(later)
            assert_quiet(watch, 0.5)
        assert sorted(client.list(ds.Query.endpoints()), key=str) == sorted([valid, later], key=str)
        assert client.diagnose()["problems"] == []
        assert client.status()["records"] == 2
    with ds.connect(url) as reader:  # shutdown() deleted what was ours, and nothing else
        assert reader.list(ds.Query.endpoints()) == []
        for key, value in planted.items():
            (kv,), _ = reader.gateway.range(key)
            assert kv.value == value
    assert warnings_in(logs) == []
    (said,) = logs.matching(type_name)
    assert "v1/instances" in said and "skipping" in said


def test_a_record_replaced_by_one_of_an_unknown_type_keeps_its_last_value(url, logs):
    """As for a value that does not parse (and as the reference's resync keeps it)."""
    type_name = f"VeloPeer{secrets.token_hex(4)}"
    with ds.connect(url) as client:
        valid = client.register(endpoint_spec())
        watch = client.list_and_watch(ds.Query.endpoints())
        assert initial_state(watch)[1].instances == (valid,)
        client.gateway.put(client.keys.key(valid.id()), velo_record(type_name, valid.instance_id))
        assert logs.wait_for(type_name)
        assert_quiet(watch, 0.5)
        assert client.list(ds.Query.endpoints()) == []  # a fresh read finds no record there
        watch.close()
    assert warnings_in(logs) == []
