"""``discovery-sync bench``: the file backend's numbers, printed as one JSON object.

* ``delivery``: register in one process -> ``Added`` in a watcher in another, p50/p99 (ms);
* ``register_per_second``: sequential registrations by one client;
* ``list``: ``list()`` of N records by a fresh client (cold: reads every file) and again (warm);
* ``rescan``: a full rescan of N files, cold and warm;
* ``initial_sync``: ``list_and_watch`` until its Resync, for growing N (it must grow linearly).

It needs the library only. The benchmarks that need the test suite's rigs (a local etcd, reference-runtime
workers, the fake Kubernetes API server, the sshfs mounts) are ``python -m benchmarks.<name>`` of a
repository checkout; they reuse :func:`delivery_latencies` and :mod:`.stats`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import discovery_sync as ds

from .stats import median_timed, summary, timed


def delivery_latencies(
    writer_url: str,
    watcher_url: str,
    events: int,
    interval: float = 0.002,
    *,
    churn: bool = False,
    event_timeout: float = 30.0,
) -> list[float]:
    """Milliseconds from a writer process's ``register`` to the first ``Added`` of each endpoint on a
    watcher here (see bench_writer; ``churn`` unregisters each endpoint right after registering it)."""
    command = [sys.executable, "-m", "discovery_sync.tools.bench_writer", writer_url, str(events), str(interval)]
    writer = subprocess.Popen(
        [*command, *(["churn"] if churn else [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    latencies: dict[str, float] = {}
    assert writer.stdin is not None and writer.stdout is not None  # both are pipes
    try:
        assert writer.stdout.readline().strip() == "ready"
        with ds.connect(watcher_url) as watcher, watcher.list_and_watch(ds.Query.endpoints("bench", "writer")) as watch:
            assert watch.get(timeout=60) == ds.Resync(())
            writer.stdin.write("go\n")
            writer.stdin.flush()
            while len(latencies) < events:
                event = watch.get(timeout=event_timeout)
                now = time.monotonic_ns()
                if isinstance(event, ds.Added) and isinstance(event.instance, ds.Endpoint):
                    endpoint = event.instance
                    if endpoint.endpoint not in latencies:
                        stamp = int(endpoint.transport.value.rsplit("/", 1)[1])
                        latencies[endpoint.endpoint] = (now - stamp) / 1e6
        writer.stdin.write("done\n")
        writer.stdin.flush()
        writer.wait(60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(10)
    return list(latencies.values())


def bench_delivery(url: str, events: int, interval: float = 0.002) -> dict[str, Any]:
    return summary(delivery_latencies(url, url, events, interval))


def _populate(url: str, records: int) -> tuple[ds.Discovery, float]:
    client = ds.connect(url)
    start = time.perf_counter()
    for i in range(records):
        client.register(ds.EndpointSpec("bench", "list", f"e{i}", ds.Transport.tcp(f"127.0.0.1:{i % 65536}")))
    return client, records / (time.perf_counter() - start)


def bench_store(url: str, records: int) -> dict[str, Any]:
    owner, rate = _populate(url, records)
    try:
        query = ds.Query.endpoints()
        with ds.connect(url) as reader:
            cold = timed(partial(reader.list, query))
            assert len(reader.list(query)) == records
            warm = median_timed(partial(reader.list, query))
        with ds.connect(url) as scanner:
            rescan: Callable[[], None] = scanner.rescan  # type: ignore[attr-defined]  # a FileDiscovery's
            cold_rescan = timed(rescan)
            warm_rescan = median_timed(rescan)
        return {
            "records": records,
            "register_per_second": round(rate),
            "list_cold_ms": round(cold, 2),
            "list_warm_ms": round(warm, 2),
            "rescan_cold_ms": round(cold_rescan, 2),
            "rescan_warm_ms": round(warm_rescan, 2),
        }
    finally:
        owner.shutdown()


def bench_initial_sync(base: Path, sizes: list[int]) -> list[dict[str, Any]]:
    results = []
    for size in sizes:
        url = f"file://{base / f'sync-{size}'}"
        owner, _ = _populate(url, size)
        try:
            with ds.connect(url) as reader:
                start = time.perf_counter()
                with reader.list_and_watch(ds.Query.endpoints()) as watch:
                    while not isinstance(watch.get(timeout=60), ds.Resync):
                        pass
                elapsed = (time.perf_counter() - start) * 1000
            results.append({"records": size, "ms": round(elapsed, 2), "us_per_record": round(elapsed * 1000 / size, 2)})
        finally:
            owner.shutdown()
    return results


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="discovery-sync-bench-", dir=args.dir) as scratch:
        base = Path(scratch)
        return {
            "backend": "file",
            "store_dir": str(base),
            "delivery": bench_delivery(f"file://{base / 'delivery'}", args.events),
            "store": bench_store(f"file://{base / 'store'}", args.records),
            "initial_sync": bench_initial_sync(base, [int(size) for size in args.sizes.split(",")]),
        }
