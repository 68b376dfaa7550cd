"""The file backend across real processes: kill -9, concurrent writers."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import orjson

import discovery_sync as ds
from testrigs.file_peer import Peer
from testrigs.helpers import initial_state

TTL = 2.0
RESCAN = 0.25


def url(store, **extra) -> str:
    options = {"ttl": TTL, "rescan_interval": RESCAN, "uniform_ttl": "true", **extra}
    return f"file://{store}?" + "&".join(f"{k}={v}" for k, v in options.items())


def test_killed_process_records_disappear_within_ttl_plus_a_rescan(store, peers):
    watcher = ds.connect(url(store))
    try:
        peer = Peer(url(store), 3)
        peers.append(peer)
        with watcher.list_and_watch(ds.Query.endpoints("ns", "peer")) as watch:
            _, resync = initial_state(watch)
            assert {i.instance_id for i in resync.instances} == {peer.info["instance_id"]}
            assert len(resync.instances) == 3
            peer.kill()
            killed_at = time.monotonic()
            removed = {watch.get(timeout=TTL + 10 * RESCAN + 5).id for _ in range(3)}
            elapsed = time.monotonic() - killed_at
        assert {r.to_path() for r in removed} == set(peer.info["paths"])
        # dead = no mtime change for TTL on the watcher's clock, deleted at the next rescan
        assert elapsed < TTL + TTL / 3 + 2 * RESCAN + 1.0
        assert watcher.list(ds.Query.endpoints()) == []
        assert os.listdir(store / "v1" / "instances") == []
    finally:
        watcher.shutdown()


def test_a_live_process_is_never_swept(store, peers):
    watcher = ds.connect(url(store))
    try:
        peer = Peer(url(store), 1)
        peers.append(peer)
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            deadline = time.monotonic() + 3 * TTL
            while time.monotonic() < deadline:  # waits on the watch, not a sleep
                try:
                    event = watch.get(timeout=deadline - time.monotonic())
                except ds.WatchTimeout:
                    break
                raise AssertionError(f"a live peer's record changed: {event!r}")
        assert [e.instance_id for e in watcher.list(ds.Query.endpoints())] == [peer.info["instance_id"]]
        assert peer.stop() == 0
        assert watcher.list(ds.Query.endpoints()) == []  # clean shutdown removed it at once
    finally:
        watcher.shutdown()


def test_sixteen_concurrent_processes_lose_nothing_and_tear_no_file(store, peers):
    count = 25
    with ThreadPoolExecutor(16) as pool:
        started = list(pool.map(lambda i: Peer(url(store), count, "--name-prefix", f"p{i}-"), range(16)))
    peers.extend(started)
    reader = ds.connect(url(store))
    try:
        expected = {(p.info["instance_id"], path) for p in started for path in p.info["paths"]}
        listed = {(e.instance_id, e.id().to_path()) for e in reader.list(ds.Query.endpoints())}
        assert listed == expected
        assert len(expected) == 16 * count
        bucket = store / "v1" / "instances"
        names = os.listdir(bucket)
        assert len(names) == 16 * count  # no temp files left behind either
        for name in names:
            ds.instance_from_json((bucket / name).read_bytes())  # every file parses
    finally:
        reader.shutdown()
    for peer in started:
        assert peer.stop() == 0
    assert os.listdir(store / "v1" / "instances") == []


def test_a_peer_sees_this_clients_records_in_the_reference_format(store, peers):
    client = ds.connect(url(store))
    try:
        endpoint = client.register(ds.EndpointSpec("pyns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1")))
        name = f"pyns%2Fbackend%2Fgenerate%2F{client.instance_id:x}"
        raw = (store / "v1" / "instances" / name).read_bytes()
        assert orjson.loads(raw) == {
            "type": "Endpoint",
            "component": "backend",
            "endpoint": "generate",
            "namespace": "pyns",
            "instance_id": client.instance_id,
            "transport": {"tcp": "127.0.0.1:1"},
        }
        assert raw == ds.instance_to_json(endpoint)
    finally:
        client.shutdown()
