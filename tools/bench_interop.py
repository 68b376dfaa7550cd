"""``discovery-sync bench --interop``: delivery latency between discovery-sync and reference
(ai-dynamo-runtime) workers on one store (a file store, and a local etcd), all three directions
measured in one run.

* ``rust_to_ours``: a reference worker registers its endpoint instance -> ``Added`` on our watch;
* ``rust_to_rust``: the same registration -> a second reference process's client lists it;
* ``ours_to_rust``: our ``register`` -> the reference client lists it.

Each sample is a fresh registration after an unregistration; latencies run from just before the
registering call to the moment the other side saw it, on CLOCK_MONOTONIC (shared by processes).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import discovery_sync as ds

from .reference import RustPeer

ENDPOINT = "bench.interop.generate"


def _until(watch: ds.Watch, kind: type) -> int:
    while True:
        event = watch.get(timeout=10)
        if isinstance(event, kind):
            return time.monotonic_ns()


def bench_interop(store: Path, events: int) -> dict[str, Any]:
    """Both stores, one after the other."""
    from .etcd_server import EtcdServer

    results = {"file": _bench_store("file", {"DYN_FILE_KV": str(store)}, f"file://{store}", events)}
    server = EtcdServer()
    server.start()
    try:
        env = {"ETCD_ENDPOINTS": server.url}
        results["etcd"] = _bench_store("etcd", env, f"etcd://127.0.0.1:{server.client_port}", events)
    finally:
        server.close()
    return results


def _bench_store(backend: str, env: dict[str, str], url: str, events: int) -> dict[str, Any]:
    from .bench import _summary

    isolate = backend == "file"  # etcd peers must reach the server on this host's loopback
    writer, observer = RustPeer(backend, env, isolate=isolate), RustPeer(backend, env, isolate=isolate)
    client = ds.connect(url)
    rust_to_ours: list[float] = []
    rust_to_rust: list[float] = []
    ours_to_rust: list[float] = []
    try:
        rust_id = writer.call("serve", endpoint=ENDPOINT)["instance_id"]
        observer.call("wait_ids", endpoint=ENDPOINT, present=[rust_id], timeout=10)
        query = ds.Query.endpoints(*ENDPOINT.split("."))
        with client.list_and_watch(query) as watch:
            _until(watch, ds.Resync)
            for _ in range(events):
                writer.call("unregister_instance", endpoint=ENDPOINT)
                _until(watch, ds.Removed)
                assert observer.call("wait_ids", endpoint=ENDPOINT, absent=[rust_id], timeout=10)["seen"]
                observer.send("wait_ids", endpoint=ENDPOINT, present=[rust_id], timeout=10)
                started = writer.call("register_instance", endpoint=ENDPOINT)["started_ns"]
                rust_to_ours.append((_until(watch, ds.Added) - started) / 1e6)
                seen = observer.receive("wait_ids")
                rust_to_rust.append((seen["at_ns"] - started) / 1e6)
        spec = ds.EndpointSpec("bench", "interop", "generate", ds.Transport.tcp("127.0.0.1:1/py"))
        for _ in range(events):
            observer.send("wait_ids", endpoint=ENDPOINT, present=[client.instance_id], timeout=10)
            # the observer must be polling before the write, but not for long: its polling loop delays
            # its own notification handling (2 ms of it added ~0.4 ms), as in the rust_to_rust timing
            time.sleep(0.0002)
            started = time.monotonic_ns()
            registered = client.register(spec)
            seen = observer.receive("wait_ids")
            ours_to_rust.append((seen["at_ns"] - started) / 1e6)
            client.unregister(registered)
            observer.call("wait_ids", endpoint=ENDPOINT, absent=[client.instance_id], timeout=10)
    finally:
        client.shutdown()
        writer.kill()
        observer.kill()
    return {
        "rust_to_ours": _summary(rust_to_ours),
        "rust_to_rust": _summary(rust_to_rust),
        "ours_to_rust": _summary(ours_to_rust),
    }
