"""How the file store and etcd watches scale, ours beside the reference runtime, in one run printed as
one JSON object (and a table on stderr).

    .venv/bin/python -m benchmarks.scale [--records 1000,10000,50000] [--runs 5] [--window 20] [--ttl 10]
        [--warmup 12] [--reference-max-records 10000] [--watches 1,200,1000] [--etcd-records 100000]
        [--no-reference] [--no-etcd] [--source DIR ...]

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
one client, in a process of its own. ``etcd_scale`` (unless ``--no-etcd``, or ``--etcd-records 0``) is
``benchmarks.etcd_scale`` on ``--etcd-records`` records (and first on ``--reference-max-records``
when that is fewer, a store the reference can read whole): write speed, our cold list, initial sync,
memory per record and idle CPU of a watcher and of the lease's holder, beside the reference
worker's initial sync, memory and idle CPU on the same etcd (with ``--window``; no reference with
``--no-reference``), its ``ratios`` reference / ours; run in a process of its own.

``--source DIR`` (repeatable; default: this checkout) measures other checkouts of the library in the
same run, before and after side by side: ``git worktree add --detach /tmp/before <commit>`` and
``--source /tmp/before --source .``; the first source listed is "before". Our processes import the
library from each source as ``benchmarks.file_memory`` does (setup.cfg's ``package_dir`` mapping):
the readers, the holder and the watcher, and our side of the one-endpoint sync (a process of its own
for each source, on one store per size). Size by size, each measurement is taken for every source in
turn, so a loaded machine disturbs each alike. The reference worker is measured once per size: its
idle CPU beside the first source's holder and watcher, its one-endpoint sync on the shared store; each
source's ``ratios`` are over those. With one source the JSON is as above (its ``commit`` is the
source's); with several, ``sources`` holds each source's path, commit and ``sizes`` (each as above),
and ``sizes`` holds per store size ``ratios_to_first``: for every later source, each of our figures
(cold and warm list wall ms, initial sync wall ms, RSS bytes per record, idle CPU of the holder and of
the watcher, our one-endpoint sync ms) of that source over the first's, to 3 decimals: above 1 is
worse, 1.05 is 5 % worse. The etcd table is of this checkout's library only. A directory without
``discovery_sync/`` and ``setup.cfg`` is refused before anything runs.
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
from benchmarks.etcd_scale import table as etcd_scale_table
from benchmarks.file_memory import _git, _import_library

REPOSITORY = Path(__file__).resolve().parent.parent
REFERENCE_ENDPOINT = ("refns", "worker", "generate")
TOUCH_EVERY = 2.0  # seconds; the reference sweeps a file 10 s behind its wall clock
REFERENCE_SYNC_TIMEOUT = 600.0
IDLE_ROLES = ("watcher", "holder", "reference")
ONE_ENDPOINT_SYNC = "one-endpoint-sync"  # the child process timing our side of it, for one source


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


def _our_sync_child(argv: list[str]) -> None:
    """``scale.py one-endpoint-sync STORE N SOURCE``: our initial sync with the library of SOURCE."""
    store, records, source = argv[0], int(argv[1]), argv[2]
    ds = _import_library(source)
    wall, _ = file_reads._initial_sync(ds, f"file://{store}?ttl={file_reads.TTL}", records)
    sys.stdout.write(json.dumps({"ours_ms": wall}) + "\n")
    sys.stdout.flush()


def _our_sync_ms(store: Path, records: int, source: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}  # this module; the library comes from ``source``
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", ONE_ENDPOINT_SYNC, str(store), str(records), source],
        cwd=REPOSITORY,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.splitlines()[-1])["ours_ms"])


def one_endpoint_sync(records: int, sources: list[str], reference: bool) -> list[dict[str, Any]]:
    """Per source: our initial sync over one store of N instances of one endpoint, and the reference's
    (timed once, after ours)."""
    with tempfile.TemporaryDirectory(prefix="ds-scale-") as tmp:
        store = Path(tmp) / "store"
        _one_endpoint_store(store, records)
        toucher = _Toucher(store / "v1" / "instances")
        try:
            ours = [_our_sync_ms(store, records, source) for source in sources]
            theirs = _reference_sync_ms(store, records) if reference else None
        finally:
            toucher.close()
    return [
        {
            "ours_ms": round(mine, 1),
            "reference_ms": None if theirs is None else round(theirs, 1),
            "reference_over_ours": _ratio(theirs, mine),
        }
        for mine in ours
    ]


# -- the whole run ---------------------------------------------------------------------------------
def measure_size(records: int, args: argparse.Namespace, sources: list[str]) -> list[dict[str, Any]]:
    """Every figure of one store size, for each source (in turn, measurement by measurement)."""
    with tempfile.TemporaryDirectory(prefix="ds-scale-reads-") as tmp:
        reads = [
            file_reads.measure(Path(tmp), f"store-{i}", records, args.runs, args.warm_calls, source)
            for i, source in enumerate(sources)
        ]
    with_reference = not args.no_reference
    idles = [
        file_idle.run(records, args.window, args.ttl, args.warmup, "", with_reference and i == 0, None, source)
        for i, source in enumerate(sources)
    ]
    if "reference" in idles[0]:  # measured once, beside the first source's clients
        for idle in idles[1:]:
            idle["reference"] = idles[0]["reference"]
    syncs = one_endpoint_sync(records, sources, with_reference and records <= args.reference_max_records)
    return [_size_result(records, *measured) for measured in zip(reads, idles, syncs, strict=True)]


def _size_result(records: int, reads: dict[str, Any], idle: dict[str, Any], sync: dict[str, Any]) -> dict[str, Any]:
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
    result["one_endpoint_sync"] = sync
    return result


def _idle_share(size: dict[str, Any], role: str) -> float:
    return float(size["idle"][role]["cpu_s"] / size["idle"][role]["window_s"])  # not rounded as percent_of_core


FIGURES: dict[str, Any] = {  # our figures compared between sources (all: lower is better)
    "cold_list_wall_ms": lambda size: size["cold_list"]["wall_ms"],
    "warm_list_wall_ms": lambda size: size["warm_list"]["wall_ms"],
    "initial_sync_wall_ms": lambda size: size["initial_sync"]["wall_ms"],
    "rss_bytes_per_record": lambda size: size["rss_bytes_per_record"],
    "idle_holder_percent": lambda size: _idle_share(size, "holder"),
    "idle_watcher_percent": lambda size: _idle_share(size, "watcher"),
    "one_endpoint_sync_ours_ms": lambda size: size["one_endpoint_sync"]["ours_ms"],
}


def ratios_to_first(first: dict[str, Any], later: dict[str, Any]) -> dict[str, float | None]:
    """Each of our figures of ``later`` over ``first`` (one store size), to 3 decimals; None when the
    first's is missing or not above 0 (an RSS growth of 0 pages on a small store)."""
    ratios: dict[str, float | None] = {}
    for name, figure in FIGURES.items():
        before, after = figure(first), figure(later)
        ratios[name] = None if before is None or after is None or before <= 0 else round(after / before, 3)
    return ratios


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


