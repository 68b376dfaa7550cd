"""Failover of a cohort on the file store, printed as one JSON object.

    .venv/bin/python -m benchmarks.failover [--rounds 5] [--options '&mode=shared'] [--stale-after 10]

Run from the repository root. Each round, in a new store: a primary and a standby
(``testrigs/cohort_worker.py``, one process each) share a logical instance id and the failover lock
``engine``; the primary holds it and has registered an endpoint and a model card; this process
watches the endpoints, read-only, as a router would. Then ``kill -9`` of the primary:

* ``cohort``: the time from the kill to the watcher's ``Added`` of the endpoint with the
  standby's transport (the worker's address moves in place; it never leaves);
* ``plain`` (the comparison: the same two workers without a logical id, each with an id of its
  own): the time from the kill to the watcher's ``Added`` of the standby (a second worker joins)
  and to its ``Removed`` of the dead primary, which routers keep listing until then (the file
  store's TTL, 10 s by default, is how long a dead worker looks alive).

The ratio compares how long routers see a dead address: ``cohort`` over ``plain`` removal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

import discovery_sync as ds

REPOSITORY = Path(__file__).resolve().parent.parent
LOGICAL_ID = 0xFA11


class _Worker:
    def __init__(self, url: str, logical_id: str, port: int, stale_after: float, log: Path) -> None:
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "testrigs.cohort_worker", url, logical_id, str(port), str(stale_after)],
            cwd=REPOSITORY,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )

    def expect(self, event: str) -> dict[str, object]:
        assert self.process.stdout is not None
        got: dict[str, object] = {"event": "state"}
        while got["event"] == "state":  # connection state changes are not timed here
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"a cohort worker exited before {event!r}; see {self._log.name}")
            got = orjson.loads(line)
        if got["event"] != event:
            raise RuntimeError(f"a cohort worker said {got}, not {event!r}")
        return got

    def close(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)
        self._log.close()


def _round(cohort: bool, options: str, stale_after: float, scratch: Path) -> dict[str, float]:
    url = f"file://{scratch / 'store'}?{options.lstrip('&')}"
    logical_id = str(LOGICAL_ID) if cohort else "-"
    primary = _Worker(url, logical_id, 9001, stale_after, scratch / "primary.log")
    standby = None
    try:
        primary.expect("waiting")
        primary_id = primary.expect("registered")["instance_id"]
        standby = _Worker(url, logical_id, 9002, stale_after, scratch / "standby.log")
        standby.expect("waiting")
        with ds.connect(url, read_only=True) as watcher, watcher.list_and_watch(ds.Query.endpoints("ns")) as watch:
            while not isinstance(watch.get(timeout=30), ds.Resync):
                pass
            killed = time.monotonic()
            primary.process.kill()
            times: dict[str, float] = {}
            while len(times) < (1 if cohort else 2):
                event = watch.get(timeout=120)
                now = time.monotonic() - killed
                if isinstance(event, ds.Added) and event.instance.transport.value == "127.0.0.1:9002":
                    times.setdefault("standby_serving_s", now)
                elif isinstance(event, ds.Removed) and event.id.instance_id == primary_id:
                    times.setdefault("dead_primary_removed_s", now)
                elif isinstance(event, ds.Removed):
                    raise RuntimeError(f"unexpected {event}")
        return times
    finally:
        primary.close()
        if standby is not None:
            standby.close()


def run(rounds: int, options: str, stale_after: float) -> dict[str, object]:
    results: dict[str, object] = {}
    for mode, cohort, count in (("cohort", True, rounds), ("plain", False, 1)):
        samples: list[dict[str, float]] = []
        for _ in range(count):
            with tempfile.TemporaryDirectory(prefix="ds-failover-") as scratch:
                samples.append(_round(cohort, options, stale_after, Path(scratch)))
        keys = samples[0].keys()
        results[mode] = {
            key: {
                "median": statistics.median(s[key] for s in samples),
                "min": min(s[key] for s in samples),
                "max": max(s[key] for s in samples),
            }
            for key in keys
        } | {"rounds": count}
    cohort_seen = results["cohort"]["standby_serving_s"]["median"]  # type: ignore[index]
    plain_removed = results["plain"]["dead_primary_removed_s"]["median"]  # type: ignore[index]
    results["dead_address_listed_ratio"] = cohort_seen / plain_removed
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="kill -9 takeovers of a cohort measured")
    parser.add_argument("--options", default="", help="URL options of every client, e.g. '&mode=shared'")
    parser.add_argument("--stale-after", type=float, default=10.0, help="failover lock stale_after, seconds")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    commit = subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result = {
        "python_version": platform.python_version(),
        "commit": commit,
        "options": args.options,
        "stale_after_s": args.stale_after,
        "load_average": os.getloadavg(),
        **run(args.rounds, args.options, args.stale_after),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
