"""What a live view and an endpoint lease cost over the raw API they are built on, as JSON.

    .venv/bin/python -m benchmarks.live_view [--records 10000] [--changes 200] [--backend file|memory]

Run from the repository root. The reference runtime's helpers of the same name run in Rust
tasks and its Python bindings do not expose them, so the bar is the raw API on the same store:

* ``delivery``: ``--changes`` endpoints registered one after another by another client; for each,
  the time from ``register()`` returning until a live view shows it (``wait_for``), and until a
  raw watch yields its ``Added`` (both open at once, so they see the same store); p50/p99 in ms
  and the view/watch ratio.
* ``initial``: a new live view over ``--records`` records (the constructor returns with the map
  complete) against ``list_and_watch()`` taken to its first ``Resync``; seconds and ratio.
* ``reads``: ``get()`` and ``len()`` in µs, and ``snapshot()`` right after a change (one copy of
  the map) and again without a change (cached), in µs, with ``--records`` entries.
* ``lease``: ``lease_endpoint()`` + ``release()`` against ``register()`` + ``unregister()``, µs.
* ``fanout``: ``--views`` live views on one client, then as many raw watches on another (each
  drained by a thread of the benchmark's, as an application would): the threads each set adds to
  the process, and for each of ``--fanout-changes`` registrations the time until every view
  shows it, and until every watch has yielded it; p50/p99 in ms and the views/watches ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from discovery_sync.tools.stats import percentile

import discovery_sync as ds

TTL = 3600  # nothing dies during a measurement


def endpoint(name: str, port: int = 9000) -> ds.EndpointSpec:
    return ds.EndpointSpec("bench", "backend", name, ds.Transport.tcp(f"127.0.0.1:{port}"))


def micros(call: Callable[[], object], repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        call()
    return round((time.perf_counter() - started) / repeat * 1e6, 2)


def delivery(connect: Callable[[], ds.Discovery], changes: int) -> dict[str, Any]:
    writer, reader = connect(), connect()
    try:
        query = ds.Query.endpoints("bench", "backend")
        with reader.live_view(query, key=lambda record: record.id()) as view:

            def in_view(added: ds.DiscoveryInstance) -> None:
                view.wait_for(lambda records: added.id() in records, timeout=10)

            to_view = timed_deliveries(writer, "view", changes, in_view)
        with reader.list_and_watch(query) as watch:
            while not isinstance(watch.get(timeout=10), ds.Resync):
                pass

            def in_watch(added: ds.DiscoveryInstance) -> None:
                while not isinstance(event := watch.get(timeout=10), ds.Added) or event.instance.id() != added.id():
                    pass

            to_watch = timed_deliveries(writer, "watch", changes, in_watch)
        view_p50, watch_p50 = statistics.median(to_view), statistics.median(to_watch)
        return {
            "changes": changes,
            "view_ms": {"p50": round(view_p50 * 1e3, 3), "p99": round(percentile(to_view, 0.99) * 1e3, 3)},
            "watch_ms": {"p50": round(watch_p50 * 1e3, 3), "p99": round(percentile(to_watch, 0.99) * 1e3, 3)},
            "view_over_watch_p50": round(view_p50 / watch_p50, 2),
        }
    finally:
        writer.shutdown()
        reader.shutdown()


def timed_deliveries(
    writer: ds.Discovery,
    name: str,
    changes: int,
    seen: Callable[[ds.DiscoveryInstance], None],
    *,
    component: str = "backend",
) -> list[float]:
    """Seconds from each ``register()`` returning until ``seen`` returns for it."""
    samples = []
    for index in range(changes):
        spec = endpoint(f"{name}-{index}")
        added = writer.register(ds.EndpointSpec(spec.namespace, component, spec.endpoint, spec.transport))
        registered = time.perf_counter()
        seen(added)
        samples.append(time.perf_counter() - registered)
    return samples


def initial_and_reads(connect: Callable[[], ds.Discovery], records: int) -> dict[str, Any]:
    writer, reader = connect(), connect()
    try:
        for index in range(records):
            writer.register(endpoint(f"initial-{index}"))
        query = ds.Query.endpoints("bench", "backend")
        started = time.perf_counter()
        with reader.list_and_watch(query) as watch:
            while not isinstance(watch.get(timeout=60), ds.Resync):
                pass
        raw = time.perf_counter() - started
        started = time.perf_counter()
        view = reader.live_view(query, key=lambda record: record.id())
        built = time.perf_counter() - started
        with view:
            some_key = next(iter(view.snapshot()))
            reads = {
                "entries": len(view),
                "get_us": micros(lambda: view.get(some_key), 10_000),
                "len_us": micros(lambda: len(view), 10_000),
                "snapshot_cached_us": micros(view.snapshot, 10_000),
            }
            version = view.version
            writer.register(endpoint("one-more"))
            view.wait_changed(version, timeout=10)
            started = time.perf_counter()
            view.snapshot()
            reads["snapshot_after_change_us"] = round((time.perf_counter() - started) * 1e6, 1)
        return {
            "initial": {
                "records": records,
                "live_view_s": round(built, 4),
                "list_and_watch_s": round(raw, 4),
                "ratio": round(built / raw, 2),
            },
            "reads": reads,
        }
    finally:
        writer.shutdown()
        reader.shutdown()


def fanout(connect: Callable[[], ds.Discovery], views: int, changes: int) -> dict[str, Any]:
    writer, viewer, watcher = connect(), connect(), connect()
    query = ds.Query.endpoints("bench", "fanout")
    try:
        before = threading.active_count()
        opened = [viewer.live_view(query, key=lambda record: record.id()) for _ in range(views)]
        view_threads = threading.active_count() - before

        def in_views(added: ds.DiscoveryInstance) -> None:
            for view in opened:
                view.wait_for(lambda records: added.id() in records, timeout=30)

        to_views = timed_deliveries(writer, "fanout-view", changes, in_views, component="fanout")
        for view in opened:
            view.close()
        before = threading.active_count()
        yielded = threading.Semaphore(0)
        watches = [watcher.list_and_watch(query) for _ in range(views)]
        drains = [threading.Thread(target=_drain, args=(watch, yielded), daemon=True) for watch in watches]
        for drain in drains:
            drain.start()
        watch_threads = threading.active_count() - before

        def in_watches(added: ds.DiscoveryInstance) -> None:
            for _ in range(views):
                yielded.acquire(timeout=30)

        to_watches = timed_deliveries(writer, "fanout-watch", changes, in_watches, component="fanout")
        for watch in watches:
            watch.close()
        views_p50, watches_p50 = statistics.median(to_views), statistics.median(to_watches)
        return {
            "views": views,
            "changes": changes,
            "threads_added": {"views": view_threads, "watches_and_their_consumers": watch_threads},
            "views_ms": {"p50": round(views_p50 * 1e3, 3), "p99": round(percentile(to_views, 0.99) * 1e3, 3)},
            "watches_ms": {"p50": round(watches_p50 * 1e3, 3), "p99": round(percentile(to_watches, 0.99) * 1e3, 3)},
            "views_over_watches_p50": round(views_p50 / watches_p50, 2),
        }
    finally:
        for client in (writer, viewer, watcher):
            client.shutdown()


def _drain(watch: ds.Watch, yielded: threading.Semaphore) -> None:
    """An application's consumer of one watch: each Added after the first Resync is counted."""
    synced = False
    try:
        for event in watch:
            if isinstance(event, ds.Resync):
                synced = True
            elif synced and isinstance(event, ds.Added):
                yielded.release()
    except ds.WatchClosed:
        return