def etcd_scale(args: argparse.Namespace) -> dict[str, Any]:
    """``benchmarks.etcd_scale`` on ``--etcd-records`` records, in a process of its own."""
    options = ["--records", str(args.etcd_records), "--window", str(args.window)]
    options += ["--reference-records", str(args.reference_max_records)]
    if args.no_reference:
        options.append("--no-reference")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.etcd_scale", *options],
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
        capture_output=True,  # its table is drawn again below; its stderr is shown when it fails
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"benchmarks.etcd_scale failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _label(source: dict[str, Any]) -> str:
    """A source as the table names it: its commit (``+`` if it has uncommitted changes), or its path."""
    if not source.get("commit"):
        return str(source["source"])
    return str(source["commit"]) + ("+" if source.get("uncommitted_changes") else "")


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def table(report: dict[str, Any]) -> str:
    """The report's main numbers, one line per store size and source (and per watch count), for a terminal."""
    cell = _cell
    sources = report.get("sources")
    lines = [
        "records | "
        + ("source | " if sources else "")
        + "cold ms (x floor) | warm ms | sync ms | RSS B/rec | 1-endpoint sync ours/ref ms (x) "
        "| idle % watcher holder ref"
    ]
    if sources:  # size by size, each source in turn
        rows = [(source["sizes"][i], [_label(source)]) for i in range(len(report["sizes"])) for source in sources]
    else:
        rows = [(size, []) for size in report["sizes"]]
    for size, label in rows:
        one = size["one_endpoint_sync"]
        idle = size["idle"]
        lines.append(
            " | ".join(
                [
                    cell(size["records"]),
                    *label,
                    f"{cell(size['cold_list']['wall_ms'])} ({cell(size['cold_over_floor'])})",
                    cell(size["warm_list"]["wall_ms"]),
                    cell(size["initial_sync"]["wall_ms"]),
                    cell(size["rss_bytes_per_record"]),
                    f"{cell(one['ours_ms'])}/{cell(one['reference_ms'])} ({cell(one['reference_over_ours'])})",
                    " ".join(cell(idle.get(role, {}).get("percent_of_core")) for role in IDLE_ROLES),
                ]
            )
        )
    if sources:
        lines.append("ratios to the first source (later / first; above 1: worse) | " + " | ".join(FIGURES))
        for size in report["sizes"]:
            for later in size["ratios_to_first"]:
                figures = " | ".join("-" if later[name] is None else f"{later[name]:.3f}" for name in FIGURES)
                lines.append(f"{size['records']:,} | {_label(later)} | {figures}")
    if "etcd" in report:
        lines.append("etcd watches | watch threads | sockets | distinct p50/p99 ms | fan-out p50/p99 ms")
        for run in report["etcd"]["runs"]:
            lines.append(
                f"{run['watches']:,} | {run['watch_threads']} | {run['sockets']} | "
                f"{run['distinct']['p50_ms']}/{run['distinct']['p99_ms']} | "
                f"{run['fanout']['p50_ms']}/{run['fanout']['p99_ms']}"
            )
    if "etcd_scale" in report:
        lines.append(etcd_scale_table(report["etcd_scale"]))
    return "\n".join(lines)


