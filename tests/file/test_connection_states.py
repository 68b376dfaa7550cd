"""Connection state of file-store clients under real faults (backends/file/link.py): a store
remounted read-only, a full disk, a record deleted by another process, a store removed under a
read-only client. Real mounts (a tmpfs of the test's own, a bind mount; this suite runs as root,
as CI does), real clients on a manual clock (:mod:`tests.file.clocked`): no TTL is waited out.
A stalled mount (a frozen file server) is in tests/netfs/test_connection_states.py."""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file import FileDiscovery

import discovery_sync as ds
from discovery_sync.connection import STATE_THREAD
from testrigs.helpers import caught_logs, endpoint_spec, model_spec
from tests.file.clocked import Steps
from tests.file.disks import BindMount, SmallDisk, bind_mounted

C, S, R, L, X = (
    ds.ConnectionState.CONNECTED,
    ds.ConnectionState.SUSPENDED,
    ds.ConnectionState.RECONNECTED,
    ds.ConnectionState.LOST,
    ds.ConnectionState.CLOSED,
)
TTL = 10.0  # heartbeats every 3.33 s; LOST after 10 s without a successful one
BEAT = TTL / 3
SHORT_TTL = 3.0  # heartbeats every 1 s; LOST after 3 s without a successful one
CHANGE_TIMEOUT = 10.0  # real seconds for the listener thread to deliver a change already made


class Changes:
    """The state changes a client's listeners are told of, in order."""

    def __init__(self, client: ds.Discovery) -> None:
        self._seen: queue.Queue[tuple[ds.StateChange, str]] = queue.Queue()
        client.add_state_listener(lambda change: self._seen.put((change, threading.current_thread().name)))

    def next(self, count: int = 1) -> list[ds.StateChange]:
        changes = []
        for _ in range(count):
            change, thread = self._seen.get(timeout=CHANGE_TIMEOUT)
            assert thread == STATE_THREAD
            changes.append(change)
        return changes

    def empty(self) -> bool:
        return self._seen.empty()


def key(instance: ds.DiscoveryInstance) -> str:
    return f"{instance.kind.bucket}/{instance.id().to_path()}"


def record_file(root: Path, client: ds.Discovery, instance: ds.DiscoveryInstance) -> Path:
    assert isinstance(client, FileDiscovery)
    return root / instance.kind.bucket / client.layout.file_name(instance.id())


def remove_by_another_process(path: Path) -> None:
    subprocess.run(["rm", str(path)], check=True)


@pytest.fixture
def clients() -> Iterator[list[ds.Discovery]]:
    """Clients the test connected: shut down (before any mount goes) at teardown."""
    made: list[ds.Discovery] = []
    yield made
    for client in made:
        client.shutdown()


@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[BindMount]:
    with bind_mounted(BindMount(tmp_path)) as mount:
        yield mount


def test_a_read_only_remount_suspends_the_writer_and_the_next_beat_reconnects_it(
    disk: SmallDisk, steps: Steps, clients
):
    disk.keep_locks_apart()  # the writer's owner file, open for writing, would refuse the remount
    client = ds.connect(f"file://{disk.store}?ttl={TTL:g}", clock=steps.clock)
    clients.append(client)
    changes = Changes(client)
    record = client.register(endpoint_spec())
    steps.run(BEAT, BEAT / 4)  # a beat that works
    disk.read_only(True)
    try:
        steps.until(lambda: client.state is S, BEAT / 4, 2 * BEAT)
    finally:
        disk.read_only(False)
    [suspended] = changes.next()
    assert (suspended.previous, suspended.state) == (C, S)
    assert "heartbeat fails (Read-only file system)" in suspended.reason
    steps.until(lambda: client.state is C, BEAT / 4, 2 * BEAT)  # the next beat works: well within the TTL
    [reconnected] = changes.next()
    assert (reconnected.previous, reconnected.state, reconnected.rewritten) == (S, R, ())
    assert "no record had to be written back" in reconnected.reason
    assert client.list(ds.Query.endpoints()) == [record]
    client.shutdown()
    assert [c.state for c in changes.next()] == [X]
    assert changes.empty()


