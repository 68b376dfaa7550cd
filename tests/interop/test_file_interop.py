"""A reference-runtime 1.6.1 worker and a discovery-sync client on one file store."""

from __future__ import annotations

import time

import pytest

import discovery_sync as ds
from testrigs.helpers import initial_state, next_event

ENDPOINT = "pyns.backend.generate"
# reference workers heartbeat every 3.33 s and are dead for us after 10 s without one,
# judged from when we first saw their last mtime, then removed at our next rescan
KILL_DEADLINE = 10 + 3.4 + 2 + 2


@pytest.fixture
def client(file_store):
    client = ds.connect(f"file://{file_store}")  # the defaults: TTL 10 s, as the reference
    yield client
    client.shutdown()


def wait_added(watch: ds.Watch, timeout: float = 10.0) -> ds.DiscoveryInstance:
    event = next_event(watch, timeout)
    assert isinstance(event, ds.Added), event
    return event.instance


def test_a_rust_worker_is_listed_and_watched_with_its_exact_record(client, rust_peer):
    peer = rust_peer()
    with client.list_and_watch(ds.Query.endpoints("pyns", "backend", "generate")) as watch:
        assert next_event(watch) == ds.Resync(())
        instance_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
        endpoint = wait_added(watch)
        assert endpoint.instance_id == instance_id
        assert endpoint.transport.kind == "tcp"
        assert endpoint.transport.value.startswith("127.0.0.1:")
        assert endpoint.transport.value.endswith(f"/{instance_id:x}/pyns/backend/generate")
        assert endpoint.device_type == "cuda"
        assert endpoint.request_plane_codec == "msgpack"
        assert client.list(ds.Query.endpoints("pyns")) == [endpoint]
        peer.shutdown()
        assert next_event(watch) == ds.Removed(endpoint.id())


@pytest.mark.slow
def test_a_killed_rust_worker_is_removed_within_ttl_plus_a_rescan(client, rust_peer):
    peer = rust_peer()
    with client.list_and_watch(ds.Query.endpoints("pyns")) as watch:
        next_event(watch)
        peer.call("serve", endpoint=ENDPOINT)
        endpoint = wait_added(watch)
        peer.kill()
        killed = time.monotonic()
        assert next_event(watch, timeout=KILL_DEADLINE + 5) == ds.Removed(endpoint.id())
        assert time.monotonic() - killed < KILL_DEADLINE


def test_our_registration_reaches_the_rust_client_within_a_second(client, rust_peer):
    peer = rust_peer()
    peer.call("ids", endpoint=ENDPOINT)  # the Rust client is up before we register
    ours = client.register(ds.EndpointSpec("pyns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1/py")))
    seen = peer.call("wait_ids", endpoint=ENDPOINT, present=[ours.instance_id], timeout=1.0)
    assert seen["seen"], seen
    listed = peer.call("instances", endpoint=ENDPOINT)["instances"]
    assert [i["instance_id"] for i in listed] == [client.instance_id]
    client.shutdown()
    gone = peer.call("wait_ids", endpoint=ENDPOINT, absent=[ours.instance_id], timeout=1.0)
    assert gone["seen"], gone


@pytest.mark.slow
def test_sharing_a_store_for_three_ttls_nobody_sweeps_a_live_peer(client, rust_peer):
    peer = rust_peer()
    rust_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    ours = client.register(ds.EndpointSpec("pyns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1/py")))
    assert peer.call("wait_ids", endpoint=ENDPOINT, present=[rust_id, ours.instance_id])["seen"]
    with client.list_and_watch(ds.Query.endpoints("pyns")) as watch:
        _, resync = initial_state(watch)
        assert {i.instance_id for i in resync.instances} == {rust_id, ours.instance_id}
        deadline = time.monotonic() + 30  # 3 x the 10 s TTL both sides use
        while time.monotonic() < deadline:
            with pytest.raises(ds.WatchTimeout):  # any event here would be a sweep of a live record
                watch.get(timeout=min(5.0, max(0.0, deadline - time.monotonic())))
            ids = peer.call("ids", endpoint=ENDPOINT)["ids"]
            assert ids == sorted([rust_id, ours.instance_id])
    assert {i.instance_id for i in client.list(ds.Query.endpoints("pyns"))} == {rust_id, ours.instance_id}


