"""The file store shared by two hosts: writers and watchers in separate processes, each process
on one of the rig's two sshfs mounts (``mount_a``: caches off; ``mount_b``: sshfs defaults).

Timings go to the junit report (``record_property``).
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.sshfs import SshfsRig
from tests.netfs.agents import NAMESPACE, Agent, WatchLog

# What mount B's default caches may hide of another host's change: sshfs keeps listings and
# attributes 20 s (dcache_timeout), the kernel 1 s more (attr_timeout, entry_timeout).
SSHFS_DCACHE = 20.0
CACHE_WINDOW_B = SSHFS_DCACHE + 1.0
CACHE_WINDOW_A = 0.0  # dir_cache=no,attr_timeout=0,entry_timeout=0
START_TIMEOUT = 30.0  # a process imports, connects and lists


@dataclass
class Hosts:
    """One test's store, as the server and the two hosts see it."""

    export: Path
    a: Path
    b: Path

    def url(self, host: str, **options: object) -> str:
        root = {"a": self.a, "b": self.b}[host]
        return f"file://{root}?mode=shared&" + "&".join(f"{k}={v}" for k, v in options.items())


@pytest.fixture
def hosts(sshfs_rig: SshfsRig) -> Hosts:
    name = f"store-{uuid.uuid4().hex[:12]}"
    (sshfs_rig.export_dir / name).mkdir()
    return Hosts(sshfs_rig.export_dir / name, sshfs_rig.mount_a / name, sshfs_rig.mount_b / name)


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    """Agent processes started by a test; any still running are killed at teardown."""
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.ensure_dead()


def start(agents: list[Agent], name: str, *args: str) -> Agent:
    agent = Agent(name, *args)
    agents.append(agent)
    return agent


def bucket_files(export: Path) -> list[Path]:
    return [path for bucket in (export / "v1").iterdir() for path in bucket.iterdir()]


def store_files(export: Path) -> dict[str, list[Path]]:
    """The files of every bucket on the server: records, files sshfs hid, anything else.

    libfuse renames a file unlinked while its mount has it open to ``.fuse_hidden*`` and deletes
    it on the last close; with several processes reading and unregistering through one mount
    that delete is sometimes lost (no process holds the file any more), and the hidden copy of a
    removed record stays. Readers skip dot files and sweep these once unchanged for their TTL plus
    cache window (reference workers after 10 s).
    """
    found: dict[str, list[Path]] = {"records": [], "hidden": [], "other": []}
    for path in bucket_files(export):
        kind = "hidden" if path.name.startswith(".fuse_hidden") else "other" if path.name.startswith(".") else "records"
        found[kind].append(path)
    return found


# -- clock skew ----------------------------------------------------------------------------------
SKEW_TTL = 3.0
SKEW_HEARTBEAT = 1.0  # max(min(ttl, 10) / 3, 0.25)
SKEW_RESCAN = 0.5
SKEW_POLL = 0.2


@pytest.mark.slow
@pytest.mark.parametrize("skew", [-60.0, 60.0], ids=["past", "future"])
def test_a_writer_with_a_skewed_clock_lives_and_dies_by_the_watchers_clock(hosts, agents, skew, record_property):
    """A writer on B whose heartbeats set mtimes 60 s in the past (the reference's own sweeper
    would delete its records at once) or in the future (it would never delete them) stays alive
    for watchers on A for 5 x TTL, and its records go within TTL + rescan + cache window of
    ``kill -9``."""
    options = {"ttl": SKEW_TTL, "rescan_interval": SKEW_RESCAN, "poll_interval": SKEW_POLL}
    watchers = [WatchLog(start(agents, f"watch-a{i}", "watch", hosts.url("a", **options), "skew")) for i in range(2)]
    for watcher in watchers:
        assert watcher.established(START_TIMEOUT) == set()
    writer = start(agents, "writer-b", "hold", hosts.url("b", **options), "skew", "3", "--skew", str(skew))
    paths = set(writer.next(START_TIMEOUT)["paths"])
    assert len(paths) == 3
    for watcher in watchers:
        assert watcher.until(lambda w=watcher: w.state == paths, timeout=SKEW_POLL + SKEW_RESCAN + 5), watcher.events

    # the store holds the skewed mtimes (SFTP carries whole seconds)
    files = store_files(hosts.export)["records"]
    assert len(files) == 3

    def skewed() -> bool:
        return all(abs(f.stat().st_mtime - (time.time() + skew)) < 5 for f in files)

    deadline = time.monotonic() + 3 * SKEW_HEARTBEAT + 5
    while not skewed():
        assert time.monotonic() < deadline, [f.stat().st_mtime - time.time() for f in files]
        time.sleep(0.05)  # polling the server's files: nothing notifies of a touch

    # alive for 5 x TTL on the watchers' clocks: no event at all
    alive_until = time.monotonic() + 5 * SKEW_TTL
    for watcher in watchers:
        assert watcher.quiet(alive_until - time.monotonic()) == []
    with ds.connect(hosts.url("a", **options)) as reader:
        assert {e.id().to_path() for e in reader.list(ds.Query.endpoints(NAMESPACE, "skew"))} == paths

    killed = writer.kill()
    bound = SKEW_TTL + SKEW_RESCAN + SKEW_POLL + CACHE_WINDOW_A
    latencies = []
    for watcher in watchers:
        assert watcher.until(lambda w=watcher: w.state == set(), timeout=bound + 5), watcher.events
        removed = watcher.removed()
        assert {path for path, _ in removed} == paths, removed
        latencies += [t - killed for _, t in removed]
    record_property("removed_after_kill_s", [round(x, 2) for x in sorted(latencies)])
    # not before the last heartbeat's mtime went stale on the watcher's clock, and within the bound
    assert min(latencies) > SKEW_TTL - SKEW_HEARTBEAT - 0.5, latencies
    assert max(latencies) < bound + 1.5, latencies
    assert store_files(hosts.export)["records"] == []