def test_a_store_that_refuses_beats_past_the_ttl_loses_the_records_and_writes_back_what_readers_swept(
    bind_mount: BindMount, steps: Steps, clients
):
    """The writer's mount is read-only, another host's is not: a reader there (soft locks: it
    cannot see the writer's owner lock, so mtimes decide) sweeps the records whose heartbeat
    stopped. The writer is SUSPENDED at its first refused beat, LOST once no beat worked for a
    TTL, and RECONNECTED by the first beat that works again, naming the records it wrote back."""
    writer = ds.connect(f"file://{bind_mount.path / 'store'}?ttl={SHORT_TTL:g}", clock=steps.clock)
    clients.append(writer)
    sweeper = ds.connect(
        f"file://{bind_mount.source / 'store'}?ttl={SHORT_TTL:g}&uniform_ttl=true&lock=soft", clock=steps.clock
    )
    clients.append(sweeper)
    changes = Changes(writer)
    records = [writer.register(endpoint_spec()), writer.register(model_spec())]
    files = [record_file(bind_mount.source / "store", writer, r) for r in records]
    steps.run(SHORT_TTL, 0.25)  # the sweeper sees them beat
    assert {r.id() for r in sweeper.list(ds.Query.endpoints())} == {records[0].id()}
    bind_mount.read_only(True)
    try:
        steps.until(lambda: not any(f.exists() for f in files), 0.25, 4 * SHORT_TTL)  # swept as dead
    finally:
        bind_mount.read_only(False)
    suspended, lost = changes.next(2)
    assert (suspended.previous, suspended.state) == (C, S)
    assert "Read-only file system" in suspended.reason
    assert (lost.previous, lost.state) == (S, L)
    assert "they may have removed this client's records" in lost.reason
    assert writer.state is L
    steps.until(lambda: writer.state is C, 0.25, 2 * SHORT_TTL)
    [reconnected] = changes.next()
    assert (reconnected.previous, reconnected.state) == (L, R)
    assert reconnected.rewritten == tuple(sorted(key(r) for r in records))
    assert all(f.exists() for f in files)
    assert sweeper.list(ds.Query.endpoints()) == [records[0]]
    assert changes.empty()


@pytest.mark.parametrize("state", [S, L])
def test_shutdown_of_a_writer_suspended_or_lost_on_a_read_only_store_goes_straight_to_closed(
    disk: SmallDisk, steps: Steps, clients, monkeypatch, state: ds.ConnectionState
):
    """Issue 38: shutdown() of a writer SUSPENDED or LOST on a read-only store reported
    RECONNECTED before CLOSED (2 rounds of 3), though nothing could be written or deleted. Its
    removals fail (EROFS), but shutdown() has dropped the records from the client by then: a beat
    of the heartbeat thread falling before the thread is stopped touches nothing, succeeds, and
    the link judged the client connected again. Here that beat is run inside each removal, where
    the heartbeat thread's may fall, so that every round meets it."""
    disk.keep_locks_apart()  # the writer's owner file, open for writing, would refuse the remount
    client = ds.connect(f"file://{disk.store}?ttl={SHORT_TTL:g}", clock=steps.clock)
    clients.append(client)
    assert isinstance(client, FileDiscovery)
    changes = Changes(client)
    client.register(endpoint_spec())
    client.register(model_spec())
    steps.run(1.0, 0.25)  # a beat that works
    removing, beats = client._delete, []
    before = [S] if state is S else [S, L]

    def beat_then_remove(instance_id: ds.DiscoveryInstanceId) -> None:
        client._liveness.beat()
        beats.append(client._liveness.trouble(steps.clock.monotonic()))
        removing(instance_id)

    disk.read_only(True)
    try:
        steps.until(lambda: client.state is state, 0.25, 2 * SHORT_TTL)
        assert [c.state for c in changes.next(len(before))] == before
        monkeypatch.setattr(client, "_delete", beat_then_remove)
        with caught_logs("discovery_sync") as logs:
            client.shutdown()
        assert logs.matching("could not remove")  # nothing could be deleted
    finally:
        disk.read_only(False)
    assert beats == [None, None]  # the beats worked: they had nothing left to touch
    [closed] = changes.next()
    assert (closed.previous, closed.state) == (state, X)
    client._connection.join(CHANGE_TIMEOUT)  # type: ignore[attr-defined]
    assert changes.empty()
    assert [c.state for c in client._connection.history] == [*before, X]  # type: ignore[attr-defined]


def test_a_full_disk_suspends_the_writer_while_a_gone_record_cannot_be_written_back(
    disk: SmallDisk, steps: Steps, clients
):
    client = ds.connect(f"file://{disk.store}?ttl={TTL:g}", clock=steps.clock)
    clients.append(client)
    changes = Changes(client)
    kept, gone = client.register(endpoint_spec(endpoint="kept")), client.register(endpoint_spec(endpoint="gone"))
    steps.run(BEAT, BEAT / 4)
    remove_by_another_process(record_file(disk.store, client, gone))
    disk.fill("space")  # not even the record's own page is free to write it back
    try:
        steps.until(lambda: client.state is S, BEAT / 4, 2 * BEAT)
    finally:
        disk.free()
    [suspended] = changes.next()
    assert (suspended.previous, suspended.state) == (C, S)
    assert "No space left on device" in suspended.reason
    steps.until(lambda: client.state is C, BEAT / 4, 2 * BEAT)
    [reconnected] = changes.next()
    assert (reconnected.previous, reconnected.state, reconnected.rewritten) == (S, R, (key(gone),))
    assert "wrote back 1 record(s)" in reconnected.reason
    assert sorted(client.list(ds.Query.endpoints()), key=key) == sorted([kept, gone], key=key)
    assert changes.empty()