def test_models_and_taints_cross_in_both_directions(client, rust_peer, tiny_model):
    peer = rust_peer()
    rust_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    with client.list_and_watch(ds.Query.models("pyns", "backend", "generate")) as watch:
        next_event(watch)
        peer.call("register_model", endpoint=ENDPOINT, path=str(tiny_model), name="tiny", topology={"zone": "z1"})
        model = wait_added(watch)
        assert (model.instance_id, model.card_json["display_name"]) == (rust_id, "tiny")
        assert model.card_json["source_path"] == str(tiny_model)
        assert model.card_json["runtime_config"]["taints"] == ["dynamo.topology/zone=z1"]
        peer.call("update_taints", endpoint=ENDPOINT, taints=["zeta", "alpha"])
        expected = ("alpha", "dynamo.topology/zone=z1", "zeta")
        assert next_event(watch) == ds.ModelTaintsUpdated(model.id(), expected)

    # the other way: we serve the same model on the endpoint; the runtime's own MDC watch (its
    # FpmEventSubscriber tracks the model cards of an endpoint) reflects our taint update
    with pytest.raises(ds.ConflictError):  # and a different model there is refused, as Rust does
        client.register(ds.ModelSpec("pyns", "backend", "generate", {"display_name": "other"}))
    card = {"display_name": "tiny", "source_path": str(tiny_model), "runtime_config": {}}
    ours = client.register(ds.ModelSpec("pyns", "backend", "generate", card))
    assert rust_cards(peer, client.instance_id, lambda c: c is not None)["display_name"] == "tiny"
    client.update_model_taints(ours.id(), ["gpu=none", "b"])
    updated = rust_cards(peer, client.instance_id, lambda c: c["runtime_config"].get("taints") == ["b", "gpu=none"])
    assert updated["runtime_config"]["taints"] == ["b", "gpu=none"]


def test_a_base_model_live_view_shows_one_entry_for_a_rust_worker_with_a_lora_card(client, rust_peer, tiny_model):
    peer = rust_peer()
    rust_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    query = ds.Query.models("pyns", "backend", "generate")
    names = client.live_view(query, lambda card: card["display_name"], base_models_only=True)
    every_card = client.live_view(query, lambda card: card["display_name"], key=lambda model: model.id())
    with names, every_card:
        peer.call("register_model", endpoint=ENDPOINT, path=str(tiny_model), name="tiny")
        peer.call(
            "register_model",
            endpoint=ENDPOINT,
            path=str(tiny_model),
            name="tiny-adapter",
            lora_name="adapter-a",
            base_model_path=str(tiny_model),
        )
        cards = every_card.wait_for(lambda m: len(m) == 2, timeout=10)
        assert sorted(i.model_suffix or "" for i in cards) == ["", "adapter-a"]  # the LoRA card is in the store
        assert names.wait_for(lambda m: len(m) == 1, timeout=10) == {rust_id: "tiny"}


def rust_cards(peer, instance_id: int, done, timeout: float = 5.0):
    """Poll the reference peer's view of one worker's model card until ``done(card)``."""
    deadline = time.monotonic() + timeout
    while True:
        card = peer.call("model_cards", endpoint=ENDPOINT)["cards"].get(str(instance_id))
        if done(card):
            return card
        assert time.monotonic() < deadline, f"the reference peer shows {card!r}"
        time.sleep(0.01)  # the runtime offers no notification for this view, only a snapshot


def test_a_rust_event_publisher_is_found_by_scope_and_topic(client, rust_peer):
    peer = rust_peer()
    rust_id = peer.call("serve", endpoint=ENDPOINT)["instance_id"]
    scope = ds.EventScope.for_endpoint(ds.EndpointId("pyns", "backend", "generate"))
    channels = client.list_and_watch(ds.Query.event_channels(scope, "kv-events"))
    sources = client.list_and_watch(ds.Query.event_sources(scope, "kv-events"))
    with channels, sources:
        next_event(channels)
        next_event(sources)
        peer.call("kv_publisher", endpoint=ENDPOINT)
        channel = wait_added(channels)
        source = wait_added(sources)  # the publisher writes its channel and its source separately
    assert channel.scope == scope and channel.topic == "kv-events"
    assert channel.transport.kind() is ds.EventTransportKind.ZMQ
    assert channel.transport.address().startswith("tcp://127.0.0.1:")
    assert source.publisher_id == channel.instance_id
    assert source.metadata["worker"]["worker_id"] == rust_id
    assert client.list(ds.Query.event_channels(scope, "kv-events")) == [channel]
