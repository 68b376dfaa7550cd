"""Cold and warm reads of a file store, printed as one JSON object.

    .venv/bin/python -m benchmarks.file_reads [--records 1000,10000,50000] [--runs 5] [--source DIR ...]

Run from the repository root. For each size a store of that many endpoint records is written
straight into ``v1/instances`` (as another process would: ``benchmarks.file_memory.populate``), in
a temporary directory under /tmp; then a reader process of its own measures, ``--runs`` times:

* ``cold_list``: ``list()`` by a client just connected (it reads and parses every file);
* ``warm_list``: ``list()`` again by that client (median of ``--warm`` calls per run), the store
  unchanged: it still lists the directory, but reads no file;
* ``initial_sync``: ``list_and_watch()`` by another client just connected, until its first
  ``Resync`` (the notifier's start included);
* ``floor``: what no reader can avoid, for scale on this machine: list the directory, then open,
  read, close and ``orjson.loads`` every file, in a plain loop. ``cold_over_floor`` is the cold
  ``list()``'s median wall time over this one's (a machine with slower system calls raises both).

Each is reported as the median over the runs of wall milliseconds (``perf_counter``) and CPU
milliseconds (``process_time``: every thread of the reader, so the client's own heartbeat and
rescan threads count when they run meanwhile), with the minimum and maximum wall time and
microseconds per record. ``rss_bytes_per_record`` is the reader's resident set after the cold
``list()`` (its result dropped, the client and its view held) less before connecting, per record,
from the first run (``/proc/self/statm`` after a ``gc.collect()``).

``--source`` (repeatable) measures other checkouts of the library in the same run, alternating
them size by size, so a loaded machine disturbs each alike: ``git worktree add /tmp/before
<commit>`` and ``--source /tmp/before --source .``. The readers import the library from each
source as ``benchmarks.file_memory`` does (setup.cfg's ``package_dir`` mapping).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.file_memory import _git, _import_library, populate, settled_rss_kib

REPOSITORY = Path(__file__).resolve().parent.parent
TTL = 3600  # no record dies during a measurement


def _timed(action: Any) -> tuple[float, float, Any]:
    """Wall and CPU milliseconds of one call, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = action()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, result


def _summary(samples: list[tuple[float, float]], records: int) -> dict[str, float]:
    walls = [wall for wall, _ in samples]
    wall = statistics.median(walls)
    return {
        "wall_ms": round(wall, 2),
        "cpu_ms": round(statistics.median(cpu for _, cpu in samples), 2),
        "wall_min_ms": round(min(walls), 2),
        "wall_max_ms": round(max(walls), 2),
        "us_per_record": round(wall * 1000 / records, 2),
    }


def _lists(ds: Any, url: str, records: int, warm: int) -> tuple[tuple[float, float], tuple[float, float], int]:
    """A new client's cold ``list()``, the median of its ``warm`` next ones, and its RSS growth (KiB)."""
    query = ds.Query.endpoints()
    gc.collect()
    before = settled_rss_kib()
    client = ds.connect(url)
    try:
        wall, cpu, listed = _timed(lambda: client.list(query))
        if len(listed) != records:
            raise RuntimeError(f"a cold list() gave {len(listed)} records of {records}")
        del listed
        grown = settled_rss_kib() - before
        samples = []
        for _ in range(warm):
            warm_wall, warm_cpu, listed = _timed(lambda: client.list(query))
            if len(listed) != records:
                raise RuntimeError(f"a warm list() gave {len(listed)} records of {records}")
            samples.append((warm_wall, warm_cpu))
    finally:
        client.shutdown()
    hot = (statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples))
    return (wall, cpu), hot, grown


def _initial_sync(ds: Any, url: str, records: int) -> tuple[float, float]:
    """A new client's ``list_and_watch()`` until its first Resync."""
    query = ds.Query.endpoints()
    gc.collect()
    client = ds.connect(url)

    def initial() -> int:
        with client.list_and_watch(query) as watch:
            while True:
                event = watch.get(timeout=600)
                if isinstance(event, ds.Resync):
                    return len(event.instances)

    try:
        wall, cpu, count = _timed(initial)
    finally:
        client.shutdown()
    if count != records:
        raise RuntimeError(f"the initial Resync held {count} records of {records}")
    return wall, cpu


