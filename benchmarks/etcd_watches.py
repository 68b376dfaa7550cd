"""What many watches on one etcd client cost, printed as one JSON object: threads, sockets to etcd and
register -> Added delivery latency with 1, 200 and 1,000 watches on one client.

    .venv/bin/python -m benchmarks.etcd_watches [--watches 1,200,1000] [--url etcd://HOST:PORT/PREFIX]

For each count N, one client opens N watches, each on one endpoint (a router watching N endpoints:
``endpoints(bench, router, epI)``), and the numbers are taken with nothing else running:

- ``watch_threads``: this process's threads named ``discovery-sync-etcd-watch*``; ``threads``: all of them;
- ``sockets``: this process's established TCP connections to the etcd port, less those open before the
  watching client connected (the writer's);
- ``distinct``: another client registers one endpoint a watch matches (up to 100 watches, spread over
  the N), one at a time: milliseconds from calling ``register`` to the Added on that watch;
- ``fanout``: the N watches are replaced by N watches on one component, and another client registers 5
  endpoints of it: milliseconds from calling ``register`` to the Added on each of the N watches.

A consumer thread per watch (started after the counts are taken) takes the events. Run from the
repository root: without ``--url`` it starts a local etcd with the test suite's rig.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from typing import Any

import orjson
from discovery_sync.tools.stats import summary

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer

WAIT = 30.0


def etcd_sockets(port: int) -> int:
    """This process's established TCP connections to ``port`` (read from /proc, IPv4 and IPv6)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                    if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                        count += 1
        except FileNotFoundError:
            continue
    return count


def watch_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("discovery-sync-etcd-watch"))


def _spec(component: str, endpoint: str) -> ds.EndpointSpec:
    return ds.EndpointSpec("bench", component, endpoint, ds.Transport.tcp("127.0.0.1:1"))


class _Consumers:
    """A thread per watch recording when each Added arrived: endpoint name -> monotonic ns, per watch."""

    def __init__(self, watches: list[ds.Watch]) -> None:
        self.arrivals: list[dict[str, int]] = [{} for _ in watches]
        self._threads = [
            threading.Thread(target=self._consume, args=(w, self.arrivals[i]), name=f"bench-consumer-{i}", daemon=True)
            for i, w in enumerate(watches)
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _consume(watch: ds.Watch, arrivals: dict[str, int]) -> None:
        for event in watch:
            if isinstance(event, ds.Added):
                arrivals[event.instance.endpoint] = time.monotonic_ns()

    def wait(self, index: int, name: str) -> int:
        deadline = time.monotonic() + WAIT
        while name not in self.arrivals[index]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"watch {index} got no Added for {name}")
            time.sleep(0.0005)
        return self.arrivals[index][name]

    def join(self) -> None:
        for thread in self._threads:
            thread.join(WAIT)


def _open(client: ds.Discovery, queries: list[ds.Query]) -> tuple[list[ds.Watch], float]:
    start = time.perf_counter()
    watches = [client.list_and_watch(q) for q in queries]
    elapsed = (time.perf_counter() - start) * 1000
    for watch in watches:
        while not isinstance(watch.get(timeout=WAIT), ds.Resync):
            pass
    return watches, elapsed


def bench_count(url: str, port: int, count: int, writer: ds.Discovery) -> dict[str, Any]:
    before = etcd_sockets(port)
    threads_before = threading.active_count()
    client = ds.connect(url)
    run = uuid.uuid4().hex[:8]
    try:
        watches, open_ms = _open(client, [ds.Query.endpoints("bench", f"router-{run}", f"ep{i}") for i in range(count)])
        time.sleep(0.3)  # every stream is created on the server
        result: dict[str, Any] = {
            "watches": count,
            "open_ms": round(open_ms, 1),
            "watch_threads": watch_threads(),
            "threads": threading.active_count() - threads_before,
            "sockets": etcd_sockets(port) - before,
        }
        consumers = _Consumers(watches)
        latencies = []
        step = max(1, count // 100)
        for index in range(0, count, step):
            stamp = time.monotonic_ns()
            writer.register(_spec(f"router-{run}", f"ep{index}"))
            latencies.append((consumers.wait(index, f"ep{index}") - stamp) / 1e6)
        result["distinct"] = summary(latencies)
        for watch in watches:
            watch.close()
        consumers.join()

        watches, open_ms = _open(client, [ds.Query.endpoints("bench", f"fan-{run}") for _ in range(count)])
        consumers = _Consumers(watches)
        latencies = []
        for n in range(5):
            stamp = time.monotonic_ns()
            writer.register(_spec(f"fan-{run}", f"f{n}"))
            latencies.extend((consumers.wait(i, f"f{n}") - stamp) / 1e6 for i in range(count))
        result["fanout"] = {"open_ms": round(open_ms, 1), **summary(latencies)}
        for watch in watches:
            watch.close()
        consumers.join()
    finally:
        client.shutdown()
    return result


def bench_watches(url: str | None, counts: list[int]) -> dict[str, Any]:
    server = None
    if url is None:
        server = EtcdServer()
        server.start()
        url = f"etcd://127.0.0.1:{server.client_port}/bench-{uuid.uuid4().hex}"
    port = int(url.split("://", 1)[1].split("/", 1)[0].split(",")[0].rsplit(":", 1)[1])
    writer = ds.connect(url)
    try:
        writer.register(_spec("warm-up", "w"))  # the writer's lease and connections exist before counting
        return {"store": "etcd", "runs": [bench_count(url, port, n, writer) for n in counts]}
    finally:
        writer.shutdown()
        if server is not None:
            server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--watches", default="1,200,1000", help="comma-separated watch counts")
    parser.add_argument("--url", help="an etcd:// URL to measure (default: a local etcd of the test rig)")
    args = parser.parse_args(argv)
    result = bench_watches(args.url, [int(n) for n in args.watches.split(",")])
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
