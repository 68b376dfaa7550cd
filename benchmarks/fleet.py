"""A fleet of writer processes on one file store, idle and then one killed, printed as one JSON object.

    .venv/bin/python -m benchmarks.fleet [--writers 5] [--records 10000] [--idle 60] [--ttl 10]
        [--kill-timeout 120] [--store DIR]

Run from the repository root. ``--writers`` processes each register ``--records`` endpoint
records on one store (ttl ``--ttl``); one watcher process watches them all (``list_and_watch``
of every endpoint, with room for every record in its queue, as a frontend of such a fleet
would). Every process keeps what it logs at WARNING and above for its report, and hears its
client's connection states. Then:

* ``idle``: everybody idles ``--idle`` seconds. Nothing may happen: no log line at WARNING or
  above, no state change, no event at the watcher (a Removed would be a false one: every writer
  lives); each process's CPU share is reported.
* ``kill``: the first writer is killed (``kill -9``); the watcher times the Removed of each of
  its records (``removed_s``: when the last one came, from the kill), and counts Removed of
  the others' records (must be 0). The other writers log and report nothing meanwhile.
* ``shutdown``: every other writer shuts down (``shutdown_s`` each), then the watcher.

``ok`` is True when nothing of the above went wrong. The store is on ``--store`` (default a new
directory under /var/tmp: a disk, where the tests' tmpfs would hide the disk's costs).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from benchmarks.child import Child


# -- the child processes ---------------------------------------------------------------------------
class _Recorder(logging.Handler):
    """Keeps what is logged at WARNING and above, and the connection states heard."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.states: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.threadName}: {record.getMessage()}"[:400])

    def heard(self, change: Any) -> None:
        self.states.append(f"{change.state}: {change.reason}"[:400])

    def take(self) -> dict[str, Any]:
        lines, states = self.lines, self.states
        self.lines, self.states = [], []
        return {"logged": lines, "states": states}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _reply(out: TextIO, **fields: Any) -> None:
    out.write(json.dumps(fields) + "\n")
    out.flush()


def _child(role: str, store: str, ttl: float, records: int, index: int) -> None:
    import discovery_sync as ds

    recorder = _Recorder()
    logging.getLogger().addHandler(recorder)
    client = ds.connect(f"file://{store}?ttl={ttl}")
    client.add_state_listener(recorder.heard)
    watcher = _WatcherSide(client, ds, max(records, 4096)) if role == "watcher" else None
    if watcher is None:
        for i in range(records):
            client.register(ds.EndpointSpec("fleet", f"writer{index}", f"ep{i}", ds.Transport.tcp("127.0.0.1:1")))
    else:
        watcher.synced()
    _reply(sys.stdout, ready=True, pid=os.getpid())
    for line in sys.stdin:
        command = json.loads(line)
        if command["do"] == "report":
            report = {"cpu_s": round(_cpu(), 3), **recorder.take()}
            if watcher is not None:
                report.update(watcher.take(command.get("component")))
            _reply(sys.stdout, **report)
        elif command["do"] == "shutdown":
            began = time.monotonic()
            if watcher is not None:
                watcher.close()
            client.shutdown()
            _reply(sys.stdout, shutdown_s=round(time.monotonic() - began, 3), **recorder.take())
            return


class _WatcherSide:
    """The watcher's watch, drained by a thread of its own: events counted, Removed timed."""

    def __init__(self, client: Any, ds: Any, queue_size: int) -> None:
        self._ds = ds
        # as a frontend of a fleet would: room for every record's Removed at once
        self._watch = client.list_and_watch(ds.Query.endpoints("fleet"), queue_size=queue_size)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._removed_at: dict[str, list[float]] = {}  # component -> wall times of its Removed
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="fleet-watch-drain", daemon=True)
        self._thread.start()

    def synced(self) -> None:
        self._synced.wait()

    def _drain(self) -> None:
        ds = self._ds
        for event in self._watch:
            with self._lock:
                self._counts[type(event).__name__] += 1
                if isinstance(event, ds.Removed):
                    self._removed_at.setdefault(event.id.component, []).append(time.time())
            if isinstance(event, ds.Resync):
                self._synced.set()

    def take(self, component: str | None) -> dict[str, Any]:
        with self._lock:
            counts, self._counts = dict(self._counts), Counter()
            removed = {c: len(times) for c, times in self._removed_at.items()}
            last = max(self._removed_at.get(component or "", []), default=None)
            self._removed_at = {}
        return {"events": counts, "removed_by_component": removed, "last_removed_at": last}

    def close(self) -> None:
        self._watch.close()


