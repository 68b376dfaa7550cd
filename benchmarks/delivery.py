"""What delivering events to watches costs, on the memory backend (no I/O: the library's own
work only), checkouts side by side, as one JSON object.

    .venv/bin/python -m benchmarks.delivery [--events 20000] [--watches 4] [--runs 7] [--source DIR ...]

Run from the repository root. Each run is a process of its own per source, the sources in turn
(so a loaded machine disturbs each alike); medians over ``--runs``:

* ``fan_out_us``: a writer registers ``--events`` endpoints while ``--watches`` watches, each
  consumed by a thread of its own, take them; wall time until every watch had every ``Added``,
  per event (one register, its publication to every watch, every watch's ``get()``).
* ``drain_us``: ``--events`` events queued on one watch with nobody consuming (publication
  only), then taken with ``get()`` by the one consumer: each side's time per event.

``--source DIR`` (repeatable; default: this checkout): a checkout of the library (``git worktree
add --detach /tmp/before <commit>``); the first listed is "before", and ``ratios_to_first`` gives
each later source's median over the first's (above 1 is slower: 1.03 is 3 % worse), and
``best_ratios_to_first`` the same of the fastest runs (steadier on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.file_memory import _git, _import_library

FIGURES = ("fan_out_us", "publish_us", "drain_us")


def _endpoint(ds: Any, index: int) -> Any:
    return ds.EndpointSpec("bench", "backend", f"e{index}", ds.Transport.tcp("127.0.0.1:9000"))


def _fan_out(ds: Any, events: int, watches: int) -> float:
    url = f"memory://delivery-{uuid.uuid4().hex}"
    with ds.connect(url) as writer, ds.connect(url) as watcher:
        opened = [watcher.list_and_watch(ds.Query.endpoints("bench"), queue_size=events + 16) for _ in range(watches)]
        for watch in opened:
            watch.get(timeout=10)  # the initial Resync
        specs = [_endpoint(ds, i) for i in range(events)]

        def consume(watch: Any) -> None:
            for _ in range(events):
                watch.get(timeout=60)

        threads = [
            threading.Thread(target=consume, args=(w,), name=f"bench-consumer-{i}") for i, w in enumerate(opened)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for spec in specs:
            writer.register(spec)
        for thread in threads:
            thread.join()
        return (time.perf_counter() - started) / events * 1e6


def _drain(ds: Any, events: int) -> tuple[float, float]:
    url = f"memory://delivery-{uuid.uuid4().hex}"
    with ds.connect(url) as writer, ds.connect(url) as watcher:
        watch = watcher.list_and_watch(ds.Query.endpoints("bench"), queue_size=events + 16)
        watch.get(timeout=10)
        specs = [_endpoint(ds, i) for i in range(events)]
        started = time.perf_counter()
        for spec in specs:
            writer.register(spec)
        published = time.perf_counter()
        for _ in range(events):
            watch.get(timeout=10)
        drained = time.perf_counter()
        return (published - started) / events * 1e6, (drained - published) / events * 1e6


def child(source: str, events: int, watches: int) -> dict[str, float]:
    """One run of every figure with the library of ``source``."""
    ds = _import_library(source)
    fan_out = _fan_out(ds, events, watches)
    publish, drain = _drain(ds, events)
    return {"fan_out_us": fan_out, "publish_us": publish, "drain_us": drain}


def _run_child(source: str, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.delivery", "--child", source]
    command += ["--events", str(args.events), "--watches", str(args.watches)]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sources = args.source or ["."]
    runs: dict[str, list[dict[str, float]]] = {source: [] for source in sources}
    for _ in range(args.runs):
        for source in sources:
            runs[source].append(_run_child(source, args))
    medians = {s: {f: round(statistics.median(r[f] for r in runs[s]), 3) for f in FIGURES} for s in sources}
    best = {s: {f: round(min(r[f] for r in runs[s]), 3) for f in FIGURES} for s in sources}
    return {
        "events": args.events,
        "watches": args.watches,
        "runs": args.runs,
        "sources": [{"path": s, **_git(Path(s).resolve()), "medians": medians[s], "best": best[s]} for s in sources],
        "ratios_to_first": _ratios(medians, sources),
        "best_ratios_to_first": _ratios(best, sources),
    }


def _ratios(figures: dict[str, dict[str, float]], sources: list[str]) -> dict[str, dict[str, float]]:
    first = figures[sources[0]]
    return {s: {f: round(figures[s][f] / first[f], 3) for f in FIGURES} for s in sources[1:]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.delivery", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000, help="endpoints registered per measurement")
    parser.add_argument("--watches", type=int, default=4, help="watches consumed at once in fan_out_us")
    parser.add_argument("--runs", type=int, default=7, help="processes per source (medians are reported)")
    parser.add_argument("--source", action="append", help="a checkout of the library (repeatable; first: before)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.events, args.watches)))
        return
    for source in args.source or []:
        if not (Path(source) / "discovery_sync").is_dir() or not (Path(source) / "setup.cfg").is_file():
            parser.error(f"{source} is not a checkout of discovery-sync (no discovery_sync/ and setup.cfg)")
    print(json.dumps(measure(args), indent=2))


if __name__ == "__main__":
    main()
