"""``list()`` of the file store reuses what it read, yet sees every write finished before it.

A ``list()`` reads the directory every time; a file whose directory entry shows the inode the
view knows is not stat-ed while the directory itself did not change, and the ordered result of an
unchanged bucket is reused. These tests change the store by hand between two ``list()`` calls of
one client, the ways another process could, including those that keep the size, the mtime and
even the inode of a file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file import view as file_view
from discovery_sync.backends.file.view import LISTING

import discovery_sync as ds
from tests.file.junk import hand_written

QUIET = "rescan_interval=3600"  # no rescan meanwhile: list() alone must see the change


def endpoint(name: str, instance_id: int, address: str) -> ds.Endpoint:
    return ds.Endpoint("ns", "backend", name, instance_id, ds.Transport.tcp(address))


def bucket(store: Path) -> Path:
    return store / "v1" / "instances"


def settle(directory: Path) -> None:
    """Make the directory's mtime old, so that a reader trusts it to show any later change."""
    os.utime(directory, ns=(time.time_ns() - 3600 * 10**9,) * 2)


def atomic_write(path: Path, record: ds.Endpoint, mtime_ns: int | None = None) -> None:
    """A complete file renamed over ``path`` (a new inode), with the given mtime."""
    temp = path.parent / f".tmp_{path.name}"
    temp.write_bytes(ds.instance_to_json(record))
    if mtime_ns is not None:
        os.utime(temp, ns=(mtime_ns, mtime_ns))
    os.replace(temp, path)


@pytest.fixture
def reader(store: Path) -> Iterator[ds.Discovery]:
    bucket(store).mkdir(parents=True)
    client = ds.connect(f"file://{store}?ttl=3600&{QUIET}")
    try:
        yield client
    finally:
        client.shutdown()


def test_a_record_replaced_with_the_same_size_and_mtime_is_seen_by_the_next_list(store, reader):
    first = endpoint("same", 1, "127.0.0.1:1111")
    second = endpoint("same", 1, "127.0.0.1:2222")  # as many bytes
    path = bucket(store) / "ns%2Fbackend%2Fsame%2F1"
    atomic_write(path, first)
    settle(bucket(store))
    assert reader.list(ds.Query.endpoints()) == [first]
    assert reader.list(ds.Query.endpoints()) == [first]  # the view's own result, reused
    mtime = path.stat().st_mtime_ns
    atomic_write(path, second, mtime_ns=mtime)
    assert path.stat().st_size == len(ds.instance_to_json(first))
    assert reader.list(ds.Query.endpoints()) == [second]


def test_a_record_deleted_and_written_again_on_a_reused_inode_is_seen(store, reader):
    # ext4 hands a freed inode to the next file created: the new record may have the old
    # record's inode, size and (set here) mtime; only the directory's change shows it
    first = endpoint("again", 2, "127.0.0.1:1111")
    second = endpoint("again", 2, "127.0.0.1:2222")
    path = bucket(store) / "ns%2Fbackend%2Fagain%2F2"
    atomic_write(path, first)
    settle(bucket(store))
    settled = bucket(store).stat().st_mtime_ns
    assert reader.list(ds.Query.endpoints()) == [first]
    assert reader.list(ds.Query.endpoints()) == [first]  # the directory unchanged: no file stat-ed
    before = path.stat()
    path.unlink()
    atomic_write(path, second, mtime_ns=before.st_mtime_ns)
    os.utime(bucket(store), ns=(settled, settled))  # even the directory's mtime put back
    assert reader.list(ds.Query.endpoints()) == [second]


def test_an_unchanged_bucket_lists_the_same_records_in_a_list_of_its_own(store, reader):
    records = [hand_written(store, f"e{i}", i + 1)[0] for i in (3, 1, 2)]
    settle(bucket(store))
    listed = reader.list(ds.Query.endpoints())
    assert listed == sorted(records, key=lambda r: r.id().to_path())
    listed.clear()  # the caller's to change: the next result is not affected
    assert reader.list(ds.Query.endpoints()) == sorted(records, key=lambda r: r.id().to_path())


