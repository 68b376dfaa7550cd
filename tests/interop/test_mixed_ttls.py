"""Clients with TTLs of 1, 3, 10 and 30 s and a reference-runtime worker share one file store for
35 s (longer than the longest TTL, three of the reference's): nobody removes, or reports Removed,
a record whose writer is alive, and every client's ``list()`` holds every record all the time
(docs/design.md §6, "Mixed TTLs").

Every holder and watcher is a process of its own (``tests/netfs/agents.py``); the listing
clients run in this process, one per TTL. Before the fix (every reader judged every record by
its own TTL; ``uniform_ttl=true`` still does) the TTL-1 clients swept the others' records after
each of their heartbeats: ``python -m tests.interop.test_mixed_ttls`` prints the counts of both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.reference import RustPeer
from tests.netfs.agents import NAMESPACE, Agent

TTLS = (1, 3, 10, 30)
DURATION = 35.0  # was 120 s; the old rule (--uniform-ttl) shows its false Removed within 5 s
COMPONENT = "mixed"
START_TIMEOUT = 30.0
CHECK_EVERY = 0.5


@dataclass
class Tally:
    false_removed: list[str] = field(default_factory=list)  # "agent: path"
    missing: list[str] = field(default_factory=list)  # "ttl N: path" per check that missed it
    checks: int = 0


def _url(store: Path, ttl: float, uniform: bool) -> str:
    return f"file://{store}?ttl={ttl:g}" + ("&uniform_ttl=true" if uniform else "")


def run_mixed_store(
    store: Path, start_reference: Callable[[], RustPeer], duration: float, *, uniform: bool = False
) -> Tally:
    """Holders, watchers and listing clients with every TTL of ``TTLS`` and one reference worker on
    ``store`` for ``duration`` seconds; what went wrong meanwhile."""
    tally = Tally()
    with contextlib.ExitStack() as stack:
        agents: list[Agent] = []
        stack.callback(lambda: [agent.ensure_dead() for agent in agents])
        expected: set[str] = set()
        for ttl in TTLS:
            holder = Agent(f"hold-ttl{ttl}", "hold", _url(store, ttl, uniform), COMPONENT, "1")
            agents.append(holder)
            expected.update(holder.next(START_TIMEOUT)["paths"])
        peer = start_reference()
        instance_id = peer.call("serve", endpoint=f"{NAMESPACE}.{COMPONENT}.reference")["instance_id"]
        expected.add(f"{NAMESPACE}/{COMPONENT}/reference/{instance_id:x}")
        watchers = [Agent(f"watch-ttl{ttl}", "watch", _url(store, ttl, uniform), COMPONENT) for ttl in TTLS]
        agents.extend(watchers)
        listers = {ttl: stack.enter_context(ds.connect(_url(store, ttl, uniform))) for ttl in TTLS}
        query = ds.Query.endpoints(NAMESPACE, COMPONENT)
        for watcher in watchers:  # each starts from the full set
            while (line := watcher.next(START_TIMEOUT)).get("event") != "Resync" or set(line["paths"]) != expected:
                pass
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            for watcher in watchers:
                while (line := watcher.poll(0 if watcher is not watchers[0] else CHECK_EVERY)) is not None:
                    if line.get("event") == "Removed":
                        tally.false_removed.append(f"{watcher.name}: {line['path']}")
            for ttl, client in listers.items():
                listed = {record.id().to_path() for record in client.list(query)}
                tally.missing += [f"ttl {ttl}: {path}" for path in sorted(expected - listed)]
            tally.checks += 1
        peer.shutdown()
    return tally


@pytest.mark.slow
@pytest.mark.timeout(DURATION + 120)
def test_clients_with_different_ttls_never_remove_each_others_live_records(file_store, rust_peer, record_property):
    tally = run_mixed_store(file_store, rust_peer, DURATION)
    record_property("checks", tally.checks)
    assert tally.checks > DURATION / CHECK_EVERY / 2
    assert tally.false_removed == []
    assert tally.missing == []


def main() -> None:
    parser = argparse.ArgumentParser(description="false Removed and missing records on a mixed-TTL store, as JSON")
    parser.add_argument("--duration", type=float, default=DURATION)
    parser.add_argument("--uniform-ttl", action="store_true", help="every reader judges by its own TTL (the old rule)")
    args = parser.parse_args()
    peers: list[RustPeer] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"

        def start() -> RustPeer:
            peer = RustPeer("file", {"DYN_FILE_KV": str(store)}, isolate=True)
            peers.append(peer)
            return peer

        try:
            tally = run_mixed_store(store, start, args.duration, uniform=args.uniform_ttl)
        finally:
            for peer in peers:
                peer.kill()
    print(
        json.dumps(
            {
                "duration_s": args.duration,
                "uniform_ttl": args.uniform_ttl,
                "checks": tally.checks,
                "false_removed": len(tally.false_removed),
                "missing_from_list": len(tally.missing),
                "missing_by_reader": {t: sum(m.startswith(f"ttl {t}:") for m in tally.missing) for t in TTLS},
            }
        )
    )


if __name__ == "__main__":
    main()
