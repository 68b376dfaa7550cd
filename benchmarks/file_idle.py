"""Idle CPU of file-store clients, printed as one JSON object.

    .venv/bin/python -m benchmarks.file_idle [--records 10000] [--window 20] [--ttl 10] [--reference] [--source DIR]

Run from the repository root. Each client runs in a process of its own, so that
``resource.getrusage(RUSAGE_SELF)`` (user + system CPU seconds of every thread of that process)
measures it alone; CPU seconds over a fixed window are far less sensitive to a loaded machine
than wall time.

* ``holder``: one client registers ``--records`` endpoint records, then idles: its heartbeat
  touches them and its rescans scan the bucket.
* ``watcher``: another client opens ``list_and_watch(Query.endpoints())`` over them, takes its
  initial Resync and idles (it drains its watch; no event is expected).
* ``reference`` (``--reference``): a reference-runtime worker (ai-dynamo-runtime, driven as in
  testrigs/reference.py) serving one endpoint and watching it, on the same store. It is not our
  code, so it is measured from outside: its process CPU clock (``clock_gettime`` on the clock id
  Linux gives another process: the same user + system time ``getrusage`` sums, in nanoseconds
  rather than the 10 ms ticks of ``/proc/<pid>/stat``) over the same window.

Both clients are ready (and have idled ``--warmup`` seconds, longer than their first full scan)
before the window starts; then all are measured over the same ``--window`` seconds. Reported
per client: CPU seconds, percent of one core, and that percent per 10,000 records.
``--profile DIR`` writes a sampled profile (every thread's stack, 200 times a second; the sampler
costs CPU of its own, so do not read percentages from such a run) of each of our clients to DIR.
``--source DIR`` runs our clients with the library of another checkout (default: this one), imported
as ``benchmarks.file_memory`` does (setup.cfg's ``package_dir`` mapping); ``benchmarks.scale
--source`` compares checkouts with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.child import Child
from benchmarks.file_memory import _git, _import_library

REPOSITORY = Path(__file__).resolve().parent.parent


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of another process, every thread (Linux: its process CPU clock,
    ``CPUCLOCK_SCHED`` of the pid as ``clock_getcpuclockid`` builds it)."""
    return time.clock_gettime((~pid << 3) | 2)


def _measure(window: float, profile: str | None) -> dict[str, float]:
    sampler = _Sampler() if profile else None
    start_cpu, start = cpu_seconds(), time.monotonic()
    time.sleep(window)
    cpu, wall = cpu_seconds() - start_cpu, time.monotonic() - start
    if sampler is not None and profile:
        Path(profile).write_text(json.dumps(sampler.stop(), indent=1))
    return {"cpu_s": round(cpu, 6), "window_s": round(wall, 3), "percent_of_core": round(100 * cpu / wall, 2)}


class _Sampler:
    """Samples every thread's stack (``sys._current_frames``) 200 times a second."""

    def __init__(self) -> None:
        from collections import Counter

        self.counts: Counter[str] = Counter()
        self.leaves: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(0.005):
            for ident, frame in sys._current_frames().items():
                if ident == me or frame is None:
                    continue
                code = frame.f_code
                where = f"{Path(code.co_filename).name}:{code.co_name}"
                if where.startswith(("threading.py:wait", "threading.py:_wait_for_tstate_lock")):
                    continue
                self.samples += 1
                self.leaves[where] += 1
                seen = set()
                caller: FrameType | None = frame
                while caller is not None:
                    code = caller.f_code
                    key = f"{Path(code.co_filename).name}:{code.co_name}"
                    if key not in seen:
                        seen.add(key)
                        self.counts[key] += 1
                    caller = caller.f_back

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return {
            "samples_busy": self.samples,
            "leaf": self.leaves.most_common(25),
            "inclusive": self.counts.most_common(40),
        }


# -- the child processes ---------------------------------------------------------------------------
def _commands() -> Any:
    for line in sys.stdin:
        yield json.loads(line)


