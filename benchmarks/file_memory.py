"""Memory of a file-store reader, printed as one JSON object.

    .venv/bin/python -m benchmarks.file_memory [--records 10000] [--huge-gib 1] [--python PATH] [--source DIR]

Run from the repository root. Every measurement runs in a reader process of its own, so that
peaks do not mix; the stores are written straight into ``v1/instances`` (the way another process
would, as ``tests/file/junk.py::hand_written`` does) in a temporary directory under /tmp, by a
process of the library being measured. No record dies meanwhile: readers connect with ttl=3600.

* ``huge_file``: a few endpoint records plus one sparse file of ``--huge-gib`` GiB (``os.truncate``:
  no disk used) under a valid record name. The reader connects, calls ``list()``, opens a watch and
  takes its initial events, then calls ``rescan()`` twice. Reported: its RSS before connecting, its
  peak (``ru_maxrss``, and ``VmHWM``: the high-water mark of its own address space only, which a
  ``ru_maxrss`` inherited through ``vfork``/``exec`` cannot raise), its RSS after, the bytes it read
  (``rchar`` of ``/proc/self/io``), how many records ``list()`` returned, whether it skipped the
  file (read less of it than its size) and the warnings it logged about it.
* ``records``: ``--records`` endpoint records. The reader's RSS before connecting, after ``list()``
  (its result dropped) and after opening a watch and receiving its initial Resync (the events
  dropped): RSS per record, in bytes, for list-only and with a watch.

The readers use only ``ds.connect``, ``list``, ``list_and_watch`` and ``rescan``, so an older
checkout of the library can be measured as well: ``--python`` runs the readers (and the store
writers) with another interpreter, ``--source`` puts a checkout first on their ``PYTHONPATH``
(its ``backends/`` and ``tools/`` mapped to ``discovery_sync.backends`` and ``.tools``, as
setup.cfg's ``package_dir`` does). ``--source`` defaults to this repository, unless ``--python``
is given: then the readers import the library that interpreter has installed. For example::

    git worktree add /tmp/ds-before 2277f9f
    python3 -m venv /tmp/ds-before-venv && /tmp/ds-before-venv/bin/pip install -q -e /tmp/ds-before
    .venv/bin/python -m benchmarks.file_memory --python /tmp/ds-before-venv/bin/python --source /tmp/ds-before

This module imports nothing but the standard library at the top: the readers run this very file
under the interpreter measured.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
TTL = 3600  # no record dies during a measurement
HUGE_NAME = "ns%2Fbackend%2Fhuge%2F1"  # a valid record name
HUGE_NEIGHBOURS = 3  # normal records beside the huge file
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


# -- what a process measures of itself -------------------------------------------------------------
def rss_kib() -> int:
    """This process's resident set now (``/proc/self/statm``), in KiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_KIB


def peaks_kib() -> dict[str, int]:
    """``ru_maxrss`` (KiB on Linux) and ``VmHWM`` (the peak of this address space only)."""
    hwm = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return {"ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vm_hwm_kib": hwm}


def bytes_read() -> int:
    """Bytes this process has read through read-like system calls (``rchar``)."""
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def settled_rss_kib() -> int:
    gc.collect()
    return rss_kib()


# -- the child processes ---------------------------------------------------------------------------
class _Checkout:
    """Imports ``discovery_sync`` from a source checkout: setup.cfg's ``package_dir`` mapping, ahead
    of any installed (editable) copy, so that no subpackage comes from another version."""

    def __init__(self, source: Path) -> None:
        self.packages = {
            "discovery_sync": source / "discovery_sync",
            "discovery_sync.backends": source / "backends",
            "discovery_sync.tools": source / "tools",
        }

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        directory = self.packages.get(fullname)
        if directory is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, directory / "__init__.py", submodule_search_locations=[str(directory)]
        )


def _import_library(source: str) -> Any:
    """``discovery_sync`` from ``source`` ("-": the installed one), checked to be one version."""
    if source != "-":
        sys.meta_path.insert(0, _Checkout(Path(source)))
    import discovery_sync as ds

    file_backend = importlib.import_module("discovery_sync.backends.file")
    roots = {Path(ds.__file__).resolve().parent.parent, Path(file_backend.__file__).resolve().parent.parent.parent}
    if len(roots) != 1:
        raise RuntimeError(f"discovery_sync and its file backend come from different checkouts: {roots}")
    return ds


def _library(ds: Any) -> dict[str, str]:
    file_backend = importlib.import_module("discovery_sync.backends.file")
    return {"discovery_sync": str(Path(ds.__file__).resolve()), "file_backend": str(Path(file_backend.__file__))}


class _Warnings(logging.Handler):
    """Keeps the messages logged (and keeps them off stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def populate(store: Path, records: int, source: str) -> None:
    """Writes ``records`` endpoint records straight into ``store``, as another process would."""
    ds = _import_library(source)
    bucket = store / "v1" / "instances"
    bucket.mkdir(parents=True, exist_ok=True)
    for i in range(records):
        instance_id = 0x1000 + i
        record = ds.Endpoint("ns", "backend", f"ep{i}", instance_id, ds.Transport.tcp("127.0.0.1:1"))
        (bucket / f"ns%2Fbackend%2Fep{i}%2F{instance_id:x}").write_bytes(ds.instance_to_json(record))


def _initial_state(watch: Any, ds: Any) -> int:
    """Consumes a watch's initial events up to its first Resync; the number of records in it."""
    while True:
        event = watch.get(timeout=600)
        if isinstance(event, ds.Resync):
            return len(event.instances)


