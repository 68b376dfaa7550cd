"""``kill -9`` of a worker on a file store → ``Removed`` of its records at every watcher, printed as JSON.

    .venv/bin/python -m benchmarks.kill_removed [--trials 5] [--records 5] [--watchers 3]
        [--where tmp|shm|DIR] [--observer inotify|polling] [--reference]

Run from the repository root. Each trial, in a new store under ``--where`` (``tmp``: the system's
temporary directory, a disk here; ``shm``: ``/dev/shm``, a tmpfs): a worker process
(``testrigs/file_peer.py``) registers ``--records`` endpoints; ``--watchers`` clients of this
process watch the endpoints (the first an ordinary client, which sweeps dead records as a
frontend's does; the others read-only, which only report them Removed; each with its own notifier
and rescans, as separate processes would); once every watcher lists them all, the worker is
killed (SIGKILL). The figure is the time from the kill to the moment each watcher has handed out
``Removed`` of every record of the worker: one sample per watcher and trial (``removed_ms``: count, p50, p99, max).

With ``--reference`` a reference-runtime watcher (``testrigs/reference.py``, ai-dynamo-runtime
1.6.1, in a loopback-only network namespace when the machine allows) watches the worker's first
endpoint too: ``reference_removed_ms`` is the time from the kill until its client no longer lists
the worker (polled every 0.2 ms by the peer, on the same monotonic clock).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from discovery_sync.backends.file.options import DEFAULT_TTL
from discovery_sync.tools.stats import summary

import discovery_sync as ds
from testrigs.file_peer import Peer

WAIT = 60.0  # seconds a trial waits for anything before it counts as failed


def _store_parent(where: str) -> str | None:
    if where == "tmp":
        return None
    if where == "shm":
        return "/dev/shm"
    return where


class _Watcher:
    """A client watching the endpoints (``read_only`` or not); ``removed_at`` once every id of
    ``ids`` was removed."""

    def __init__(self, url: str, observer: str, *, read_only: bool) -> None:
        self.client = ds.connect(url, read_only=read_only, observer=observer)
        self.watch = self.client.list_and_watch(ds.Query.endpoints("ns", "peer"))
        self.known: set[ds.DiscoveryInstanceId] = set()
        self.gone: set[ds.DiscoveryInstanceId] = set()
        self.removed_at: float | None = None
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, name="bench-watcher", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(ds.WatchClosed, ds.WatchFailed):
            for event in self.watch:
                now = time.monotonic()
                with self.changed:
                    if isinstance(event, ds.Added):
                        self.known.add(event.instance.id())
                    elif isinstance(event, ds.Resync):
                        self.known = {i.id() for i in event.instances}
                    elif isinstance(event, ds.Removed):
                        self.gone.add(event.id)
                        if self.known and self.known <= self.gone and self.removed_at is None:
                            self.removed_at = now
                    self.changed.notify_all()

    def wait(self, predicate: Any) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, WAIT)

    def close(self) -> None:
        self.watch.close()
        self.client.shutdown()


def _trial(args: argparse.Namespace) -> dict[str, Any]:
    """One trial: the kill → Removed times of every watcher (ms), and the reference's."""
    root = Path(tempfile.mkdtemp(prefix="bench-kill-", dir=_store_parent(args.where)))
    url = f"file://{root / 'store'}"
    peer = Peer(url, args.records)
    watchers = [_Watcher(url, args.observer, read_only=index > 0) for index in range(args.watchers)]
    reference = None
    try:
        for watcher in watchers:
            if not watcher.wait(lambda w=watcher: len(w.known) == args.records):
                raise RuntimeError("a watcher never saw the worker's records")
        worker_id = peer.info["instance_id"]
        if args.reference:
            from testrigs.reference import RustPeer

            reference = RustPeer("file", {"DYN_FILE_KV": str(root / "store")}, isolate=True)
            reference.call("wait_ids", endpoint="ns.peer.ep0", present=[worker_id], timeout=WAIT)
            reference.send("wait_ids", endpoint="ns.peer.ep0", absent=[worker_id], timeout=WAIT)
        killed = time.monotonic()
        peer.kill()
        times = []
        for watcher in watchers:
            watcher.wait(lambda w=watcher: w.removed_at is not None)
            times.append(None if watcher.removed_at is None else (watcher.removed_at - killed) * 1000)
        result: dict[str, Any] = {"removed_ms": times}
        if reference is not None:
            reply = reference.receive("wait_ids", timeout=WAIT + 5)
            result["reference_ms"] = (reply["at_ns"] / 1e9 - killed) * 1000 if reply["seen"] else None
        return result
    finally:
        for watcher in watchers:
            watcher.close()
        if reference is not None:
            reference.kill()
        with contextlib.suppress(Exception):
            peer.kill()
        shutil.rmtree(root, ignore_errors=True)


def _figures(values: list[float | None]) -> dict[str, Any]:
    seen = [v for v in values if v is not None]
    figures: dict[str, Any] = summary(seen) if seen else {"count": 0}
    figures["never"] = len(values) - len(seen)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--records", type=int, default=5)
    parser.add_argument("--watchers", type=int, default=3)
    parser.add_argument("--where", default="tmp", help="tmp (disk), shm (tmpfs) or a directory")
    parser.add_argument("--observer", default="inotify", choices=["inotify", "polling"])
    parser.add_argument("--reference", action="store_true", help="a reference-runtime watcher too")
    args = parser.parse_args(argv)
    runs = [_trial(args) for _ in range(args.trials)]
    result: dict[str, Any] = {
        "store": "file",
        "where": args.where,
        "observer": args.observer,
        "trials": args.trials,
        "records": args.records,
        "watchers": args.watchers,
        "ttl_s": DEFAULT_TTL,  # every client of the trial uses the default
        "removed_ms": _figures([t for run in runs for t in run["removed_ms"]]),
    }
    if args.reference:
        result["reference_removed_ms"] = _figures([run["reference_ms"] for run in runs])
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