def _reply(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def holder(store: str, records: int, ttl: float, options: str, source: str) -> None:
    ds = _import_library(source)

    client = ds.connect(f"file://{store}?ttl={ttl}{options}")
    try:
        for i in range(records):
            client.register(ds.EndpointSpec("ns", "backend", f"ep{i}", ds.Transport.tcp("127.0.0.1:1")))
        _serve(client, records)
    finally:
        client.shutdown()


def watcher(store: str, records: int, ttl: float, options: str, source: str) -> None:
    ds = _import_library(source)

    client = ds.connect(f"file://{store}?ttl={ttl}{options}")
    try:
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            while True:
                event = watch.get(timeout=600)
                if isinstance(event, ds.Resync):
                    seen = len(event.instances)
                    break
            events: list[Any] = []

            def drain() -> None:
                for event in watch.events():
                    events.append(type(event).__name__)

            threading.Thread(target=drain, name="drain", daemon=True).start()
            _serve(client, seen, events)
    finally:
        client.shutdown()


def _serve(client: Any, seen: int, events: list[str] | None = None) -> None:
    _reply(ready=True, records=seen, rescan_interval=client.rescan_interval, dead_after=client.dead_after)
    for command in _commands():
        if command["cmd"] == "measure":
            before = list(events) if events is not None else []
            measured = _measure(command["window"], command.get("profile"))
            _reply(**measured, events=(events or [])[len(before) :][:20], observer=client.observer_kind)
        elif command["cmd"] == "stop":
            return


def child(argv: list[str]) -> None:
    """``file_idle.py --child holder|watcher STORE N TTL OPTIONS SOURCE``."""
    role, store, records, ttl, options, source = argv[0], argv[1], int(argv[2]), float(argv[3]), argv[4], argv[5]
    {"holder": holder, "watcher": watcher}[role](store, records, ttl, options, source)


# -- the parent ------------------------------------------------------------------------------------
def start_child(role: str, store: Path, records: int, ttl: float, options: str, source: str = str(REPOSITORY)) -> Child:
    """A holder or a watcher in a process of its own, with the library of ``source`` (a checkout)."""
    return Child("file_idle", role, [role, str(store), str(records), str(ttl), options, source])


def measure_window(
    children: list[Child], peer: Any, *, percent_digits: int, window: float, profile: str | None = None
) -> dict[str, dict[str, Any]]:
    """Each child's CPU over ``window`` seconds (``{"cmd": "measure"}``, with a sampled profile to
    the directory ``profile``), by role, and, when ``peer`` (a reference worker) is given, its
    process CPU clock over the same time, as ``reference`` (percent rounded to ``percent_digits``)."""
    for one in children:
        one.send(cmd="measure", window=window, profile=f"{profile}/{one.role}.json" if profile else None)
    peer_start = proc_cpu_seconds(peer.process.pid) if peer else 0.0
    peer_wall = time.monotonic()
    results = {one.role: one.receive() for one in children}
    if peer is not None:
        cpu, wall = proc_cpu_seconds(peer.process.pid) - peer_start, time.monotonic() - peer_wall
        results["reference"] = {
            "cpu_s": round(cpu, 6),
            "window_s": round(wall, 3),
            "percent_of_core": round(100 * cpu / wall, percent_digits),
            "measured": "process CPU clock of its pid",
        }
    return results


def _reference_peer(store: Path) -> Any:
    sys.path.insert(0, str(REPOSITORY))
    from testrigs.reference import RustPeer

    peer = RustPeer("file", {"DYN_FILE_KV": str(store)})
    peer.call("serve", endpoint="refns.worker.generate")
    peer.call("wait_ids", endpoint="refns.worker.generate", present=[], timeout=1.0)  # a client watching it
    return peer


def run(
    records: int,
    window: float,
    ttl: float,
    warmup: float,
    options: str,
    reference: bool,
    profile: str | None,
    source: str = str(REPOSITORY),
) -> dict[str, Any]:
    per_10k = 10_000 / records
    with tempfile.TemporaryDirectory(prefix="ds-file-idle-") as tmp:
        store = Path(tmp) / "store"
        started = time.monotonic()
        holder = start_child("holder", store, records, ttl, options, source)
        children = [holder]
        peer = None
        try:
            ready = {"holder": holder.receive()}
            registered_s = time.monotonic() - started
            watcher = start_child("watcher", store, records, ttl, options, source)
            children.append(watcher)
            ready["watcher"] = watcher.receive()
            if ready["watcher"]["records"] != records:
                raise RuntimeError(f"the watcher saw {ready['watcher']['records']} records of {records}")
            if reference:
                peer = _reference_peer(store)
            time.sleep(warmup)
            results = measure_window(children, peer, percent_digits=2, window=window, profile=profile)
            if peer is not None:
                results["reference"]["serves"] = "1 endpoint, watches it"
        finally:
            for one in children:
                one.stop()
            if peer is not None:
                peer.shutdown()
    for role in ("holder", "watcher"):
        results[role]["percent_of_core_per_10k_records"] = round(results[role]["percent_of_core"] * per_10k, 2)
        results[role]["rescan_interval_s"] = ready[role]["rescan_interval"]
        results[role]["dead_after_s"] = ready[role]["dead_after"]
    return {"registered_in_s": round(registered_s, 1), **results}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured")
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds idled before the window")
    parser.add_argument("--options", default="", help="more URL options, e.g. '&rescan_interval=2'")
    parser.add_argument("--reference", action="store_true", help="also measure a reference-runtime worker")
    parser.add_argument("--profile", help="directory for a sampled profile of each client's window")
    parser.add_argument("--source", default=str(REPOSITORY), help="library checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    source = str(Path(args.source).resolve())
    result = {
        "python_version": platform.python_version(),
        "commit": _git(Path(source)).get("commit", ""),
        "records": args.records,
        "window_s": args.window,
        "ttl_s": args.ttl,
        "options": args.options,
        "load_average": os.getloadavg(),
        **run(args.records, args.window, args.ttl, args.warmup, args.options, args.reference, args.profile, source),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