# -- stress ----------------------------------------------------------------------------------------
WRITERS_PER_HOST = 4
ROUNDS = 100
KEEP_EVERY = 10  # each writer keeps e9, e19, ..., e99
LAG = 5  # each other record is unregistered once five newer ones are held
PACE = 0.05
STRESS_POLL = 0.25
STRESS_RESCAN = 1.0


STRESS_TTL = 3.0  # far shorter than B's cache window: readers there must allow for it
#: seconds a hidden copy may stay: a few rounds of A's sweep (TTL plus a rescan each)
SWEPT_WITHIN = 4 * (STRESS_TTL + STRESS_RESCAN)


@pytest.mark.slow
def test_four_writers_per_host_lose_nothing_tear_nothing_and_no_live_record_is_removed(hosts, agents, record_property):
    """4 writer processes on each host register 100 endpoints each and unregister 90 of them;
    a watcher process on each host records every event. Both hosts end with the kept set, every
    file parses, and no watcher ever reports a record removed while its writer still held it —
    also after the kept records have lived longer than TTL + B's cache window. The TTL (3 s) is
    far below B's cache window (21 s): a reader there judges records dead only after both."""
    ttl = STRESS_TTL
    with ds.connect(hosts.url("b", ttl=ttl)) as probe:
        assert probe.dead_after == ttl + CACHE_WINDOW_B
    options = {"ttl": ttl, "rescan_interval": STRESS_RESCAN, "poll_interval": STRESS_POLL}
    watchers = {
        host: WatchLog(start(agents, f"watch-{host}", "watch", hosts.url(host, **options), "stress")) for host in "ab"
    }
    for watcher in watchers.values():
        assert watcher.established(START_TIMEOUT) == set()
    began = time.monotonic()
    writers = [
        start(
            agents,
            f"churn-{host}{i}",
            *("churn", hosts.url(host, **options), "stress", f"{host}{i}-e", str(ROUNDS), str(KEEP_EVERY)),
            *("--lag", str(LAG), "--pace", str(PACE)),
        )
        for host in "ab"
        for i in range(WRITERS_PER_HOST)
    ]
    registered: dict[str, float] = {}  # path -> when its register() returned
    unregistering: dict[str, float] = {}  # path -> when its unregister() was called
    expected: set[str] = set()
    for writer in writers:
        while (line := writer.next(START_TIMEOUT + ROUNDS * (PACE + 1)))["op"] != "done":
            if line["op"] == "registered":
                registered[line["path"]] = line["t"]
            elif line["op"] == "unregistering":
                unregistering[line["path"]] = line["t"]
        expected |= set(line["kept"])
    churned = time.monotonic()
    record_property("fuse_hidden_after_churn", len(store_files(hosts.export)["hidden"]))
    assert len(registered) == 2 * WRITERS_PER_HOST * ROUNDS
    assert len(expected) == 2 * WRITERS_PER_HOST * ROUNDS // KEEP_EVERY
    assert set(unregistering) == set(registered) - expected

    # both hosts converge on the kept set: A at once, B within its cache window
    window = {"a": CACHE_WINDOW_A, "b": CACHE_WINDOW_B}
    settled = {}
    for host, watcher in watchers.items():
        converged = watcher.until(lambda w=watcher: w.state == expected, window[host] + STRESS_RESCAN + 10)
        assert converged, (host, sorted(expected - watcher.state), sorted(watcher.state - expected))
        settled[host] = round(time.monotonic() - churned, 2)
    for host in "ab":  # and a new client on each host lists it
        with ds.connect(hosts.url(host, **options)) as reader:
            deadline = time.monotonic() + window[host] + 5
            while (
                listed := {e.id().to_path() for e in reader.list(ds.Query.endpoints(NAMESPACE, "stress"))}
            ) != expected:
                assert time.monotonic() < deadline, (host, sorted(expected - listed), sorted(listed - expected))
                time.sleep(0.1)  # polling: B's caches give no notice when they expire

    # every kept record stays for as long as a reader on B could misjudge it dead, and longer
    hold_until = max(registered[p] for p in expected) + CACHE_WINDOW_B + ttl + STRESS_RESCAN + 2
    for host, watcher in watchers.items():
        deviated = watcher.until(lambda w=watcher: w.state != expected, hold_until - time.monotonic())
        assert not deviated, (host, sorted(expected - watcher.state), sorted(watcher.state - expected))

    # no watcher reported a record removed before its writer let it go
    for host, watcher in watchers.items():
        removed = watcher.removed()
        early = [(p, t - began) for p, t in removed if t < unregistering.get(p, float("inf"))]
        assert early == [], (host, early)
        record_property(f"removed_seen_{host}", len(removed))
        twice = [path for path, count in collections.Counter(p for p, _ in removed).items() if count > 1]
        assert twice == [], (host, twice)  # no record flapped (removed, seen again, removed)
        record_property(f"resyncs_{host}", watcher.resyncs)
    for writer in writers:
        assert "while this client is alive" not in writer.log(), writer.log()
    # no torn file, no temp file left behind, and the copies sshfs hid were swept by the readers: a
    # sweep re-opens a file right before unlinking it, and libfuse hides a file unlinked before the
    # kernel's (asynchronous) release of that open reached it, so a sweep may leave one more hidden
    # copy, itself swept once unchanged for A's TTL (a full run saw one left at this point)
    deadline = time.monotonic() + SWEPT_WITHIN
    while (files := store_files(hosts.export))["hidden"]:
        assert time.monotonic() < deadline, files["hidden"]
        time.sleep(0.2)  # polling: the server's directory gives no notice
    assert files["other"] == []
    assert sorted(ds.instance_from_json(f.read_bytes()).id().to_path() for f in files["records"]) == sorted(expected)

    for agent in agents:
        assert agent.stop() == 0, agent.log()
    assert store_files(hosts.export)["records"] == []
    record_property("ttl_s", ttl)
    record_property("churn_s", round(churned - began, 2))
    record_property("settled_after_churn_s", settled)
    record_property("total_s", round(time.monotonic() - began, 2))


