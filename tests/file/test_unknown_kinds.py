"""The file store beside kinds of records this version does not know (issue 38, point 11).

Newer runtimes add record kinds: Velo peers, in a bucket of their own (``velo-peers`` at the store
root as upstream's KV peer discovery names it, or ``v1/velo_peers`` beside ours), or as a record
type of their own. An unknown bucket is never read, swept or warned about; a record of an unknown
type in one of our buckets is skipped like an unreadable one but not warned about: the first of
its type is said once, at INFO. The valid records around them are served all along."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.helpers import LogCatcher, assert_quiet, endpoint_spec, initial_state
from tests.unknown_kinds import backend_logs, velo_record, velo_type

TTL = 1.0  # the shortest TTL: collect_garbage() and dead records come quickly
RESCAN = 0.1
LONG_AGO = 1_000_000_000  # an mtime every reader judges dead


def plant_unknown_buckets(store: Path) -> list[Path]:
    """Unknown buckets beside ours, full of files that look dead (and a leftover, and a directory):
    every path planted, for the test to check that they all stay."""
    planted = []
    for bucket in (store / "velo-peers", store / "v1" / "velo_peers"):
        (bucket / "nested").mkdir(parents=True)
        for name, data in (
            ("by-instance%2F5f1c39a6-0d4e-4d8e-9a55-6c1f7d7c2b10", b'{"instance_id":"5f1c39a6"}'),
            ("by-worker%2F42", b"5f1c39a6-0d4e-4d8e-9a55-6c1f7d7c2b10"),
            ("ns%2Fbackend%2Fgenerate%2F9", velo_record("VeloPeer", 9)),
            (".tmp_0123456789abcdef", b""),
            ("nested/inner", b"x"),
        ):
            path = bucket / name
            path.write_bytes(data)
            os.utime(path, (LONG_AGO, LONG_AGO))
            planted.append(path)
        planted.append(bucket / "nested")
    return planted


@pytest.fixture
def logs() -> Iterator[LogCatcher]:
    """Every line of the file backend at INFO and above."""
    with backend_logs("discovery_sync.backends.file") as catcher:
        yield catcher


def warnings_in(logs: LogCatcher, level: int = logging.WARNING) -> list[str]:
    return [m for m, at in zip(logs.messages, logs.levels, strict=True) if at >= level]


def test_unknown_buckets_are_left_alone_by_lists_watches_rescans_sweeps_and_doctor(store, logs):
    with ds.connect(f"file://{store}?ttl={TTL}&rescan_interval={RESCAN}") as client:
        planted = plant_unknown_buckets(store)
        first = client.register(endpoint_spec(port=9000))
        assert client.list(ds.Query.endpoints()) == [first]
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            added, resync = initial_state(watch)
            assert added == [ds.Added(first)] and resync.instances == (first,)
            second = client.register(endpoint_spec("ns2", port=9001))
            assert watch.get(timeout=5) == ds.Added(second)
            client.rescan()
            assert client.collect_garbage() == []  # waits out the TTL: the planted files look long dead
            client.rescan()
            assert_quiet(watch, 3 * RESCAN)
        assert sorted(client.list(ds.Query.endpoints()), key=str) == sorted([first, second], key=str)
        report = client.diagnose()
        assert report["problems"] == [] and set(report["buckets"]) == {k.bucket for k in ds.RecordKind}
        assert client.status()["records"] == 2
    assert all(path.exists() for path in planted), [p for p in planted if not p.exists()]
    assert not [m for m in logs.messages if "velo" in m.lower() or "nested" in m]


def test_a_record_of_an_unknown_type_is_skipped_and_said_once(store, logs):
    type_name = velo_type()
    with ds.connect(f"file://{store}?ttl=30&rescan_interval={RESCAN}") as client:
        bucket = store / "v1" / "instances"
        valid = client.register(endpoint_spec())
        (bucket / "ns%2Fbackend%2Fvelo%2F7").write_bytes(velo_record(type_name, 7))
        (bucket / "ns%2Fbackend%2Fvelo%2F8").write_bytes(velo_record(type_name, 8))
        assert client.list(ds.Query.endpoints()) == [valid]
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            added, resync = initial_state(watch)
            assert added == [ds.Added(valid)] and resync.instances == (valid,)
            (bucket / "ns%2Fbackend%2Fvelo%2F9").write_bytes(velo_record(type_name, 9))  # a later one
            later = client.register(endpoint_spec("ns2", port=9001))
            assert watch.get(timeout=5) == ds.Added(later)
            for _ in range(3):
                client.rescan()
            assert_quiet(watch, 3 * RESCAN)
        assert sorted(client.list(ds.Query.endpoints()), key=str) == sorted([valid, later], key=str)
        report = client.diagnose()
        assert report["problems"] == []
        assert report["buckets"]["v1/instances"]["unknown_type"] == 3
        assert report["buckets"]["v1/instances"]["unreadable"] == 0
    assert warnings_in(logs) == []
    (said,) = logs.matching(type_name)
    assert "v1/instances" in said and "skipping" in said


def test_a_dead_record_of_an_unknown_type_is_swept_as_the_reference_sweeps_it(store, logs):
    """In our buckets every file lives by its heartbeat, whatever it holds (the reference removes
    any file of a bucket whose mtime stood still for its TTL): a live one stays, a dead one goes."""
    type_name = velo_type()
    with ds.connect(f"file://{store}?ttl={TTL}&rescan_interval={RESCAN}&uniform_ttl=true") as client:
        bucket = store / "v1" / "instances"
        valid = client.register(endpoint_spec())
        dead, live = bucket / "ns%2Fbackend%2Fvelo%2F7", bucket / "ns%2Fbackend%2Fvelo%2F8"
        dead.write_bytes(velo_record(type_name, 7))
        live.write_bytes(velo_record(type_name, 8))
        os.utime(dead, (LONG_AGO, LONG_AGO))
        deadline = time.monotonic() + 10 * TTL
        while dead.exists() and time.monotonic() < deadline:  # the rescans sweep what they judge dead
            os.utime(live)  # its writer's heartbeat
            time.sleep(RESCAN)
        assert not dead.exists()
        assert live.exists() and client.list(ds.Query.endpoints()) == [valid]
    assert warnings_in(logs) == []


def test_a_one_shot_reader_skips_them_as_quietly(store, logs):
    type_name = velo_type()
    with ds.connect(f"file://{store}") as writer:
        valid = writer.register(endpoint_spec())
        plant_unknown_buckets(store)
        (store / "v1" / "instances" / "ns%2Fbackend%2Fvelo%2F7").write_bytes(velo_record(type_name))
        with ds.connect(f"file://{store}?rescan_interval=3600&read_only=true") as reader:
            assert reader.list(ds.Query.endpoints()) == [valid]
            assert reader.list(ds.Query.endpoints()) == [valid]
            assert reader.diagnose()["problems"] == []
    assert warnings_in(logs) == []
    assert len(logs.matching(type_name)) == 1
