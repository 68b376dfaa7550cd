"""The post-write half of the model conflict check: a conflicting record that appears while we
write (a lock-free peer, e.g. a reference worker) makes our write roll back."""

from __future__ import annotations

import pytest
from discovery_sync.backends.memory import MemoryDiscovery, MemoryRegistry

import discovery_sync as ds
from testrigs.helpers import model_spec


class PeerWritesDuringCreate(MemoryDiscovery):
    """A memory client whose store receives a peer's model right after each of our creates."""

    def __init__(self, registry: MemoryRegistry, peer_model: ds.Model, *, fail_rollback: bool = False) -> None:
        super().__init__(registry)
        self.peer_model = peer_model
        self.fail_rollback = fail_rollback

    def _create(self, instance):
        existing = super()._create(instance)
        if isinstance(instance, ds.Model):
            self.registry.create(self.peer_model)
        return existing

    def _delete(self, instance_id):
        if self.fail_rollback:
            raise ds.BackendUnavailable("store went away")
        super()._delete(instance_id)


def peer(name: str) -> ds.Model:
    return model_spec(name).to_instance(instance_id=12345)


def test_a_conflict_found_after_writing_rolls_the_write_back():
    registry = MemoryRegistry()
    client = PeerWritesDuringCreate(registry, peer("peer-model"))
    with client.list_and_watch(ds.Query.models()) as watch:
        assert watch.get(timeout=1) == ds.Resync(())
        with pytest.raises(ds.ConflictError, match="peer-model"):
            client.register(model_spec("our-model"))
        ours = model_spec("our-model").to_instance(client.instance_id)
        assert [watch.get(timeout=1) for _ in range(3)] == [
            ds.Added(ours),
            ds.Added(peer("peer-model")),
            ds.Removed(ours.id()),
        ]
    assert registry.list(ds.Query.models()) == [peer("peer-model")]
    assert client.owned() == ()


def test_the_same_model_from_a_peer_is_not_a_conflict():
    registry = MemoryRegistry()
    client = PeerWritesDuringCreate(registry, peer("shared-model"))
    stored = client.register(model_spec("shared-model"))
    assert {m.instance_id for m in registry.list(ds.Query.models())} == {stored.instance_id, 12345}


def test_a_failed_rollback_is_reported_with_both_causes():
    client = PeerWritesDuringCreate(MemoryRegistry(), peer("peer-model"), fail_rollback=True)
    with pytest.raises(ds.ConflictError, match="rolling the write back failed as well: store went away"):
        client.register(model_spec("our-model"))
