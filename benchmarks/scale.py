"""How the file store and etcd watches scale, ours beside the reference runtime, in one run printed as
one JSON object (and a table on stderr).

    .venv/bin/python -m benchmarks.scale [--records 1000,10000,50000] [--runs 5] [--window 20] [--ttl 10]
        [--warmup 12] [--reference-max-records 10000] [--watches 1,200,1000] [--no-reference] [--no-etcd]

Run from the repository root (the reference workers and the etcd are the test suite's rigs). For each
store size N:

* ``reads`` (``benchmarks.file_reads``, a reader process of its own): cold and warm ``list()``,
  ``list_and_watch()`` until its first Resync, RSS per record, over N endpoint records, and the
  floor of this machine (a plain loop reading and parsing every file) with the cold list over it;
* ``idle`` (``benchmarks.file_idle``): CPU seconds over ``--window`` seconds (``resource.getrusage``
  of each client's own process) of a *holder* that registered the N records and of a *watcher*
  watching them, and (unless ``--no-reference``) of a reference worker on the same store serving one
  endpoint and watching it (its process CPU clock);
* ``one_endpoint_sync`` (N ≤ ``--reference-max-records``, unless ``--no-reference``): a store of N
  instances of ONE endpoint, the only shape the reference's client reads: the time our
  ``list_and_watch()`` takes to its first Resync, and the time a reference worker takes from
  creating that endpoint's client until the client knows all N instances (polled every 10 ms).
  The records are touched every 2 s meanwhile, as their owners would, or the reference would sweep
  them as dead (it judges files by their mtime).

``ratios`` are reference / ours (above 1: ours costs less). ``etcd`` (unless ``--no-etcd``) is
``benchmarks.etcd_watches`` for ``--watches``: threads, sockets and delivery p50/p99 of N watches on
one client, in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from benchmarks import file_idle, file_reads

REPOSITORY = Path(__file__).resolve().parent.parent
REFERENCE_ENDPOINT = ("refns", "worker", "generate")
TOUCH_EVERY = 2.0  # seconds; the reference sweeps a file 10 s behind its wall clock
REFERENCE_SYNC_TIMEOUT = 600.0
IDLE_ROLES = ("watcher", "holder", "reference")


def _ratio(reference: float | None, ours: float | None) -> float | None:
    if not reference or not ours:
        return None
    return round(reference / ours, 2)


# -- one endpoint of N instances: our initial sync and the reference's -----------------------------
class _Toucher:
    """Moves the mtime of every file of a bucket every ``TOUCH_EVERY`` seconds, as live owners would."""

    def __init__(self, bucket: Path) -> None:
        self._names = [entry.path for entry in os.scandir(bucket)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scale-toucher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TOUCH_EVERY):
            for name in self._names:
                os.utime(name)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _one_endpoint_store(store: Path, records: int) -> list[int]:
    """Writes ``records`` instances of REFERENCE_ENDPOINT as their workers would; their ids."""
    import discovery_sync as ds

    bucket = store / "v1" / "instances"
    bucket.mkdir(parents=True)
    namespace, component, endpoint = REFERENCE_ENDPOINT
    ids = [0x7000_0000 + i for i in range(records)]
    for instance_id in ids:
        record = ds.Endpoint(namespace, component, endpoint, instance_id, ds.Transport.tcp("127.0.0.1:1"))
        (bucket / f"{namespace}%2F{component}%2F{endpoint}%2F{instance_id:x}").write_bytes(ds.instance_to_json(record))
    return ids


def _reference_sync_ms(store: Path, records: int) -> float:
    sys.path.insert(0, str(REPOSITORY))
    from testrigs.reference import RustPeer

    peer = RustPeer("file", {"DYN_FILE_KV": str(store)})
    try:
        peer.call("ping")
        peer.send("wait_count", endpoint=".".join(REFERENCE_ENDPOINT), count=records, timeout=REFERENCE_SYNC_TIMEOUT)
        reply = peer.receive("wait_count", timeout=REFERENCE_SYNC_TIMEOUT + 30)
    finally:
        peer.shutdown()
    if not reply["seen"]:
        raise RuntimeError(f"the reference client knew {reply['known']} instances of {records}")
    return float((reply["at_ns"] - reply["started_ns"]) / 1e6)


def one_endpoint_sync(records: int, reference: bool) -> dict[str, Any]:
    import discovery_sync as ds

    with tempfile.TemporaryDirectory(prefix="ds-scale-") as tmp:
        store = Path(tmp) / "store"
        _one_endpoint_store(store, records)
        toucher = _Toucher(store / "v1" / "instances")
        try:
            ours, _ = file_reads._initial_sync(ds, f"file://{store}?ttl={file_reads.TTL}", records)
            theirs = _reference_sync_ms(store, records) if reference else None
        finally:
            toucher.close()
    return {
        "ours_ms": round(ours, 1),
        "reference_ms": None if theirs is None else round(theirs, 1),
        "reference_over_ours": _ratio(theirs, ours),
    }


# -- the whole run ---------------------------------------------------------------------------------
def measure_size(records: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ds-scale-reads-") as tmp:
        reads = file_reads.measure(Path(tmp), "store", records, args.runs, args.warm_calls, str(REPOSITORY))
    with_reference = not args.no_reference
    idle = file_idle.run(records, args.window, args.ttl, args.warmup, "", with_reference, None)
    result: dict[str, Any] = {
        "records": records,
        "cold_list": reads["cold_list"],
        "warm_list": reads["warm_list"],
        "initial_sync": reads["initial_sync"],
        "floor": reads["floor"],
        "cold_over_floor": reads["cold_over_floor"],
        "rss_bytes_per_record": reads["rss_bytes_per_record"],
        "idle": {
            role: {key: idle[role][key] for key in ("cpu_s", "window_s", "percent_of_core")}
            for role in IDLE_ROLES
            if role in idle
        },
    }
    if "reference" in idle:
        reference_percent = idle["reference"]["percent_of_core"]
        result["ratios"] = {
            "idle_watcher": _ratio(reference_percent, idle["watcher"]["percent_of_core"]),
            "idle_holder": _ratio(reference_percent, idle["holder"]["percent_of_core"]),
        }
    result["one_endpoint_sync"] = one_endpoint_sync(records, with_reference and records <= args.reference_max_records)
    return result


def etcd_watches(watches: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.etcd_watches", "--watches", watches],
        cwd=REPOSITORY,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def table(report: dict[str, Any]) -> str:
    """The report's main numbers, one line per store size (and per watch count), for a terminal."""

    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"

    lines = [
        "records | cold ms (x floor) | warm ms | sync ms | RSS B/rec | 1-endpoint sync ours/ref ms (x) "
        "| idle % watcher holder ref"
    ]
    for size in report["sizes"]:
        one = size["one_endpoint_sync"]
        idle = size["idle"]
        lines.append(
            " | ".join(
                [
                    cell(size["records"]),
                    f"{cell(size['cold_list']['wall_ms'])} ({cell(size['cold_over_floor'])})",
                    cell(size["warm_list"]["wall_ms"]),
                    cell(size["initial_sync"]["wall_ms"]),
                    cell(size["rss_bytes_per_record"]),
                    f"{cell(one['ours_ms'])}/{cell(one['reference_ms'])} ({cell(one['reference_over_ours'])})",
                    " ".join(cell(idle.get(role, {}).get("percent_of_core")) for role in IDLE_ROLES),
                ]
            )
        )
    if "etcd" in report:
        lines.append("etcd watches | watch threads | sockets | distinct p50/p99 ms | fan-out p50/p99 ms")
        for run in report["etcd"]["runs"]:
            lines.append(
                f"{run['watches']:,} | {run['watch_threads']} | {run['sockets']} | "
                f"{run['distinct']['p50_ms']}/{run['distinct']['p99_ms']} | "
                f"{run['fanout']['p50_ms']}/{run['fanout']['p99_ms']}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", default="1000,10000,50000", help="store sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="cold clients per size (medians are reported)")
    parser.add_argument("--warm-calls", type=int, default=5, help="warm list() calls per cold client")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of idle CPU measured")
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds idled before that window")
    parser.add_argument("--ttl", type=float, default=10.0, help="TTL of the idle clients' records")
    parser.add_argument(
        "--reference-max-records",
        type=int,
        default=10_000,
        help="largest store whose one-endpoint sync the reference is timed on (it is slow: seconds at 10,000)",
    )
    parser.add_argument("--watches", default="1,200,1000", help="etcd watch counts, comma-separated")
    parser.add_argument("--no-reference", action="store_true", help="measure no reference-runtime worker")
    parser.add_argument("--no-etcd", action="store_true", help="skip the etcd watch table")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    report: dict[str, Any] = {
        "python_version": platform.python_version(),
        "cpus": os.cpu_count(),
        "commit": commit,
        "runs": args.runs,
        "window_s": args.window,
        "ttl_s": args.ttl,
        "sizes": [measure_size(int(size), args) for size in args.records.split(",")],
    }
    if not args.no_etcd:
        report["etcd"] = etcd_watches(args.watches)
    report["load_average_after"] = [round(value, 2) for value in os.getloadavg()]
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    sys.stderr.write(table(report) + "\n")


if __name__ == "__main__":
    main()