# -- the parent --------------------------------------------------------------------------------------
def _start(role: str, store: Path, ttl: float, records: int, index: int) -> Child:
    """A writer (``index``: its number) or the watcher, in a process of its own."""
    options = ["--store", str(store), "--ttl", str(ttl), "--records", str(records), "--index", str(index)]
    return Child("fleet", f"{role}{index if role == 'writer' else ''}", [role, *options])


def _wait_removed(watcher: Child, component: str, records: int, killed_at: float, timeout: float) -> dict[str, Any]:
    """Ask the watcher until it saw ``records`` Removed of ``component`` (or ``timeout`` passed)."""
    removed: Counter[str] = Counter()
    other: dict[str, Any] = {"logged": [], "states": [], "events": Counter()}
    last = None
    deadline = time.monotonic() + timeout
    while True:
        report = watcher.call(do="report", component=component)
        removed.update(report["removed_by_component"])
        other["logged"] += report["logged"]
        other["states"] += report["states"]
        other["events"].update(report["events"])
        last = report["last_removed_at"] or last
        if removed[component] >= records or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return {
        "removed": removed[component],
        "removed_s": None if last is None else round(last - killed_at, 3),
        "removed_others": sum(n for c, n in removed.items() if c != component),
        **other,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    own_store = args.store is None
    store = Path(args.store or tempfile.mkdtemp(prefix="fleet-", dir="/var/tmp"))
    try:
        return _run(args, store)
    finally:
        if own_store:
            shutil.rmtree(store, ignore_errors=True)


def _run(args: argparse.Namespace, store: Path) -> dict[str, Any]:
    began = time.monotonic()
    writers = [_start("writer", store, args.ttl, args.records, i) for i in range(args.writers)]
    try:
        for writer in writers:
            writer.receive()
        registered_s = time.monotonic() - began
        watcher = _start("watcher", store, args.ttl, args.writers * args.records, 0)
        watcher.receive()
        return _phases(args, writers, watcher, registered_s)
    finally:
        for process in writers:
            if process.process.poll() is None:
                process.process.kill()
            process.process.wait()


def _phases(args: argparse.Namespace, writers: list[Child], watcher: Child, registered_s: float) -> dict[str, Any]:
    everyone = [*writers, watcher]
    start = {p.role: p.call(do="report") for p in everyone}
    time.sleep(args.idle)
    idle = {}
    for p in everyone:
        report = p.call(do="report")
        cpu = report.pop("cpu_s") - start[p.role]["cpu_s"]
        idle[p.role] = {"percent_of_core": round(100 * cpu / args.idle, 2), **report}
    victim = writers[0]
    killed_at = time.time()
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait()
    kill = _wait_removed(watcher, victim.role, args.records, killed_at, args.kill_timeout)
    kill["writers"] = {p.role: p.call(do="report") for p in writers[1:]}
    shutdown = {p.role: p.call(do="shutdown") for p in writers[1:]}
    shutdown["watcher"] = watcher.call(do="shutdown")
    report = {"registered_s": round(registered_s, 2), "idle": idle, "kill": kill, "shutdown": shutdown}
    report["ok"] = _ok(report, args.records)
    return report


def _quiet(report: dict[str, Any]) -> bool:
    return not report.get("logged") and not report.get("states")


def _ok(report: dict[str, Any], records: int) -> bool:
    idle_quiet = all(_quiet(r) and not r.get("events") for r in report["idle"].values())
    kill = report["kill"]
    kill_ok = kill["removed"] == records and kill["removed_others"] == 0 and _quiet(kill)
    kill_ok = kill_ok and all(_quiet(r) for r in kill["writers"].values())
    shutdown_ok = all(not r.get("logged") for r in report["shutdown"].values())
    return idle_quiet and kill_ok and shutdown_ok


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=5)
    parser.add_argument("--records", type=int, default=10_000, help="records per writer")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds everybody idles")
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--kill-timeout", type=float, default=120.0, help="seconds the removals may take")
    parser.add_argument("--store", help="the store directory (default: a new one under /var/tmp)")
    parser.add_argument("--child", choices=("writer", "watcher"), help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.store, args.ttl, args.records, args.index)
        return
    report = {
        "python_version": platform.python_version(),
        "writers": args.writers,
        "records_per_writer": args.records,
        "idle_s": args.idle,
        "ttl_s": args.ttl,
        **run(args),
        "load_average": os.getloadavg(),
    }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