def lease(connect: Callable[[], ds.Discovery], repeat: int) -> dict[str, Any]:
    client = connect()
    try:
        spec = endpoint("lease")

        def lease_cycle() -> None:
            client.lease_endpoint(spec).release()

        def register_cycle() -> None:
            client.unregister(client.register(spec))

        leased, registered = micros(lease_cycle, repeat), micros(register_cycle, repeat)
        return {
            "lease_release_us": leased,
            "register_unregister_us": registered,
            "ratio": round(leased / registered, 2),
        }
    finally:
        client.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--backend", choices=("file", "memory"), default="file")
    parser.add_argument("--views", type=int, default=300)
    parser.add_argument("--fanout-changes", type=int, default=50)
    parser.add_argument("--only", choices=("fanout",), help="run this section alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-live-view-") as directory:
        url = f"file://{directory}/store?ttl={TTL}" if args.backend == "file" else f"memory://bench-{uuid.uuid4().hex}"

        def connect() -> ds.Discovery:
            return ds.connect(url)

        result: dict[str, Any] = {"backend": args.backend}
        if args.only is None:
            result["delivery"] = delivery(connect, args.changes)
            result.update(initial_and_reads(connect, args.records))
            result["lease"] = lease(connect, 200)
        result["fanout"] = fanout(connect, args.views, args.fanout_changes)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
