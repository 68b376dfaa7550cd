"""Connection state on every backend (docs/design.md §5.5): a client that works is CONNECTED,
shutdown() ends in CLOSED, and a replaced cohort member is LOST for good. The faults of each
backend (etcd stopped, a read-only store, a frozen mount, a deleted resource) are driven for
real in the backends' own test directories."""

from __future__ import annotations

import queue
import threading

import discovery_sync as ds
from discovery_sync.connection import STATE_THREAD

from .test_cohorts import HOSTS_COHORTS, LOGICAL_ID


def _endpoint(transport: str) -> ds.EndpointSpec:
    return ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp(transport))


def _listen(client: ds.Discovery) -> queue.Queue[tuple[ds.StateChange, str]]:
    seen: queue.Queue[tuple[ds.StateChange, str]] = queue.Queue()
    client.add_state_listener(lambda change: seen.put((change, threading.current_thread().name)))
    return seen


def test_a_working_client_is_connected_until_it_is_shut_down(rig):
    client = rig.client()
    seen = _listen(client)
    client.register(_endpoint("127.0.0.1:9001"))
    client.list(ds.Query.endpoints("ns"))
    assert client.state is ds.ConnectionState.CONNECTED
    assert client.status()["connection"] == "connected"
    client.shutdown()
    change, thread = seen.get(timeout=rig.event_timeout)
    assert (change.previous, change.state, thread) == (
        ds.ConnectionState.CONNECTED,
        ds.ConnectionState.CLOSED,
        STATE_THREAD,
    )
    assert client.state is ds.ConnectionState.CLOSED
    assert client.status()["connection"] == "closed"
    assert seen.empty()


def test_a_reader_is_connected_too(rig):
    reader = rig.reader()
    reader.list(ds.Query.endpoints("ns"))
    assert reader.state is ds.ConnectionState.CONNECTED


def test_a_replaced_member_is_lost_for_good(rig):
    if rig.name not in HOSTS_COHORTS:
        return  # etcd and Kubernetes refuse cohorts (test_cohorts checks the refusal)
    primary = rig.member(LOGICAL_ID)
    seen = _listen(primary)
    primary.register(_endpoint("127.0.0.1:9001"))
    standby = rig.member(LOGICAL_ID)
    standby.register(_endpoint("127.0.0.1:9002"))
    change, _ = seen.get(timeout=rig.event_timeout)
    assert (change.previous, change.state) == (ds.ConnectionState.CONNECTED, ds.ConnectionState.LOST)
    assert "replaced" in change.reason
    assert primary.state is ds.ConnectionState.LOST
    assert standby.state is ds.ConnectionState.CONNECTED
    primary.shutdown()
    change, _ = seen.get(timeout=rig.event_timeout)
    assert change.state is ds.ConnectionState.CLOSED
    assert seen.empty()
