"""The etcd backend against a real etcd under faults: dead clients, outages, compaction, races."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

import discovery_sync as ds
from testrigs.file_peer import Peer
from testrigs.helpers import (
    endpoint_spec,
    fold,
    fold_until_resynced,
    initial_state,
    next_event,
    race_conflicting_models,
)
from testrigs.tcp_proxy import TcpProxy

TTL = 2


@pytest.fixture
def url(etcd_server, prefix) -> str:
    return f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?ttl={TTL}"


@pytest.fixture
def proxy(etcd_server):
    proxy = TcpProxy(etcd_server.client_port)
    yield proxy
    proxy.close()


def test_a_killed_client_disappears_when_its_lease_expires(url, peers):
    watcher = ds.connect(url)
    try:
        with watcher.list_and_watch(ds.Query.endpoints("ns", "peer")) as watch:
            next_event(watch)
            peer = Peer(url, 2)
            peers.append(peer)
            assert {next_event(watch).instance.instance_id for _ in range(2)} == {peer.info["instance_id"]}
            peer.kill()
            killed = time.monotonic()
            removed = {next_event(watch, timeout=TTL + 10).id.to_path() for _ in range(2)}
            assert removed == set(peer.info["paths"])
            assert time.monotonic() - killed < TTL + 3  # etcd expires the lease within its TTL
    finally:
        watcher.shutdown()


def test_shutdown_revokes_the_lease_and_its_records_vanish_at_once(url):
    owner, watcher = ds.connect(url), ds.connect(url)
    try:
        owner.register(endpoint_spec())
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            owner.shutdown()
            assert isinstance(next_event(watch, timeout=1.0), ds.Removed)
    finally:
        watcher.shutdown()


def test_a_paused_server_expires_the_lease_and_the_client_registers_again(etcd_server, url):
    client, watcher = ds.connect(url), ds.connect(url)
    try:
        endpoint = client.register(endpoint_spec())
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            os.kill(etcd_server.process.pid, signal.SIGSTOP)
            try:
                threading.Event().wait(TTL + 2)  # the outage itself: longer than the lease TTL
            finally:
                os.kill(etcd_server.process.pid, signal.SIGCONT)
            state = {endpoint.id(): endpoint}
            saw_removal = False
            while not (saw_removal and state == {endpoint.id(): endpoint}):
                event = next_event(watch, timeout=TTL + 10)
                saw_removal |= isinstance(event, ds.Removed)
                state = fold(state, event)
        assert client.instance_id == endpoint.instance_id  # re-granted with the same id
        assert client.status()["lease_losses"] == 1
        assert watcher.list(ds.Query.endpoints()) == [endpoint]
    finally:
        client.shutdown()
        watcher.shutdown()


def test_a_restarted_server_brings_watchers_a_resync_with_the_right_set(etcd_server, url):
    client, watcher = ds.connect(url), ds.connect(url)
    try:
        endpoint = client.register(endpoint_spec())
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            etcd_server.stop()
            threading.Event().wait(TTL + 1)  # down for longer than the TTL
            etcd_server.start()
            event = next_event(watch, timeout=30)
            while not isinstance(event, ds.Resync):
                event = next_event(watch, timeout=30)
            assert event.instances == (endpoint,)
        assert watcher.list(ds.Query.endpoints()) == [endpoint]
        client.check_connection()
    finally:
        client.shutdown()
        watcher.shutdown()


def test_compaction_past_a_watchers_revision_resyncs_without_losing_a_record(etcd_server, url, prefix, proxy):
    writer = ds.connect(url)
    watcher = ds.connect(f"etcd://127.0.0.1:{proxy.port}/{prefix}?ttl=30")
    try:
        first = writer.register(endpoint_spec(endpoint="first"))
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            state = fold({}, initial_state(watch)[1])
            proxy.cut()  # the watcher loses its stream; everything below happens while it is away
            later = [writer.register(endpoint_spec(endpoint=f"later{i}")) for i in range(5)]
            writer.unregister(first)
            etcd_server.compact()
            proxy.restore()
            expected = {e.id(): e for e in later}
            fold_until_resynced(watch, state, expected)
    finally:
        writer.shutdown()
        watcher.shutdown()


def test_two_clients_racing_to_register_conflicting_models_have_one_winner(url):
    for _ in range(10):
        clients = [ds.connect(url) for _ in range(2)]
        try:
            winners = race_conflicting_models(clients)
            assert len(winners) == 1, winners
        finally:
            for client in clients:
                client.shutdown()


def test_endpoints_fail_over_and_come_from_etcd_endpoints(etcd_server, prefix, monkeypatch):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # a port nobody listens on
    dead_url = f"http://127.0.0.1:{dead.getsockname()[1]}"
    try:
        monkeypatch.delenv("DYN_DISCOVERY_BACKEND", raising=False)
        monkeypatch.setenv("ETCD_ENDPOINTS", f"{dead_url},{etcd_server.url}")
        monkeypatch.setenv("ETCD_LEASE_TTL", "0")  # 0 means the default
        with ds.connect(options_prefix(prefix)) as client:
            assert client.backend_name == "etcd"
            assert client.status()["ttl"] == 10
            endpoint = client.register(endpoint_spec())
            assert client.list(ds.Query.endpoints()) == [endpoint]
    finally:
        dead.close()


def options_prefix(prefix: str) -> str:
    return f"etcd:///{prefix}"  # no hosts: ETCD_ENDPOINTS decides
