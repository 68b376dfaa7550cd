"""The file store and records that register() refuses, written into it by hand (issue 25, case 5):
nested deeper than 100 levels, they are skipped like unreadable files, with one warning each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import discovery_sync as ds
from discovery_sync.jsonsafe import MAX_DEPTH
from testrigs.helpers import assert_quiet, initial_state, model_spec
from tests.unstorable import ORJSON_MAX_DEPTH, deep_model, model_file_name

TTL = 30.0  # no hand-written record dies during a test
RESCAN = 0.2
TOO_DEEP = f"more than {MAX_DEPTH} levels deep"
DEPTHS = {0xA: MAX_DEPTH + 1, 0xB: ORJSON_MAX_DEPTH}  # instance id -> depth of its record


@pytest.fixture
def client(store: Path) -> Iterator[ds.Discovery]:
    client = ds.connect(f"file://{store}?ttl={TTL}&rescan_interval={RESCAN}")
    try:
        yield client
    finally:
        client.shutdown()


def write_deep(store: Path, instance_id: int, depth: int) -> Path:
    path = store / "v1" / "mdc" / model_file_name(instance_id=instance_id)
    path.write_bytes(deep_model(depth, instance_id=instance_id))
    return path


def deep_id(instance_id: int) -> ds.ModelCardInstanceId:
    return ds.ModelCardInstanceId("ns", "backend", "generate", instance_id)


def test_list_and_watch_skip_them_with_one_warning_each(store, client, warnings):
    valid = client.register(model_spec())
    for instance_id, depth in DEPTHS.items():
        write_deep(store, instance_id, depth)
    assert client.list(ds.Query.models()) == [valid]
    with client.list_and_watch(ds.Query.models()) as watch:
        added, resync = initial_state(watch)
        assert added == [ds.Added(valid)] and list(resync.instances) == [valid]
        for instance_id in DEPTHS:
            (warning,) = warnings.wait_for(model_file_name(instance_id=instance_id))
            assert TOO_DEEP in warning and "register() refuses" in warning
        client.rescan()
        client.rescan()
        assert_quiet(watch, 3 * RESCAN)
    for instance_id in DEPTHS:  # one warning per file and version, however often it is scanned
        assert len(warnings.matching(model_file_name(instance_id=instance_id))) == 1


def test_get_treats_them_as_absent_like_an_unreadable_record(store, client, warnings):
    for instance_id, depth in DEPTHS.items():
        write_deep(store, instance_id, depth)
        assert client.get(deep_id(instance_id)) is None
        (warning,) = warnings.matching(f"stored record {deep_id(instance_id).to_path()} is unusable")
        assert TOO_DEEP in warning


def test_a_record_replaced_by_one_too_deep_keeps_its_last_valid_value(store, client, warnings):
    path = store / "v1" / "mdc" / model_file_name(instance_id=0xC)
    path.write_bytes(deep_model(MAX_DEPTH, instance_id=0xC))  # the deepest record register() stores
    (valid,) = client.list(ds.Query.models())
    assert valid.id() == deep_id(0xC)
    with client.list_and_watch(ds.Query.models()) as watch:
        initial_state(watch)
        write_deep(store, 0xC, MAX_DEPTH + 1)
        (warning,) = warnings.wait_for(path.name)
        assert TOO_DEEP in warning
        assert_quiet(watch, 3 * RESCAN)  # no event: the last valid value stays, as for a torn write
        assert client.list(ds.Query.models()) == [valid]


def test_a_one_shot_list_says_what_it_skipped_once(store, warnings):
    ds.connect(f"file://{store}").shutdown()  # a writer lays the store out
    for instance_id, depth in DEPTHS.items():
        write_deep(store, instance_id, depth)
    # no rescan runs during this client's life: list() itself warns, as `discovery-sync list` needs
    with ds.connect(f"file://{store}?ttl={TTL}&rescan_interval=3600&read_only=true") as reader:
        assert reader.list(ds.Query.models()) == []
        assert reader.list(ds.Query.models()) == []
    for instance_id in DEPTHS:
        (warning,) = warnings.matching(model_file_name(instance_id=instance_id))
        assert TOO_DEEP in warning