def read_huge(store: Path, source: str) -> dict[str, Any]:
    ds = _import_library(source)
    warnings = _Warnings()
    logging.getLogger().addHandler(warnings)
    size = (store / "v1" / "instances" / HUGE_NAME).stat().st_size
    before, read_before = settled_rss_kib(), bytes_read()
    start = time.perf_counter()
    client = ds.connect(f"file://{store}?ttl={TTL}")
    try:
        listed = len(client.list(ds.Query.endpoints()))
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            in_resync = _initial_state(watch, ds)
            client.rescan()
            client.rescan()
            seconds = time.perf_counter() - start
            after, read = settled_rss_kib(), bytes_read() - read_before
            peaks = peaks_kib()
    finally:
        client.shutdown()
    about_it = [message[:300] for message in warnings.messages if "huge" in message]
    return {
        "library": _library(ds),
        "file_bytes": size,
        "rss_before_connect_kib": before,
        **{f"peak_{name}": value for name, value in peaks.items()},
        "rss_after_kib": after,
        "bytes_read": read,
        "listed": listed,
        "in_initial_resync": in_resync,
        "skipped_file": read < size,
        "warnings_about_file": about_it,
        "warnings_total": len(warnings.messages),
        "seconds": round(seconds, 2),
    }


def read_records(store: Path, records: int, source: str) -> dict[str, Any]:
    ds = _import_library(source)
    warnings = _Warnings()
    logging.getLogger().addHandler(warnings)
    before = settled_rss_kib()
    client = ds.connect(f"file://{store}?ttl={TTL}")
    try:
        listed = client.list(ds.Query.endpoints())
        count = len(listed)
        del listed
        after_list = settled_rss_kib()
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            in_resync = _initial_state(watch, ds)
            after_watch = settled_rss_kib()
            peaks = peaks_kib()
    finally:
        client.shutdown()
    if count != records or in_resync != records:
        raise RuntimeError(f"the reader saw {count} records (its watch {in_resync}) of {records}: {warnings.messages}")

    def per_record(rss: int) -> float:
        return round((rss - before) * 1024 / records, 1)

    return {
        "library": _library(ds),
        "records": records,
        "rss_before_connect_kib": before,
        "rss_after_list_kib": after_list,
        "rss_after_watch_resync_kib": after_watch,
        **{f"peak_{name}": value for name, value in peaks.items()},
        "bytes_per_record_list": per_record(after_list),
        "bytes_per_record_with_watch": per_record(after_watch),
        "warnings_total": len(warnings.messages),
    }


def child(argv: list[str]) -> None:
    """``file_memory.py populate|read-huge|read-records STORE [N] SOURCE``: one JSON line out."""
    role, store = argv[0], Path(argv[1])
    if role == "populate":
        populate(store, int(argv[2]), argv[3])
        result: dict[str, Any] = {}
    elif role == "read-huge":
        result = read_huge(store, argv[2])
    elif role == "read-records":
        result = read_records(store, int(argv[2]), argv[3])
    else:
        raise SystemExit(f"unknown role {role!r}")
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


# -- the parent: writes nothing but the sparse file, spawns the others -----------------------------
class Runner:
    """Runs this file under the interpreter measured, with ``source`` ("-": the installed library)."""

    def __init__(self, python: str, source: str) -> None:
        self.python = python
        self.source = source

    def __call__(self, *args: str, cwd: Path) -> dict[str, Any]:
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if self.source != "-":
            env["PYTHONPATH"] = self.source
        done = subprocess.run(
            [self.python, str(Path(__file__).resolve()), *args, self.source],
            cwd=cwd,  # not the repository: its discovery_sync would come first on sys.path
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        return json.loads(done.stdout.splitlines()[-1])


def bench_huge(run: Runner, huge_gib: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ds-memory-huge-") as tmp:
        store = Path(tmp) / "store"
        run("populate", str(store), str(HUGE_NEIGHBOURS), cwd=Path(tmp))
        with open(store / "v1" / "instances" / HUGE_NAME, "xb") as huge:
            huge.truncate(int(huge_gib * 2**30))  # sparse: no disk used
        measured = run("read-huge", str(store), cwd=Path(tmp))
        return {"records_beside": HUGE_NEIGHBOURS, "file_name": HUGE_NAME, **measured}


def bench_records(run: Runner, records: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ds-memory-records-") as tmp:
        store = Path(tmp) / "store"
        run("populate", str(store), str(records), cwd=Path(tmp))
        return run("read-records", str(store), str(records), cwd=Path(tmp))


def _git(directory: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return {}
    return {"commit": commit, "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no"))}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in ("populate", "read-huge", "read-records"):
        child(argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000, help="records of the records measurement")
    parser.add_argument("--huge-gib", type=float, default=1.0, help="size of the huge (sparse) file, GiB")
    parser.add_argument("--python", help="interpreter of the readers (default: this one)")
    parser.add_argument(
        "--source",
        help="library checkout put first on the readers' PYTHONPATH (default: this repository, "
        "or with --python the library that interpreter has installed)",
    )
    args = parser.parse_args(argv)
    python = os.path.abspath(args.python) if args.python else sys.executable  # the readers run elsewhere
    default = "-" if args.python else str(REPOSITORY)
    source = str(Path(args.source).resolve()) if args.source else default
    run = Runner(python, source)
    huge = bench_huge(run, args.huge_gib)
    records = bench_records(run, args.records)
    library = huge.pop("library")
    records.pop("library")
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    result = {
        "python": python,
        "python_version": version,
        "library": {**library, **_git(Path(library["discovery_sync"]).parent.parent)},
        "ttl_s": TTL,
        "huge_file": huge,
        "records": records,
    }
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
