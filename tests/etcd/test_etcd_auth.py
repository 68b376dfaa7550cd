"""The etcd backend against a server with authentication enabled (its own etcd)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

import discovery_sync as ds
from testrigs.etcd_server import EtcdServer
from testrigs.helpers import endpoint_spec, next_event


@pytest.fixture(scope="module")
def auth_server() -> Iterator[EtcdServer]:
    server = EtcdServer()
    server.start()
    api = server.url + "/v3/auth"
    for path, body in (
        ("/user/add", {"name": "root", "password": "rootpw"}),
        ("/user/grant", {"user": "root", "role": "root"}),
        ("/enable", {}),
    ):
        reply = requests.post(api + path, json=body, timeout=5)
        assert reply.ok, reply.text
    try:
        yield server
    finally:
        server.close()


def test_a_user_and_password_are_exchanged_for_a_token(auth_server, monkeypatch):
    monkeypatch.setenv("ETCD_AUTH_USERNAME", "root")
    monkeypatch.setenv("ETCD_AUTH_PASSWORD", "rootpw")
    url = f"etcd://127.0.0.1:{auth_server.client_port}/auth-test"
    with ds.connect(url) as writer, ds.connect(url) as watcher:
        with watcher.list_and_watch(ds.Query.endpoints()) as watch:
            assert next_event(watch) == ds.Resync(())
            endpoint = writer.register(endpoint_spec())
            assert next_event(watch) == ds.Added(endpoint)
        writer.check_connection()


def test_without_credentials_the_server_refuses_with_a_clear_error(auth_server, monkeypatch):
    monkeypatch.delenv("ETCD_AUTH_USERNAME", raising=False)
    with ds.connect(f"etcd://127.0.0.1:{auth_server.client_port}/auth-test") as anonymous:
        with pytest.raises(ds.DiscoveryError, match="etcd refused"):
            anonymous.check_connection()
        with pytest.raises(ds.DiscoveryError, match="etcd refused"):
            anonymous.register(endpoint_spec())
    monkeypatch.setenv("ETCD_AUTH_USERNAME", "root")
    monkeypatch.setenv("ETCD_AUTH_PASSWORD", "wrong")
    with pytest.raises(ds.DiscoveryError, match="etcd refused"):
        ds.connect(f"etcd://127.0.0.1:{auth_server.client_port}/auth-test")
