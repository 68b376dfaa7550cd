"""The file store shared by two hosts over sshfs, printed as one JSON object.

    .venv/bin/python -m benchmarks.netfs [--events 300] [--cached-events 200] [--records 10000]

Run from the repository root: the two "hosts" are the test suite's sshfs rig
(``testrigs/sshfs.py``): one export directory mounted twice through a loopback-only sshd,
mount A with sshfs's caches off (``dir_cache=no,attr_timeout=0,entry_timeout=0``, about NFS
``noac``), mount B with sshfs's defaults (listings and attributes cached up to 20 s, about NFS
``actimeo``). Every client is in shared mode (polling observer, soft locks).

* ``delivery``: a writer process on one mount registers endpoints stamped with the send time
  (``discovery_sync.tools.bench_writer``); a watcher in this process on the other mount times
  each ``Added``. Watching through the cache-off mount A (writer on B), then through the default
  mount B (writer on A); the writer spreads its registrations over more than one cache window
  there, so that they arrive at every point of B's cache cycle.
* ``store``: a writer process on mount A registers N endpoints (its rate is ``register_per_second``)
  and is killed with -9 (no heartbeat disturbs the scans); then a new client on each mount times
  a full ``rescan()`` of the N files, cold (first read of every file) and warm (median of 5;
  one ``stat`` per file).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from discovery_sync.tools.bench import delivery_latencies
from discovery_sync.tools.stats import median_timed, summary, timed

import discovery_sync as ds
from testrigs.sshfs import CACHE_OFF, SshfsRig

TTL = 60.0  # no record of the run may die meanwhile (mount B adds its 21 s cache window anyway)
SCAN_TTL = 3600.0  # the scanned records' writer is dead: no rescan may judge them so meanwhile


def _url(root: Path, **options: Any) -> str:
    settings = {"mode": "shared", "ttl": TTL, **options}
    return f"file://{root}?" + "&".join(f"{key}={value}" for key, value in settings.items())


def _store(rig: SshfsRig, label: str) -> tuple[Path, Path]:
    """A new store directory, as mount A and as mount B see it."""
    name = f"{label}-{uuid.uuid4().hex[:8]}"
    (rig.export_dir / name).mkdir()
    return rig.mount_a / name, rig.mount_b / name


def bench_delivery(writer_root: Path, watcher_root: Path, events: int, interval: float, poll: float) -> dict[str, Any]:
    latencies = delivery_latencies(
        _url(writer_root), _url(watcher_root, poll_interval=poll), events, interval, event_timeout=120
    )
    return {
        "poll_interval_s": poll,
        "writer_interval_s": interval,
        **summary(latencies),
    }


def _populate(root: Path, records: int) -> float:
    """Register ``records`` endpoints from a writer process through ``root``, then kill it with -9
    (its records stay: nothing heartbeats them while they are scanned); its registrations per second."""
    writer = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.netfs", "populate", _url(root, ttl=SCAN_TTL), str(records)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = writer.stdout.readline()
        if not line:
            raise RuntimeError(f"the populating writer exited with {writer.wait(10)}")
        return orjson.loads(line)["per_second"]
    finally:
        writer.kill()
        writer.wait(10)


def populate(url: str, records: int) -> None:
    """The populating writer (``python -m benchmarks.netfs populate URL N``)."""
    client = ds.connect(url)
    start = time.perf_counter()
    for i in range(records):
        client.register(ds.EndpointSpec("bench", "rescan", f"e{i}", ds.Transport.tcp(f"127.0.0.1:{i % 65536}")))
    rate = records / (time.perf_counter() - start)
    sys.stdout.write(orjson.dumps({"per_second": round(rate)}).decode() + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until killed


def bench_rescan(rig: SshfsRig, records: int) -> dict[str, Any]:
    a, b = _store(rig, "rescan")
    result: dict[str, Any] = {"records": records, "register_per_second_through_a": _populate(a, records)}
    for host, root in (("a_cache_off", a), ("b_default_caches", b)):
        # the scanner's own periodic rescans are pushed out of the way: only the timed ones run,
        # and none of them deletes the dead writer's records
        with ds.connect(_url(root, ttl=SCAN_TTL, rescan_interval=SCAN_TTL)) as scanner:
            cold = timed(scanner.rescan)
            found = len(scanner.list(ds.Query.endpoints("bench", "rescan")))
            assert found == records, f"{host} sees {found} of {records} records"
            warm = median_timed(scanner.rescan)
            assert len(scanner.list(ds.Query.endpoints("bench", "rescan"))) == records, f"{host} lost records"
        result[host] = {"rescan_cold_ms": round(cold, 1), "rescan_warm_ms": round(warm, 1)}
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["populate"]:
        populate(argv[1], int(argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300, help="registrations timed through mount A")
    parser.add_argument("--cached-events", type=int, default=200, help="registrations timed through mount B")
    parser.add_argument("--records", type=int, default=10_000, help="records of the rescan measurement")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="the watchers' poll interval")
    args = parser.parse_args(argv)
    with SshfsRig() as rig:
        to_a, to_b = _store(rig, "delivery-to-a"), _store(rig, "delivery-to-b")
        result = {
            "backend": "file, shared mode, two sshfs mounts of one directory (loopback sshd)",
            "mount_a": CACHE_OFF,
            "mount_b": "sshfs defaults (dcache_timeout=20, attr_timeout=1, entry_timeout=1)",
            "ttl_s": TTL,
            "delivery": {  # writer on one mount, watcher on the other
                "b_to_a_cache_off": bench_delivery(to_a[1], to_a[0], args.events, 0.01, args.poll_interval),
                "a_to_b_default_caches": bench_delivery(to_b[0], to_b[1], args.cached_events, 0.15, args.poll_interval),
            },
            "store": bench_rescan(rig, args.records),
        }
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
