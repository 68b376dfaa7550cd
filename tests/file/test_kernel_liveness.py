"""Liveness from the kernel on a hard-lock store (docs/design.md §6, "Liveness from the kernel"):
a writer's owner lock, released the instant its process dies, makes its records dead at every
reader at once; while it is held, no mtime can make them dead. Real processes and real
``kill -9``; the readers' clocks are manual and move only where a test says so, so a removal that
comes while they stand still came from the kernel, not from the mtime rule."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from discovery_sync.backends.file.directory import StoreDirectory
from discovery_sync.backends.file.failover import kernel_id
from discovery_sync.backends.file.owner_lock import OwnerState, owner_name, probe_owner

import discovery_sync as ds
from testrigs.file_peer import Peer
from testrigs.helpers import assert_quiet, endpoint_spec, initial_state
from testrigs.waiting import wait_until
from tests.file.clocked import Steps

TTL = 3.0
WAIT = 10.0  # real seconds an event kept waiting would take at most on a loaded machine
RECORDS = 3


def url(store: Path, **options: object) -> str:
    return f"file://{store}?" + "&".join(f"{k}={v}" for k, v in {"ttl": TTL, **options}.items())


def peer_files(store: Path, peer: Peer) -> list[Path]:
    bucket = store / "v1" / "instances"
    return [bucket / name for name in os.listdir(bucket) if name.endswith(f"{peer.info['instance_id']:x}")]


def removed(watch: ds.Watch, count: int) -> set[str]:
    """The paths of the next ``count`` events, each a Removed (waited for in real time)."""
    events = [watch.get(timeout=WAIT) for _ in range(count)]
    assert all(isinstance(event, ds.Removed) for event in events), events
    return {event.id.to_path() for event in events if isinstance(event, ds.Removed)}


@contextlib.contextmanager
def watched_peer(
    reader: ds.Discovery, store: Path, peers: list[Peer], **options: object
) -> Iterator[tuple[Peer, ds.Watch]]:
    """A peer process with RECORDS records, and ``reader``'s watch of them past its first Resync."""
    peer = Peer(url(store, **options), RECORDS)
    peers.append(peer)
    with reader.list_and_watch(ds.Query.endpoints("ns", "peer")) as watch:
        assert len(initial_state(watch)[1].instances) == RECORDS
        yield peer, watch


def wait_rule(reader: ds.Discovery, peer: Peer, rule: str) -> None:
    """Wait until ``reader`` says ``rule`` judges ``peer`` (a probe of its lock has run)."""
    owner = f"{peer.info['instance_id']:016x}"
    wait_until(lambda: reader.status()["liveness"]["owners"].get(owner) == rule, f"{owner} judged by {rule}")


@pytest.fixture
def readers(store: Path, steps: Steps):
    made: list[ds.Discovery] = []

    def connect(**options: object) -> ds.Discovery:
        made.append(ds.connect(url(store, **options), clock=steps.clock))
        return made[-1]

    yield connect
    for client in made:
        client.shutdown()


def test_a_killed_writers_records_are_removed_at_every_reader_while_their_clocks_stand_still(
    store, steps, readers, peers
):
    sweeping, reporting = readers(), readers(read_only="true")
    peer = Peer(url(store), RECORDS)
    peers.append(peer)
    watches = [client.list_and_watch(ds.Query.endpoints("ns", "peer")) for client in (sweeping, reporting)]
    for watch in watches:
        assert len(initial_state(watch)[1].instances) == RECORDS
    stood_at = steps.clock.monotonic()
    peer.kill()
    for watch in watches:
        assert removed(watch, RECORDS) == set(peer.info["paths"])
    assert steps.clock.monotonic() == stood_at  # no TTL passed on any reader's clock
    assert peer_files(store, peer) == []  # swept by the reader that deletes, under the store lock
    owner_file = store / ".locks" / owner_name(peer.info["instance_id"])
    wait_until(lambda: not owner_file.exists(), "the dead owner's file to be removed")
    for watch in watches:
        assert_quiet(watch, 0.2)  # each record Removed once, at each reader
        watch.close()
    assert sweeping.list(ds.Query.endpoints()) == reporting.list(ds.Query.endpoints()) == []


def test_a_live_writers_records_stay_whatever_their_mtimes_say(store, steps, readers, peers):
    """A clock stepped back an hour, a stray touch, mtimes that stand still for ten TTLs of the
    reader: the owner's lock is held, so the records live."""
    reader = readers()
    with watched_peer(reader, store, peers, ttl=30) as (peer, watch):  # it beats every 3.3 s: not during the test
        wait_rule(reader, peer, "kernel: held")
        hour_ago = time.time() - 3600
        for path in peer_files(store, peer):
            os.utime(path, (hour_ago, hour_ago))  # as a writer whose wall clock stepped back
        steps.run(10 * TTL, TTL / 4)
        os.utime(peer_files(store, peer)[0])  # a stray touch: a short "step" after the long one
        steps.run(10 * TTL, TTL / 4)
        assert_quiet(watch, 0)
    assert {e.id().to_path() for e in reader.list(ds.Query.endpoints())} == set(peer.info["paths"])
    assert len(peer_files(store, peer)) == RECORDS


