"""The etcd backend's connection state under real faults (docs/design.md §5.5): etcd stopped and
started again, a lease revoked or expired while etcd was out of reach, compaction, and a reader
whose etcd does not answer. Each test records the changes its listener is told of and checks
their sequence (state, previous state, records written again) and that ``status()`` agrees.

The tests share an etcd of this module's own, which they stop and start (and reach through a
TCP proxy they cut), so no other test sees it go away.
"""

from __future__ import annotations

import base64
import logging
import os
import queue
import random
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import requests

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer, key_prefix
from testrigs.helpers import endpoint_spec, initial_state, model_spec, next_event
from testrigs.tcp_proxy import TcpProxy
from testrigs.waiting import wait_until

TTL = 2
WAIT = 10.0  # seconds any awaited change may take before the test fails

CONNECTED = ds.ConnectionState.CONNECTED
SUSPENDED = ds.ConnectionState.SUSPENDED
RECONNECTED = ds.ConnectionState.RECONNECTED
LOST = ds.ConnectionState.LOST
CLOSED = ds.ConnectionState.CLOSED


@pytest.fixture(scope="module")
def private_etcd() -> Iterator[EtcdServer]:
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def etcd(private_etcd: EtcdServer) -> Iterator[EtcdServer]:
    """The module's etcd, running again after the test whatever the test did to it."""
    yield private_etcd
    if private_etcd.process is None:
        private_etcd.start()


@pytest.fixture
def prefix() -> str:
    return key_prefix("connection-states")


@pytest.fixture
def proxy(etcd: EtcdServer) -> Iterator[TcpProxy]:
    proxy = TcpProxy(etcd.client_port)
    yield proxy
    proxy.close()


class Changes:
    """The changes a client's listener is told of, in order."""

    def __init__(self, client: ds.Discovery) -> None:
        self.client = client
        self._queue: queue.Queue[ds.StateChange] = queue.Queue()
        client.add_state_listener(self._queue.put)

    def next(self, state: ds.ConnectionState, previous: ds.ConnectionState) -> ds.StateChange:
        """The next change, which must be to ``state`` from ``previous``; ``state`` and ``status()``
        must agree with it (but for LOST, which the client's keep-alive ends by itself at once:
        SUSPENDED lasts while the test keeps etcd away, CONNECTED until the test breaks it)."""
        change = self._queue.get(timeout=WAIT)
        assert (change.state, change.previous) == (state, previous), change
        lasting = CONNECTED if state is RECONNECTED else state
        if lasting is not LOST:
            assert self.client.state is lasting
            assert self.client.status()["connection"] == lasting.value
        return change

    def shut_down(self) -> None:
        """Shut the client down: CLOSED must be the one change left."""
        self.client.shutdown()
        self.next(CLOSED, CONNECTED)
        assert self._queue.empty()


def _url(port: int, prefix: str, **options: object) -> str:
    query = "&".join(f"{name}={value}" for name, value in {"ttl": TTL, **options}.items())
    return f"etcd://127.0.0.1:{port}/{prefix}?{query}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _etcd(etcd: EtcdServer, path: str, body: dict[str, object]) -> dict[str, object]:
    """etcd's answer to ``body`` on ``path``, asked by the test itself (not through the client)."""
    reply = requests.post(f"{etcd.url}{path}", json=body, timeout=5)
    reply.raise_for_status()
    answer: dict[str, object] = reply.json()
    return answer