def test_a_record_deleted_by_another_process_while_connected_is_written_back_and_changes_nothing(
    store: Path, steps: Steps, clients
):
    client = ds.connect(f"file://{store}?ttl={TTL:g}", clock=steps.clock)
    clients.append(client)
    changes = Changes(client)
    record = client.register(endpoint_spec())
    path = record_file(store, client, record)
    with caught_logs("discovery_sync.backends.file") as logs:
        remove_by_another_process(path)
        steps.until(path.exists, BEAT / 4, 2 * BEAT)
    assert logs.matching("was removed from the store while this client is alive; wrote it again")
    assert client.state is C
    assert client._connection.history == []  # type: ignore[attr-defined]  # every change, as it is made
    client.shutdown()
    assert [c.state for c in changes.next()] == [X]


def test_a_read_only_client_whose_store_is_removed_is_suspended_until_a_writer_makes_it_again(
    store: Path, steps: Steps, clients
):
    url = f"file://{store}?ttl={SHORT_TTL:g}"
    with ds.connect(url, clock=steps.clock) as writer:
        record = writer.register(endpoint_spec())
        reader = ds.connect(url, read_only=True, clock=steps.clock)
        clients.append(reader)
        assert reader.list(ds.Query.endpoints()) == [record]
    changes = Changes(reader)
    subprocess.run(["rm", "-r", str(store)], check=True)
    steps.until(lambda: reader.state is S, 0.25, 2 * SHORT_TTL)
    [suspended] = changes.next()
    assert (suspended.previous, suspended.state) == (C, S)
    assert "the store was removed" in suspended.reason
    clients.append(ds.connect(url, clock=steps.clock))  # a writer makes it again
    steps.until(lambda: reader.state is C, 0.25, 2 * SHORT_TTL)
    [reconnected] = changes.next()
    assert (reconnected.previous, reconnected.state, reconnected.rewritten) == (S, R, ())
    assert reader.list(ds.Query.endpoints()) == []
    assert changes.empty()


def test_a_read_only_client_of_a_store_not_made_yet_is_connected(tmp_path: Path, steps: Steps, clients):
    reader = ds.connect(f"file://{tmp_path / 'nowhere'}?ttl={SHORT_TTL:g}", read_only=True, clock=steps.clock)
    clients.append(reader)
    steps.run(2 * SHORT_TTL, 0.5)  # rescans of a store that does not exist: an empty store, no fault
    assert reader.state is C
    assert reader._connection.history == []  # type: ignore[attr-defined]


def test_a_rescan_stalled_by_the_store_suspends_a_read_only_client_until_it_ends(tmp_path: Path, steps: Steps, clients):
    """A read-only client has no heartbeat: a rescan hung in the kernel (a frozen mount) is seen
    by its link thread, from timestamps alone, once it has run past its stall bound."""
    store = tmp_path / "store"
    clients.append(writer := ds.connect(f"file://{store}", clock=steps.clock))
    writer.register(endpoint_spec())
    clients.append(reader := ds.connect(f"file://{store}", read_only=True, clock=steps.clock))
    assert isinstance(reader, FileDiscovery)
    changes = Changes(reader)
    reader._rescans.thread.stop()  # its rescans run below, in a thread of the test's
    view = reader._views[ds.RecordKind.ENDPOINT]
    scan, thawed = view._scan_directory, threading.Event()

    def frozen_mount(*args: object) -> object:  # the scan's system calls wait for the server
        assert thawed.wait(CHANGE_TIMEOUT)
        return scan(*args)

    view._scan_directory = frozen_mount  # type: ignore[method-assign]
    rescan = threading.Thread(target=reader.rescan, name="test-rescan")
    rescan.start()
    try:
        steps.advance(1.9)  # under the bound (2 s: a usual rescan here takes no time on the clock)
        assert reader.state is C and changes.empty()
        steps.advance(0.2)
        [change] = changes.next()
        assert (change.previous, change.state) == (C, S) and "a rescan has been stalled" in change.reason
    finally:
        thawed.set()
        rescan.join(CHANGE_TIMEOUT)
    [change] = changes.next()
    assert (change.state, change.rewritten) == (R, ())
    assert reader.state is C and changes.empty()