def test_with_the_polling_observer_a_killed_writer_is_removed_at_the_next_poll(store, steps, readers, peers):
    reader = readers(observer="polling", poll_interval=0.5)
    with watched_peer(reader, store, peers) as (peer, watch):
        wait_rule(reader, peer, "kernel: held")
        peer.kill()
        event, _ = steps.until_event(watch, 0.5, 0.5)  # one poll interval of its clock, not a TTL
        assert isinstance(event, ds.Removed)
        assert removed(watch, RECORDS - 1) | {event.id.to_path()} == set(peer.info["paths"])


def test_a_reader_started_after_the_writer_died_removes_its_records_once_it_watches(store, steps, readers, peers):
    peer = Peer(url(store), RECORDS)
    peers.append(peer)
    peer.kill()
    reader = readers()
    with reader.list_and_watch(ds.Query.endpoints("ns", "peer")) as watch:
        assert len(initial_state(watch)[1].instances) == RECORDS  # seen before the first probe of their owner
        assert removed(watch, RECORDS) == set(peer.info["paths"])  # which the watch's start asked for
        assert_quiet(watch, 0)
    assert reader.list(ds.Query.endpoints()) == []
    assert peer_files(store, peer) == []


def test_a_writer_shut_down_removes_its_owner_file_and_its_status_says_which_rule_judges_whom(store, readers):
    writer = readers()
    writer.register(endpoint_spec())
    held = store / ".locks" / owner_name(writer.instance_id)
    assert held.exists()
    liveness = writer.status()["liveness"]
    assert liveness["rule"] == "kernel where an owner holds its lock, else mtime"
    report = writer.diagnose()["liveness"]
    assert report["owners"] == {f"{writer.instance_id:016x}": "kernel: held (this client)"}
    writer.shutdown()
    assert not held.exists()
    soft = readers(lock="soft")
    assert soft.status()["liveness"] == {"rule": "mtime (soft locks: clients may be on other hosts)", "owners": {}}


def test_a_cohort_successor_takes_the_logical_ids_owner_name_and_its_predecessor_cannot_take_it_back(store, readers):
    logical = 0x5EED
    predecessor = readers(logical_instance_id=logical)
    predecessor.register(endpoint_spec())
    lock_dir = store / ".locks"
    first = (lock_dir / owner_name(logical)).stat().st_ino
    successor = readers(logical_instance_id=logical)
    successor.register(endpoint_spec())  # a takeover: the predecessor (alive, as a frozen one is) is fenced
    assert (lock_dir / owner_name(logical)).stat().st_ino != first
    predecessor.shutdown()  # its release leaves the successor's name
    directory = StoreDirectory(store, ".locks")
    directory.open(create=False)
    try:
        assert probe_owner(directory, logical) is OwnerState.HELD
        successor.shutdown()
        assert probe_owner(directory, logical) is OwnerState.UNKNOWN  # gone with the successor
    finally:
        directory.close()


def plant_owner_file(store: Path, instance_id: int, *, uid: int, locked: bool) -> int:
    """Put an owner file of user ``uid`` under ``instance_id``'s name, naming this kernel and
    device, as another user of a shared store could (locked by this process, or not), then close
    a write of it so that readers probe at once. Its descriptor (the caller closes it)."""
    locks = store / ".locks"
    planted = locks / "planted"
    content = {"instance_id": f"{instance_id:016x}", "kernel": kernel_id(), "device": os.stat(locks).st_dev, "pid": 1}
    planted.write_bytes(orjson.dumps(content))
    os.chown(planted, uid, uid)
    fd = os.open(planted, os.O_RDONLY)
    if locked:
        fcntl.flock(fd, fcntl.LOCK_EX)
    planted.rename(locks / owner_name(instance_id))
    with open(locks / owner_name(instance_id), "ab"):  # a close after a write: the readers' cue
        pass
    return fd


def test_another_users_owner_file_keeps_no_dead_writer_alive(store, steps, readers, peers):
    reader = readers()
    with watched_peer(reader, store, peers) as (peer, watch):
        wait_rule(reader, peer, "kernel: held")
        fd = plant_owner_file(store, peer.info["instance_id"], uid=65534, locked=True)
        try:
            peer.kill()
            wait_rule(reader, peer, "kernel: held")  # the planted file's: a probe of it ran
            event, _ = steps.until_event(watch, TTL / 4, 30)  # the mtime rule's time: not forever
            assert isinstance(event, ds.Removed)
        finally:
            os.close(fd)


def test_another_users_owner_file_makes_no_live_writer_dead(store, readers, peers):
    reader = readers()
    with watched_peer(reader, store, peers) as (peer, watch):
        os.close(plant_owner_file(store, peer.info["instance_id"], uid=65534, locked=False))
        wait_rule(reader, peer, "kernel: released")
        assert_quiet(watch, 0)
    assert len(reader.list(ds.Query.endpoints())) == RECORDS
    assert len(peer_files(store, peer)) == RECORDS


def test_a_frozen_plain_writer_stays_until_its_process_dies(store, steps, readers, peers):
    """Decided (docs/design.md §6): a SIGSTOPped writer holds its lock, so its records live on, as
    a pod's do while the pod exists; only its death removes them."""
    reader = readers()
    with watched_peer(reader, store, peers) as (peer, watch):
        wait_rule(reader, peer, "kernel: held")
        peer.process.send_signal(signal.SIGSTOP)
        steps.run(10 * TTL, TTL / 4)  # no heartbeat for ten TTLs of the reader
        assert_quiet(watch, 0)
        peer.kill()  # SIGKILL ends a stopped process too
        assert removed(watch, RECORDS) == set(peer.info["paths"])