def _keys_of_lease(etcd: EtcdServer, prefix: str, lease_id: int) -> set[str]:
    """The keys under ``prefix`` that etcd holds attached to the lease ``lease_id``."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    kvs = _etcd(etcd, "/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end)}).get("kvs", [])
    assert isinstance(kvs, list)
    return {base64.b64decode(kv["key"]).decode() for kv in kvs if int(kv.get("lease", 0)) == lease_id}


def test_etcd_out_of_reach_for_less_than_the_ttl_is_suspended_then_reconnected_with_nothing_lost(etcd, prefix, proxy):
    client = ds.connect(_url(proxy.port, prefix))
    changes = Changes(client)
    endpoint = client.register(endpoint_spec())
    proxy.cut()  # the keep-alive fails within a third of the TTL
    suspended = changes.next(SUSPENDED, CONNECTED)
    assert "etcd" in suspended.reason
    proxy.restore()  # the next keep-alive, within a second, comes before the TTL has passed
    reconnected = changes.next(RECONNECTED, SUSPENDED)
    assert reconnected.rewritten == ()
    assert client.status()["lease_losses"] == 0
    assert client.list(ds.Query.endpoints()) == [endpoint]
    changes.shut_down()


def test_etcd_stopped_for_longer_than_the_ttl_is_lost_as_the_client_judges_then_every_record_written_again(
    etcd, prefix
):
    client = ds.connect(_url(etcd.client_port, prefix))
    changes = Changes(client)
    endpoint = client.register(endpoint_spec())
    lease_id = client.instance_id
    etcd.stop()
    changes.next(SUSPENDED, CONNECTED)
    # etcd says nothing: the client judges its lease lost once the TTL has passed since the last
    # keep-alive etcd acknowledged
    lost = changes.next(LOST, SUSPENDED)
    assert "acknowledged" in lost.reason and f"{TTL} s TTL" in lost.reason
    etcd.start()  # a restarted etcd extends every lease: this one survived, but the client cannot know
    reconnected = changes.next(RECONNECTED, LOST)
    assert reconnected.rewritten == (client.keys.key(endpoint.id()).decode(),)
    assert (client.instance_id, client.status()["lease_losses"]) == (lease_id, 1)
    assert client.list(ds.Query.endpoints()) == [endpoint]
    changes.shut_down()


def test_a_revoked_lease_is_lost_then_reconnected_with_every_record_written_again(etcd, prefix):
    client = ds.connect(_url(etcd.client_port, prefix))
    changes = Changes(client)
    records = [client.register(endpoint_spec()), client.register(model_spec())]
    lease_id = client.instance_id
    keys = _keys_of_lease(etcd, prefix, lease_id)
    assert len(keys) == 2
    _etcd(etcd, "/v3/lease/revoke", {"ID": str(lease_id)})  # etcd deletes the records with the lease
    lost = changes.next(LOST, CONNECTED)
    assert f"{lease_id:x}" in lost.reason and "removed" in lost.reason
    reconnected = changes.next(RECONNECTED, LOST)
    assert sorted(reconnected.rewritten) == sorted(keys)
    assert _keys_of_lease(etcd, prefix, lease_id) == keys  # back in etcd, under the same lease
    assert (client.instance_id, client.status()["lease_losses"]) == (lease_id, 1)
    assert sorted(client.list(ds.Query.endpoints()) + client.list(ds.Query.models()), key=str) == sorted(
        records, key=str
    )
    changes.shut_down()


def test_a_lease_expired_while_etcd_was_unreachable_is_suspended_lost_then_reconnected(etcd, prefix, proxy):
    client, observer = ds.connect(_url(proxy.port, prefix)), ds.connect(_url(etcd.client_port, prefix))
    try:
        changes = Changes(client)
        endpoint = client.register(endpoint_spec())
        with observer.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            proxy.cut()  # etcd runs on, but the client cannot renew its lease
            changes.next(SUSPENDED, CONNECTED)
            assert next_event(watch, timeout=WAIT) == ds.Removed(endpoint.id())  # etcd expired the lease
            proxy.restore()
            # a request that etcd answers wakes the keep-alive, which finds the lease gone: LOST
            # comes first, never a RECONNECTED that would claim nothing was lost
            client.list(ds.Query.endpoints())
            changes.next(LOST, SUSPENDED)
            reconnected = changes.next(RECONNECTED, LOST)
            assert next_event(watch, timeout=WAIT) == ds.Added(endpoint)  # written back
        (key,) = reconnected.rewritten
        assert _keys_of_lease(etcd, prefix, client.instance_id) == {key}
        changes.shut_down()
    finally:
        client.shutdown()
        observer.shutdown()


def test_compaction_resyncs_the_watch_and_changes_no_state(etcd, prefix, caplog):
    caplog.set_level(logging.INFO, logger="discovery_sync.backends.etcd")
    client = ds.connect(_url(etcd.client_port, prefix, watch_read_timeout=1))
    changes = Changes(client)
    endpoint = client.register(endpoint_spec())
    with client.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        for index in range(3):  # the store moves on, outside the watched bucket
            _etcd(etcd, "/v3/kv/put", {"key": _b64(f"{prefix}-elsewhere/{index}"), "value": _b64("x")})
        etcd.compact()
        # the stream, quiet for its read timeout, is opened again from a revision now compacted
        event = next_event(watch, timeout=WAIT)
        assert event == ds.Resync((endpoint,))
    assert any("was compacted" in message for message in caplog.messages)
    assert client.state is CONNECTED and client.status()["connection"] == "connected"
    changes.shut_down()  # CLOSED is the first change this client was told of


def test_a_readers_watch_is_suspended_while_etcd_is_unreachable_and_reconnected_when_it_answers(etcd, prefix, proxy):
    reader = ds.connect(_url(proxy.port, prefix, read_only="true"))
    writer = ds.connect(_url(etcd.client_port, prefix))
    try:
        changes = Changes(reader)
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            proxy.cut()  # the stream breaks; its resync cannot reach etcd either
            suspended = changes.next(SUSPENDED, CONNECTED)
            assert "etcd" in suspended.reason
            endpoint = writer.register(endpoint_spec())
            proxy.restore()
            reconnected = changes.next(RECONNECTED, SUSPENDED)
            assert reconnected.rewritten == ()
            assert next_event(watch, timeout=WAIT) == ds.Added(endpoint)  # the resync brings what it missed
        changes.shut_down()
    finally:
        reader.shutdown()
        writer.shutdown()


def test_a_readers_request_that_cannot_reach_etcd_suspends_and_the_next_answer_reconnects(etcd, prefix, proxy):
    reader = ds.connect(_url(proxy.port, prefix, read_only="true"))
    changes = Changes(reader)
    proxy.cut()
    with pytest.raises(ds.BackendUnavailable):
        reader.list(ds.Query.endpoints())
    assert "cannot reach etcd" in changes.next(SUSPENDED, CONNECTED).reason
    proxy.restore()
    assert reader.list(ds.Query.endpoints()) == []
    assert changes.next(RECONNECTED, SUSPENDED).rewritten == ()
    changes.shut_down()


def test_a_request_that_etcd_refuses_is_no_connection_fault(etcd, prefix):
    client = ds.connect(_url(etcd.client_port, prefix, read_only="true"))
    changes = Changes(client)
    with pytest.raises(ds.DiscoveryError, match="lease not found"):
        client.gateway.put(f"{prefix}/k".encode(), b"v", lease=12345)  # no such lease: etcd refuses
    assert client.state is CONNECTED and client.status()["connection"] == "connected"
    changes.shut_down()


def test_shutting_down_reports_closed_and_nothing_else_whatever_the_threads_were_doing(etcd, prefix):
    """Shutdown cuts the requests under way (a keep-alive, a watch stream): no fault of etcd's, so
    no SUSPENDED before CLOSED (a keep-alive cut at the wrong moment once reported one)."""
    for _ in range(20):
        client = ds.connect(_url(etcd.client_port, prefix, ttl=1))  # a keep-alive every 0.5 s
        changes = Changes(client)
        client.register(endpoint_spec())
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            threading.Event().wait(random.uniform(0, 0.5))  # anywhere in the keep-alive's cycle
            changes.shut_down()


class Stamped:
    """The changes a client's listener is told of, each with the moment (``time.monotonic()``) it was."""

    def __init__(self, client: ds.Discovery) -> None:
        self._queue: queue.Queue[tuple[float, ds.StateChange]] = queue.Queue()
        client.add_state_listener(lambda change: self._queue.put((time.monotonic(), change)))

    def next(self, state: ds.ConnectionState, previous: ds.ConnectionState, timeout: float = WAIT) -> float:
        """When the next change came, which must be to ``state`` from ``previous``."""
        at, change = self._queue.get(timeout=timeout)
        assert (change.state, change.previous) == (state, previous), change
        return at

    def empty(self) -> bool:
        return self._queue.empty()