def _refusal(source: str) -> str | None:
    """Why ``source`` is not a checkout of this library, or None."""
    if not Path(source).is_dir():
        return f"--source {source}: no such directory"
    missing = [name for name in ("discovery_sync/__init__.py", "setup.cfg") if not (Path(source) / name).is_file()]
    if not missing:
        return None
    return f"--source {source}: not a checkout of discovery-sync (it has no {' and no '.join(missing)})"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [ONE_ENDPOINT_SYNC]:
        _our_sync_child(argv[1:])
        return
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
    parser.add_argument(
        "--etcd-records",
        type=int,
        default=100_000,
        help="records of the etcd scale section (benchmarks.etcd_scale; 0: skip it)",
    )
    parser.add_argument("--no-etcd", action="store_true", help="skip the etcd watch table and the etcd scale section")
    parser.add_argument(
        "--source",
        action="append",
        metavar="DIR",
        help="library checkout to measure (repeatable, the first is 'before'; default: this one)",
    )
    args = parser.parse_args(argv)
    sources = [str(Path(source).resolve()) for source in args.source or [str(REPOSITORY)]]
    for source in sources:
        refusal = _refusal(source)
        if refusal:
            parser.error(refusal)
    per_size = [measure_size(int(size), args, sources) for size in args.records.split(",")]
    described = [{"source": source, **_git(Path(source))} for source in sources]
    report: dict[str, Any] = {"python_version": platform.python_version(), "cpus": os.cpu_count()}
    if len(sources) == 1:
        report["commit"] = described[0].get("commit", "")
    report.update(runs=args.runs, window_s=args.window, ttl_s=args.ttl)
    if len(sources) == 1:
        report["source"] = sources[0]
        report["sizes"] = [measured[0] for measured in per_size]
    else:
        report["sources"] = [
            {**source, "sizes": [measured[i] for measured in per_size]} for i, source in enumerate(described)
        ]
        report["sizes"] = [
            {
                "records": measured[0]["records"],
                "ratios_to_first": [
                    {**source, **ratios_to_first(measured[0], measured[i])}
                    for i, source in enumerate(described)
                    if i > 0
                ],
            }
            for measured in per_size
        ]
    if not args.no_etcd:
        report["etcd"] = etcd_watches(args.watches)
        if args.etcd_records > 0:
            report["etcd_scale"] = etcd_scale(args)
    report["load_average_after"] = [round(value, 2) for value in os.getloadavg()]
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    sys.stderr.write(table(report) + "\n")


if __name__ == "__main__":
    main()
