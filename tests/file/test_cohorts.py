"""Failover cohorts on the file store (docs/design.md §4.1): claims, fenced heartbeats, deletes
and write-backs, and how a successor's takeover is told from a stranger's planted record.
The contract suite (tests/contract/test_cohorts.py) covers what every backend shares."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import threading

import orjson
import pytest
from discovery_sync.backends.file.cohort import claim_name
from discovery_sync.backends.file.names import record_name
from discovery_sync.backends.file.wire import touch_written

import discovery_sync as ds
from testrigs.helpers import assert_quiet, caught_logs, endpoint_spec, initial_state, model_spec, next_event
from tests.file.junk import make_fifo

LOGICAL_ID = 0xC0FFEE
TTL = 3.0  # heartbeat every second
HEARTBEATS = 2.5  # seconds: more than two heartbeats
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def url(store) -> str:
    return f"file://{store}?ttl={TTL}&rescan_interval=0.2&uniform_ttl=true"


@pytest.fixture
def clients(store):
    made: list[ds.Discovery] = []

    def connect(**options) -> ds.Discovery:
        client = ds.connect(url(store), **options)
        made.append(client)
        return client

    yield connect
    for client in made:
        client.shutdown()


def endpoint_file(store, endpoint: ds.Endpoint):
    return store / "v1" / "instances" / record_name(endpoint.id())


def test_a_fenced_touch_moves_only_the_file_it_wrote(tmp_path):
    bucket = tmp_path
    ours = bucket / "record"
    ours.write_bytes(b"ours")
    os.utime(ours, (1, 1))
    inode = ours.stat().st_ino
    fd = os.open(bucket, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert touch_written(fd, "record", inode) is True
        assert ours.stat().st_mtime > 1
        successor = bucket / "successor"
        successor.write_bytes(b"theirs")
        os.utime(successor, (1, 1))
        os.replace(successor, ours)
        assert touch_written(fd, "record", inode) is None
        assert ours.stat().st_mtime == 1 and ours.read_bytes() == b"theirs"
        ours.unlink()
        assert touch_written(fd, "record", inode) is False
        make_fifo(ours)
        assert touch_written(fd, "record", inode) is None  # never blocks on a FIFO
    finally:
        os.close(fd)


def test_a_current_member_writes_back_a_record_that_vanished(store, clients):
    primary = clients(logical_instance_id=LOGICAL_ID)
    endpoint = primary.register(endpoint_spec())
    watch = clients().list_and_watch(ds.Query.endpoints())
    initial_state(watch)
    endpoint_file(store, endpoint).unlink()  # swept while it stalled, or removed by hand
    assert next_event(watch) == ds.Removed(endpoint.id())
    assert next_event(watch) == ds.Added(endpoint)
    assert primary.replaced is None


def test_a_member_writes_nothing_back_once_a_successor_claimed(store, clients):
    primary = clients(logical_instance_id=LOGICAL_ID)
    primary.register(endpoint_spec(port=1))
    watch = clients().list_and_watch(ds.Query.endpoints())
    initial_state(watch)
    standby = clients(logical_instance_id=LOGICAL_ID)
    taken = standby.register(endpoint_spec(port=2))
    assert next_event(watch) == ds.Added(taken)
    standby.unregister(taken)  # the successor's to remove; its predecessor must not bring it back
    assert next_event(watch) == ds.Removed(taken.id())
    assert primary.wait_replaced(timeout=HEARTBEATS)
    assert_quiet(watch, HEARTBEATS)
    assert not endpoint_file(store, taken).exists()


def test_a_replaced_member_that_has_not_noticed_yet_removes_nothing(store, clients):
    primary = clients(logical_instance_id=LOGICAL_ID)
    primary.register(endpoint_spec(port=1))
    model = primary.register(model_spec())
    standby = clients(logical_instance_id=LOGICAL_ID)
    taken = standby.register(endpoint_spec(port=2))  # the model card is not taken over yet
    primary.shutdown()  # at once: its heartbeat has not read the claim yet, the store lock's check has
    assert endpoint_file(store, taken).read_bytes() == ds.instance_to_json(taken)
    assert (store / "v1" / "mdc" / record_name(model.id())).exists()
    assert primary.replaced is not None and "its claim" in str(primary.replaced)
    assert standby.get(model.id()) == model
    assert standby.register(model_spec()) == model  # taken over in turn


def test_a_valid_record_of_this_user_in_its_place_is_a_takeover(store, clients, warnings):
    """A successor that writes no claim (the reference's compare-and-replace) replaces the file."""
    primary = clients(logical_instance_id=LOGICAL_ID)
    endpoint = primary.register(endpoint_spec(port=1))
    successor = dataclasses.replace(endpoint, transport=ds.Transport.tcp("127.0.0.1:2"))
    own = endpoint_file(store, endpoint)
    planted = own.with_name("planted")
    planted.write_bytes(ds.instance_to_json(successor))
    os.utime(planted, (1000, 1000))
    os.rename(planted, own)
    assert primary.wait_replaced(timeout=HEARTBEATS)
    assert "its record" in str(primary.replaced)
    threading.Event().wait(HEARTBEATS)  # heartbeats of the replaced member would move the mtime
    assert own.stat().st_mtime == 1000  # never refreshed by the member it replaced
    assert own.read_bytes() == ds.instance_to_json(successor)
    assert not warnings.matching("wrote it back")


@pytest.mark.parametrize("make", [make_fifo, lambda path: path.write_bytes(b"{not json")], ids=["fifo", "junk"])
def test_junk_in_its_place_is_repaired_not_obeyed(store, clients, warnings, make):
    primary = clients(logical_instance_id=LOGICAL_ID)
    endpoint = primary.register(endpoint_spec(port=1))
    own = endpoint_file(store, endpoint)
    planted = own.with_name("planted")
    make(planted)
    os.rename(planted, own)
    assert len(warnings.wait_for("replaced by another writer", timeout=HEARTBEATS + 2)) == 1
    assert own.read_bytes() == ds.instance_to_json(endpoint)
    assert primary.replaced is None


@needs_root
def test_a_record_another_user_planted_is_repaired(store, clients, warnings):
    primary = clients(logical_instance_id=LOGICAL_ID)
    endpoint = primary.register(endpoint_spec(port=1))
    forged = dataclasses.replace(endpoint, transport=ds.Transport.tcp("10.6.6.6:1"))
    own = endpoint_file(store, endpoint)
    planted = own.with_name("planted")
    planted.write_bytes(ds.instance_to_json(forged))
    os.chown(planted, 65534, 65534)
    os.rename(planted, own)
    assert len(warnings.wait_for("replaced by another writer", timeout=HEARTBEATS + 2)) == 1
    assert own.read_bytes() == ds.instance_to_json(endpoint)
    assert primary.replaced is None


@needs_root
@pytest.mark.parametrize("content", [b"", b"junk", None], ids=["empty", "junk", "other-user"])
def test_only_a_claim_of_this_user_counts(store, clients, warnings, content):
    primary = clients(logical_instance_id=LOGICAL_ID)
    primary.register(endpoint_spec(port=1))
    claim = store / ".locks" / claim_name(LOGICAL_ID)
    ours = orjson.loads(claim.read_bytes())["token"]
    planted = claim.with_name("planted")
    if content is None:  # a well-formed claim, of another user
        planted.write_bytes(orjson.dumps({"token": "f" * 16, "host": "elsewhere", "pid": 1, "since": 0}))
        os.chown(planted, 65534, 65534)
    else:
        planted.write_bytes(content)
    os.rename(planted, claim)
    model = primary.register(model_spec())  # a write reads the claim under the store lock
    assert primary.get(model.id()) == model and primary.replaced is None
    assert orjson.loads(claim.read_bytes())["token"] == ours
    assert len(warnings.matching("gone or unreadable")) == 1
    assert not primary.wait_replaced(timeout=HEARTBEATS)


def test_a_standby_that_wrote_nothing_fences_nobody(store, clients):
    primary = clients(logical_instance_id=LOGICAL_ID)
    endpoint = primary.register(endpoint_spec(port=1))
    standby = clients(logical_instance_id=LOGICAL_ID)
    assert standby.get(endpoint.id()) == endpoint
    assert not primary.wait_replaced(timeout=HEARTBEATS)
    assert standby.status()["replaced"] is None and primary.status()["logical_instance_id"] == LOGICAL_ID


def test_status_says_a_member_was_replaced(store, clients):
    primary = clients(logical_instance_id=LOGICAL_ID)
    primary.register(endpoint_spec(port=1))
    clients(logical_instance_id=LOGICAL_ID).register(endpoint_spec(port=2))
    assert primary.wait_replaced(timeout=HEARTBEATS)
    status = primary.status()
    assert status["replaced"].startswith("replaced by pid ") and status["records"] == 0


# -- a client outside the cohort whose instance id is the cohort's logical id (issue 38) ------------
def _states(client: ds.Discovery) -> queue.Queue[ds.StateChange]:
    changes: queue.Queue[ds.StateChange] = queue.Queue()
    client.add_state_listener(changes.put)
    return changes


def test_a_cohort_takes_its_id_from_a_plain_client_that_used_it_first(store, clients):
    """Before: the plain client wrote its record back over the member's, the member ended fenced
    and LOST, and readers saw the plain client's address. The cohort owns its logical id."""
    errors = contextlib.ExitStack()
    logged = errors.enter_context(caught_logs("discovery_sync.discovery"))
    plain = clients(instance_id=LOGICAL_ID)
    plain_states = _states(plain)
    planted = plain.register(endpoint_spec(port=1))
    watch = clients().list_and_watch(ds.Query.endpoints())
    initial_state(watch)
    member = clients(logical_instance_id=LOGICAL_ID)
    member_states = _states(member)
    taken = member.register(endpoint_spec(port=2))
    assert next_event(watch) == ds.Added(taken)
    change = plain_states.get(timeout=HEARTBEATS * 4)  # its next rescan finds the claim
    assert change.state is ds.ConnectionState.LOST
    assert f"claimed as a failover cohort's logical id by pid {os.getpid()}" in change.reason
    assert logged.count("are the cohort's now and it keeps none of them", 1) == 1
    errors.close()
    assert_quiet(watch, HEARTBEATS)  # nothing written back over the member's record
    assert member_states.empty() and member.state is ds.ConnectionState.CONNECTED
    plain.shutdown()  # deletes nothing of the cohort's
    assert member.list(ds.Query.endpoints()) == [taken] and planted.id() == taken.id()
    with pytest.raises(ds.ConflictError, match="failover cohort"):
        clients(instance_id=LOGICAL_ID).register(endpoint_spec(port=3))


def test_a_plain_client_may_not_register_under_a_claimed_logical_id(store, clients):
    member = clients(logical_instance_id=LOGICAL_ID)
    kept = member.register(endpoint_spec(port=1))
    plain = clients(instance_id=LOGICAL_ID)
    with pytest.raises(ds.ConflictError) as refused:
        plain.register(endpoint_spec(port=2))
    message = str(refused.value)
    assert f"instance id {LOGICAL_ID:x} is the logical id of a failover cohort" in message
    assert str(store / ".locks" / claim_name(LOGICAL_ID)) in message
    assert "connect with another instance_id, or join the cohort" in message
    assert plain.list(ds.Query.endpoints()) == [kept]
    assert member.state is ds.ConnectionState.CONNECTED