def _floor(bucket: Path, records: int) -> tuple[float, float]:
    """A plain loop that lists ``bucket`` and opens, reads, closes and parses every file."""
    import orjson

    def read_all() -> int:
        parsed = 0
        for entry in os.scandir(bucket):
            with open(entry.path, "rb") as file:
                orjson.loads(file.read())
            parsed += 1
        return parsed

    wall, cpu, parsed = _timed(read_all)
    if parsed != records:
        raise RuntimeError(f"the floor loop read {parsed} files of {records}")
    return wall, cpu


def read_store(store: Path, records: int, runs: int, warm: int, source: str) -> dict[str, Any]:
    """The reader process: every measurement of one store (see the module docstring)."""
    ds = _import_library(source)
    url = f"file://{store}?ttl={TTL}"
    cold, hot, sync, floor = [], [], [], []
    rss_per_record = None
    for _ in range(runs):
        first, warm_median, grown = _lists(ds, url, records, warm)
        cold.append(first)
        hot.append(warm_median)
        if rss_per_record is None:
            rss_per_record = round(grown * 1024 / records, 1)
        sync.append(_initial_sync(ds, url, records))
        floor.append(_floor(store / "v1" / "instances", records))
    cold_list = _summary(cold, records)
    floor_summary = _summary(floor, records)
    return {
        "records": records,
        "cold_list": cold_list,
        "warm_list": _summary(hot, records),
        "initial_sync": _summary(sync, records),
        "floor": floor_summary,
        "cold_over_floor": round(cold_list["wall_ms"] / floor_summary["wall_ms"], 2),
        "rss_bytes_per_record": rss_per_record,
    }


def _child(argv: list[str]) -> None:
    """``file_reads.py populate STORE N SOURCE`` or ``read STORE N RUNS WARM SOURCE``: one JSON line out."""
    role, store = argv[0], Path(argv[1])
    if role == "populate":
        populate(store, int(argv[2]), argv[3])
        result: dict[str, Any] = {}
    elif role == "read":
        result = read_store(store, int(argv[2]), int(argv[3]), int(argv[4]), argv[5])
    else:
        raise SystemExit(f"unknown role {role!r}")
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def _run(python: str, source: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPOSITORY)  # this module; the library comes from ``source``
    done = subprocess.run(
        [python, "-m", "benchmarks.file_reads", *args, source],
        cwd=REPOSITORY,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def measure(tmp: Path, name: str, size: int, runs: int, warm: int, source: str) -> dict[str, Any]:
    """A store of ``size`` records written at ``tmp/name`` and measured, each in a process of its own."""
    store = tmp / name
    _run(sys.executable, source, "populate", str(store), str(size))
    return _run(sys.executable, source, "read", str(store), str(size), str(runs), str(warm))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in ("populate", "read"):
        _child(argv)
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", default="1000,10000,50000", help="store sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="cold clients per size (medians are reported)")
    parser.add_argument("--warm", type=int, default=5, help="warm list() calls per cold client")
    parser.add_argument("--source", action="append", help="library checkout to measure (repeatable; default: this one)")
    args = parser.parse_args(argv)
    sources = [str(Path(source).resolve()) for source in args.source or [str(REPOSITORY)]]
    results: dict[str, list[dict[str, Any]]] = {source: [] for source in sources}
    with tempfile.TemporaryDirectory(prefix="ds-file-reads-") as tmp:
        for size in [int(size) for size in args.records.split(",")]:
            for source in sources:
                name = f"store-{len(results[source])}-{sources.index(source)}"
                results[source].append(measure(Path(tmp), name, size, args.runs, args.warm, source))
    load = os.getloadavg()
    report = {
        "python_version": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_after": [round(value, 2) for value in load],
        "runs": args.runs,
        "warm_calls_per_run": args.warm,
        "ttl_s": TTL,
        "results": [{"source": source, **_git(Path(source)), "sizes": results[source]} for source in sources],
    }
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