SHORT_TTL = 3
SLACK = 0.5  # seconds granted to each time bound beyond the goal: the listener's thread, a loaded machine
SHUTDOWN = 1.5  # seconds shutdown() takes at most while etcd answers nothing


def _acknowledged(client: ds.Discovery) -> float:
    """When (``time.monotonic()``) the client's last keep-alive was acknowledged: no earlier."""
    return time.monotonic() - float(client.status()["seconds_since_keepalive"])


def _timed_shutdown(client: ds.Discovery) -> float:
    began = time.monotonic()
    client.shutdown()
    return time.monotonic() - began


def test_a_frozen_etcd_suspends_a_short_ttl_writer_at_once_loses_it_at_the_ttl_and_shutdown_is_quick(etcd, prefix):
    """Issue 38: writers of TTL 3 on the one etcd, which freezes (SIGSTOP: it accepts connections
    and answers nothing). Each is SUSPENDED as soon as a keep-alive is overdue (the next one, due
    TTL/3 after the last acknowledged, gets no answer within a second), and LOST once the TTL has
    passed since its last acknowledged keep-alive, as the client judges (etcd says nothing), not a
    request timeout later. shutdown() of one SUSPENDED and of one LOST each returns within 1.5 s
    and reports CLOSED next; their records expire with the lease once etcd runs again."""
    url = _url(etcd.client_port, prefix, ttl=SHORT_TTL)
    writer, early = ds.connect(url), ds.connect(url)
    seen, early_seen = Stamped(writer), Stamped(early)
    for client in (writer, early):
        for i in range(3):
            client.register(endpoint_spec(endpoint=f"e{i}"))
    wait_until(lambda: writer.status()["keepalives"] >= 1, "a keep-alive acknowledged", WAIT)
    acked, early_acked = _acknowledged(writer), _acknowledged(early)
    assert etcd.process is not None
    os.kill(etcd.process.pid, signal.SIGSTOP)
    try:
        early_suspended = early_seen.next(SUSPENDED, CONNECTED)
        early_took = _timed_shutdown(early)
        early_seen.next(CLOSED, SUSPENDED)  # shut down while SUSPENDED: nothing between
        suspended = seen.next(SUSPENDED, CONNECTED)
        lost = seen.next(LOST, SUSPENDED)
        assert writer.state is LOST
        took = _timed_shutdown(writer)
        seen.next(CLOSED, LOST)
    finally:
        os.kill(etcd.process.pid, signal.SIGCONT)
    overdue = SHORT_TTL / 3 + 1  # the next keep-alive is sent TTL/3 after the last, and waited for a second
    assert early_suspended - early_acked <= overdue + SLACK, f"SUSPENDED {early_suspended - early_acked:.2f} s after"
    assert suspended - acked <= overdue + SLACK, f"SUSPENDED {suspended - acked:.2f} s after the last keep-alive"
    assert SHORT_TTL - 0.1 <= lost - acked <= SHORT_TTL + SLACK, f"LOST {lost - acked:.2f} s after the last keep-alive"
    assert early_took <= SHUTDOWN, f"shutdown() while SUSPENDED took {early_took:.2f} s"
    assert took <= SHUTDOWN, f"shutdown() while LOST took {took:.2f} s"
    assert seen.empty() and early_seen.empty()
    with ds.connect(f"etcd://127.0.0.1:{etcd.client_port}/{prefix}", read_only=True) as reader:
        wait_until(lambda: not reader.list(ds.Query.endpoints()), "the records expired", SHORT_TTL + 2)