# -- a frozen file server ------------------------------------------------------------------------
FREEZE = 30.0
# far shorter than the freeze (on B too: 6 + its 21 s window < 30): every record looks dead by the
# clock after it. After A thaws, B's record shows its next heartbeat within the 1.5 s stagger plus
# one heartbeat (2 s), well inside the TTL even on a loaded machine; with TTL 3 that margin was
# 0.5 s, and a run beside two other test workers saw a false Removed on A
FREEZE_TTL = 6.0


@pytest.mark.slow
def test_a_frozen_file_server_makes_no_client_remove_or_report_removed_a_live_record(sshfs_rig, hosts, agents):
    """The server stops answering for 30 s (SIGSTOP of its SFTP sessions) while writers and
    watchers on both mounts run: every call that needs the server waits, the cached ones answer.
    It answers mount A first and mount B 1.5 s later, so A's clients read B's files before B's
    writer could touch them again. No record is removed from the store, no watcher reports one
    Removed, and each ends in the true state (docs/design.md §6, "A store that stalls")."""
    options = {"ttl": FREEZE_TTL, "rescan_interval": SKEW_RESCAN, "poll_interval": SKEW_POLL}
    watchers = [WatchLog(start(agents, f"watch-{h}", "watch", hosts.url(h, **options), "frozen")) for h in "ab"]
    for watcher in watchers:
        assert watcher.established(START_TIMEOUT) == set()
    holders = [start(agents, f"hold-{h}", "hold", hosts.url(h, **options), "frozen", "2") for h in "ab"]
    paths = {path for holder in holders for path in holder.next(START_TIMEOUT)["paths"]}
    for watcher in watchers:
        assert watcher.until(lambda w=watcher: w.state == paths, CACHE_WINDOW_B + 10), watcher.events
    with sshfs_rig.frozen(first=sshfs_rig.session_of_mount_a(), stagger=1.5):
        for watcher in watchers:
            watcher.quiet(FREEZE / len(watchers))
    # once thawed, each record has a full TTL (plus the cache window on B) to show a heartbeat
    for watcher in watchers:
        watcher.quiet(FREEZE_TTL + CACHE_WINDOW_B + 3 * SKEW_RESCAN + 2)
    for watcher in watchers:
        assert watcher.removed() == [], (watcher.agent.name, watcher.events, watcher.agent.log())
        assert watcher.state == paths
    assert {path.name for path in store_files(hosts.export)["records"]} == {path.replace("/", "%2F") for path in paths}
    for holder in holders:
        assert holder.process.poll() is None, holder.log()
