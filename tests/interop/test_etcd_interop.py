"""A reference-runtime 1.6.1 worker and a discovery-sync client on one (real) etcd, keys unprefixed."""

from __future__ import annotations

import time
import uuid

import pytest
from discovery_sync.backends.etcd.wire import EtcdGateway

import discovery_sync as ds
from testrigs.helpers import next_event

RUST_LEASE_TTL = 3


@pytest.fixture
def namespace() -> str:
    return f"interop{uuid.uuid4().hex[:12]}"


@pytest.fixture
def etcd_url(etcd_server) -> str:
    """The session's etcd with NO key prefix, unlike every other test on it (tests/conftest.py's
    ``etcd_prefix``): the reference runtime has no prefix, and these tests check that we read and
    write its exact keys (v1/instances/...). Each test keeps to a ``namespace`` of its own; a killed
    reference peer's records stay until its lease (RUST_LEASE_TTL) expires, under keys no prefixed
    client sees."""
    return f"etcd://127.0.0.1:{etcd_server.client_port}"  # no prefix: the reference's keys exactly


@pytest.fixture
def rust_etcd_peer(etcd_server, rust_peers):
    env = {"ETCD_ENDPOINTS": etcd_server.url, "ETCD_LEASE_TTL": str(RUST_LEASE_TTL)}
    return lambda: rust_peers("etcd", env)  # it must reach the test etcd on this host's loopback


@pytest.fixture
def client(etcd_url):
    client = ds.connect(etcd_url)
    yield client
    client.shutdown()


def test_a_rust_worker_on_etcd_is_listed_watched_and_removed(client, rust_etcd_peer, namespace, etcd_server):
    peer = rust_etcd_peer()
    with client.list_and_watch(ds.Query.endpoints(namespace)) as watch:
        assert next_event(watch) == ds.Resync(())
        instance_id = peer.call("serve", endpoint=f"{namespace}.backend.generate")["instance_id"]
        event = next_event(watch)
        assert isinstance(event, ds.Added)
        endpoint = event.instance
        assert endpoint.instance_id == instance_id
        assert (endpoint.transport.kind, endpoint.device_type, endpoint.request_plane_codec) == (
            "tcp",
            "cuda",
            "msgpack",
        )
        # the key layout and the lease: v1/instances/{ns}/backend/generate/{lease id:x}
        kvs, _ = EtcdGateway([etcd_server.url]).range(
            f"v1/instances/{namespace}/backend/generate/{instance_id:x}".encode()
        )
        assert [kv.lease for kv in kvs] == [instance_id]
        assert client.list(ds.Query.endpoints(namespace)) == [endpoint]
        peer.shutdown()
        assert next_event(watch) == ds.Removed(endpoint.id())


def test_a_killed_rust_worker_on_etcd_goes_with_its_lease(client, rust_etcd_peer, namespace):
    peer = rust_etcd_peer()
    with client.list_and_watch(ds.Query.endpoints(namespace)) as watch:
        next_event(watch)
        peer.call("serve", endpoint=f"{namespace}.backend.generate")
        endpoint = next_event(watch).instance
        peer.kill()
        killed = time.monotonic()
        assert next_event(watch, timeout=RUST_LEASE_TTL + 10) == ds.Removed(endpoint.id())
        assert time.monotonic() - killed < RUST_LEASE_TTL + 3


def test_our_etcd_registration_reaches_the_rust_client(client, rust_etcd_peer, namespace):
    peer = rust_etcd_peer()
    path = f"{namespace}.backend.generate"
    peer.call("ids", endpoint=path)
    ours = client.register(ds.EndpointSpec(namespace, "backend", "generate", ds.Transport.tcp("127.0.0.1:1/py")))
    assert peer.call("wait_ids", endpoint=path, present=[ours.instance_id], timeout=1.0)["seen"]
    client.shutdown()  # revokes our lease
    assert peer.call("wait_ids", endpoint=path, absent=[ours.instance_id], timeout=1.0)["seen"]


def test_rust_model_taints_on_etcd_reach_our_watch(client, rust_etcd_peer, namespace, tiny_model):
    peer = rust_etcd_peer()
    path = f"{namespace}.backend.generate"
    peer.call("serve", endpoint=path)
    with client.list_and_watch(ds.Query.models(namespace)) as watch:
        next_event(watch)
        peer.call("register_model", endpoint=path, path=str(tiny_model), name="tiny")
        model = next_event(watch).instance
        assert model.card_json["display_name"] == "tiny"
        peer.call("update_taints", endpoint=path, taints=["b", "a"])
        assert next_event(watch) == ds.ModelTaintsUpdated(model.id(), ("a", "b"))