def test_queries_of_one_bucket_each_get_their_own_records(store, reader):
    mine = reader.register(ds.EndpointSpec("other", "svc", "mine", ds.Transport.tcp("127.0.0.1:9")))
    theirs, _ = hand_written(store, "theirs", 5)
    assert reader.list(ds.Query.endpoints("ns")) == [theirs]
    assert reader.list(ds.Query.endpoints("other")) == [mine]
    assert reader.list(ds.Query.endpoints()) == [theirs, mine]  # by identity path
    assert reader.list(ds.Query.endpoints("ns", "backend", "nothing")) == []
    assert reader.list(ds.Query.endpoints("ns")) == [theirs]


def test_new_and_removed_files_are_seen_by_the_next_list(store, reader):
    one, path = hand_written(store, "one", 6)
    settle(bucket(store))
    assert reader.list(ds.Query.endpoints()) == [one]
    two, _ = hand_written(store, "two", 7)
    assert reader.list(ds.Query.endpoints()) == [one, two]
    path.unlink()
    assert reader.list(ds.Query.endpoints()) == [two]


def test_a_record_whose_mtime_stops_leaves_the_list_and_comes_back_with_a_heartbeat(store, steps):
    # nothing in the bucket changes meanwhile: the reused result must expire with its record
    ttl = 1.0
    bucket(store).mkdir(parents=True)
    record, path = hand_written(store, "still", 8)
    reader = ds.connect(f"file://{store}?ttl={ttl}&read_only=true&{QUIET}", clock=steps.clock)
    try:
        assert reader.list(ds.Query.endpoints()) == [record]
        seen_at = steps.clock.monotonic()
        # never seen to beat: it may be a writer that beats every 3.33 s (docs/design.md §6), 10 s
        left_at = steps.until(lambda: not reader.list(ds.Query.endpoints()), step=ttl / 10, limit=10 * ttl + ttl / 10)
        assert reader.longest_dead_after <= left_at - seen_at <= reader.longest_dead_after + ttl / 10
        assert reader.list(ds.Query.endpoints()) == []
        mtime_ns = path.stat().st_mtime_ns + 10**9
        os.utime(path, ns=(mtime_ns, mtime_ns))  # a heartbeat: a full rescan sees the mtime move
        reader.rescan()  # type: ignore[attr-defined]  # a FileDiscovery's
        assert reader.list(ds.Query.endpoints()) == [record]
    finally:
        reader.shutdown()


def test_list_does_not_even_list_a_settled_bucket_that_did_not_change(store, reader, monkeypatch):
    listings: list[str] = []
    real = file_view.survey

    def counting(dir_fd: int, name_prefix: str, *args: object, **kwargs: object) -> object:
        listings.append(name_prefix)
        return real(dir_fd, name_prefix, *args, **kwargs)

    monkeypatch.setattr(file_view, "survey", counting)
    one, _ = hand_written(store, "one", 6)
    settle(bucket(store))
    assert reader.list(ds.Query.endpoints()) == [one]
    assert len(listings) == 1
    assert reader.list(ds.Query.endpoints()) == [one]
    assert len(listings) == 1  # the directory's inode, mtime and ctime were enough
    two, _ = hand_written(store, "two", 7)
    assert reader.list(ds.Query.endpoints()) == [one, two]
    assert len(listings) == 2


def test_a_new_file_a_rescan_held_back_is_in_the_next_list(store, reader):
    # a rescan publishes a change only once it has stood the notice grace (a notification may
    # still deliver it): until then its view lacks the file, so the next list() must read the
    # directory even though it did not change since that rescan
    assert reader.list(ds.Query.endpoints()) == []
    record, _ = hand_written(store, "late", 9)
    settle(bucket(store))
    reader.rescan(scan=LISTING)  # type: ignore[attr-defined]  # a FileDiscovery's
    assert reader.list(ds.Query.endpoints()) == [record]
