"""Endpoint leases on a file store that refuses writes (a real read-only bind mount) and on one
whose record is deleted by hand: a release retrying its unregister never holds up a lease of the
same endpoint, and a lease never counts on a record that is not there."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.helpers import LogCatcher, endpoint_spec, in_thread
from tests.file.disks import BindMount, bind_mounted

PROMPTLY = 2.0  # a lease that waits for no store call is done within this
RETRY_BOUND = 6.0  # the longest wait between two attempts of a release (5 s, +20 % jitter)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root): mount")


class Mount(BindMount):
    """A bind mount that a test makes read-only and writable again; clients connect through
    ``path``, a hand deletes files through ``source``."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.clients: list[ds.Discovery] = []

    def connect(self) -> ds.Discovery:
        self.clients.append(ds.connect(f"file://{self.path / 'store'}?ttl=5"))
        return self.clients[-1]

    def record(self, endpoint: ds.Endpoint) -> Path:
        """The record's file, as seen through the writable source."""
        client = self.clients[0]
        name = client.layout.file_name(endpoint.id())
        return self.source / "store" / "v1" / "instances" / name


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    with bind_mounted(Mount(tmp_path)) as store:
        try:
            yield store
        finally:
            store.read_only(False)  # so that shutdown() removes what the clients registered
            for client in store.clients:
                client.shutdown()


def retrying_release(lease: ds.EndpointLease, thread_log: LogCatcher) -> threading.Thread:
    """Release ``lease`` on a thread of its own, and return once its unregister has been refused twice."""
    releaser, _ = in_thread("test-releaser", lease.release)
    assert thread_log.count("the filesystem holding the store is read-only", at_least=2) >= 2  # 50 ms, 100 ms
    assert releaser.is_alive()
    return releaser


@needs_root
def test_a_lease_taken_while_a_release_retries_on_a_read_only_store_shares_the_record(mount, thread_log):
    client = mount.connect()
    first = client.lease_endpoint(endpoint_spec())
    record = mount.record(first.instance)
    mount.read_only(True)
    releaser = retrying_release(first, thread_log)

    started = time.monotonic()
    taker, taken = in_thread("test-lessee", lambda: client.lease_endpoint(endpoint_spec()))
    taker.join(PROMPTLY)
    still_waiting, waited = taker.is_alive(), time.monotonic() - started
    releaser.join(PROMPTLY)
    assert not still_waiting, "a lease waited for a release retrying its unregister on a read-only store"
    assert waited < PROMPTLY
    assert not releaser.is_alive(), "the release went on retrying after a lease took the registration again"
    second = taken[0]
    assert isinstance(second, ds.EndpointLease) and second.instance == first.instance
    assert record.exists() and client.get(second.id) == second.instance

    mount.read_only(False)
    second.release()
    assert not record.exists()
    assert client.get(second.id) is None


@needs_root
def test_a_lease_of_a_record_deleted_while_a_release_retries_on_a_read_only_store_says_why(mount, thread_log):
    client = mount.connect()
    first = client.lease_endpoint(endpoint_spec())
    record = mount.record(first.instance)
    mount.read_only(True)
    releaser = retrying_release(first, thread_log)
    record.unlink()  # by hand, through a writable path to the same files

    started = time.monotonic()
    taker, taken = in_thread("test-lessee", lambda: client.lease_endpoint(endpoint_spec()))
    taker.join(PROMPTLY)
    still_waiting, waited = taker.is_alive(), time.monotonic() - started
    mount.read_only(False)
    assert not still_waiting, "a lease waited for a release retrying its unregister on a read-only store"
    assert waited < PROMPTLY
    failure = taken[0]
    assert isinstance(failure, ds.BackendUnavailable), failure
    message = str(failure)
    assert "the release of its last lease is still retrying to remove it" in message
    assert message.count("the filesystem holding the store is read-only") == 2  # the release's, the lease's
    assert "registering it again" in message and "retry once the store takes writes again" in message

    releaser.join(RETRY_BOUND + PROMPTLY)  # its next attempt finds the record gone
    assert not releaser.is_alive()
    with client.lease_endpoint(endpoint_spec()) as lease:
        assert record.exists() and client.get(lease.id) == lease.instance
    assert not record.exists()


@needs_root
def test_a_lease_of_a_held_endpoint_whose_record_was_deleted_by_hand_writes_it_again(mount):
    client = mount.connect()
    held = [client.lease_endpoint(endpoint_spec()) for _ in range(2)]
    record = mount.record(held[0].instance)
    record.unlink()
    held.append(client.lease_endpoint(endpoint_spec()))
    assert record.exists(), "the lease counted on a record that was not there"
    assert client.get(held[0].id) == held[0].instance
    for lease in held:
        assert record.exists()
        lease.release()
    assert not record.exists()
