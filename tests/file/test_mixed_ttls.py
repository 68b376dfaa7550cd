"""Liveness when clients with different TTLs share a store, and while this client cannot see the
store (docs/design.md §6, "Mixed TTLs" and "A store that stalls"), on a made-up clock.

A reader judges a record by its own TTL, or longer when the record's writer beats slower: the
step between two of the record's mtimes is its writer's heartbeat, a third of the writer's TTL
(at most 10 s). Before a reader has seen a step it assumes the slowest (10 s)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file.directory import StoreDirectory
from discovery_sync.backends.file.liveness import Patience, heartbeat_interval
from discovery_sync.backends.file.view import BucketView

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from tests.file.junk import hand_written

NS = 1_000_000_000


class Clock(ManualClock):
    """A manual clock whose ``now`` a test sets."""

    @property
    def now(self) -> float:
        return self.monotonic()

    @now.setter
    def now(self, value: float) -> None:
        self.advance(value - self.monotonic())


class RecordingView(BucketView):
    """A view whose scans keep the events they return (as a client would publish them)."""

    events: list[ds.DiscoveryEvent]

    def refresh(self) -> None:
        self.events.extend(event for event, _ in self.scan_deep())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def bucket(store: Path) -> Iterator[StoreDirectory]:
    directory = StoreDirectory(store, "v1/instances")
    directory.open(create=True)
    yield directory
    directory.close()


def reader(bucket: StoreDirectory, clock: Clock, ttl: float, events: list | None = None) -> RecordingView:
    patience = Patience(ttl) if Patience.needed(ttl) else None
    view = RecordingView(ds.RecordKind.ENDPOINT, bucket, ttl, clock=clock, patience=patience)
    view.events = events if events is not None else []
    return view


class Writer:
    """A record whose mtime a writer with ``ttl`` moves, beat by beat, as the clock runs."""

    def __init__(self, store: Path, clock: Clock, ttl: float, name: str = "w", instance_id: int = 1) -> None:
        self.record, self.path = hand_written(store, name, instance_id)
        self.clock = clock
        self.step = heartbeat_interval(ttl)
        self.mtime_ns = 1_700_000_000 * NS
        os.utime(self.path, ns=(self.mtime_ns, self.mtime_ns))

    def beat(self, *, wait: bool = True) -> None:
        """One heartbeat, a step after the last (``wait``: the clock moves on by the step first)."""
        if wait:
            self.clock.now += self.step
        self.mtime_ns += round(self.step * NS)
        os.utime(self.path, ns=(self.mtime_ns, self.mtime_ns))


def alive(view: BucketView) -> bool:
    return bool(view.valid()) and not view.dead(frozenset())


def test_every_writer_beats_at_least_as_often_as_a_reference_worker_needs():
    assert [round(heartbeat_interval(ttl), 3) for ttl in (1, 3, 10, 30, 3600)] == [0.333, 1.0, 3.333, 3.333, 3.333]


@pytest.mark.parametrize(
    ("reader_ttl", "step", "waits"),
    [
        (1, 0, 10.0),  # no step seen yet: the slowest heartbeat there is
        (1, 1 / 3, 1.0),  # a writer with TTL 1
        (1, 1.0, 3.0),  # TTL 3
        (1, 10 / 3, 10.0),  # TTL 10 and more, and reference workers
        (3, 1 / 3, 3.0),  # never shorter than the reader's own TTL
        (5, 10 / 3, 10.0),
        (9.5, 0, 10.0),
    ],
)
def test_a_reader_waits_as_long_as_the_writers_heartbeat_asks(reader_ttl, step, waits):
    patience = Patience(reader_ttl)
    assert reader_ttl + patience.slack(round(step * NS)) == pytest.approx(waits)


def test_a_reader_with_a_ttl_of_ten_seconds_or_more_needs_no_slack():
    assert not Patience.needed(10) and not Patience.needed(30) and Patience.needed(9.99)


@pytest.mark.parametrize("writer_ttl", [3, 10, 30])
def test_a_short_ttl_reader_never_judges_a_slower_writer_dead_while_it_beats(store, bucket, clock, writer_ttl):
    events: list = []
    view = reader(bucket, clock, 1.0, events)
    writer = Writer(store, clock, writer_ttl)
    view.refresh()
    for _ in range(60):  # scanned every 0.2 s of its clock, as a reader with TTL 1 rescans
        for _ in range(round(writer.step / 0.2)):
            clock.now += 0.2
            view.refresh()
            assert alive(view), clock.now
        writer.beat()
        view.refresh()
    assert events == [ds.Added(writer.record)]


def test_a_writer_that_stops_is_judged_dead_after_what_its_heartbeat_asked(store, bucket, clock):
    view = reader(bucket, clock, 1.0)
    slow = Writer(store, clock, 10, "slow", 1)
    view.refresh()
    slow.beat()
    view.refresh()  # one step seen: 3.33 s, so 10 s
    clock.now += 9.9
    assert alive(view)
    clock.now += 0.2
    assert [name for name, _ in view.dead(frozenset())] == [slow.path.name]


def test_a_fast_writer_is_judged_dead_after_the_readers_ttl_once_two_steps_agree(store, bucket, clock):
    view = reader(bucket, clock, 1.0)
    fast = Writer(store, clock, 1, "fast", 2)
    view.refresh()
    clock.now += 5.0  # no step seen yet: 10 s
    assert alive(view)
    fast.beat()
    view.refresh()
    clock.now += 5.0  # one step alone is no evidence: still 10 s
    assert alive(view)
    fast.beat()
    view.refresh()  # the second step confirms the first: the writer beats every 0.33 s
    clock.now += 0.9
    assert alive(view)
    clock.now += 0.2
    assert not view.valid()


def test_a_new_content_under_the_name_starts_without_evidence(store, bucket, clock):
    view = reader(bucket, clock, 1.0)
    fast = Writer(store, clock, 1, "fast", 2)
    view.refresh()
    fast.beat()
    view.refresh()
    replaced = ds.Endpoint("ns", "backend", "fast", 2, ds.Transport.tcp("127.0.0.1:9"))
    fast.path.write_bytes(ds.instance_to_json(replaced))  # another writer's value: its heartbeat is unknown
    view.refresh()
    clock.now += 5.0
    assert view.valid() == [replaced]


def test_nothing_is_judged_dead_while_the_view_is_blind_and_each_record_gets_a_full_ttl_after(store, bucket, clock):
    events: list = []
    view = reader(bucket, clock, 10.0, events)
    writer = Writer(store, clock, 10)
    view.refresh()
    view.pause_judging("this client's heartbeat fails (Read-only file system)")
    clock.now += 60.0
    view.refresh()
    assert alive(view) and view.listed("", ds.Query.endpoints()) == (writer.record,)
    view.resume_judging()  # it sees again: the clocks start now
    clock.now += 9.9
    assert alive(view)
    clock.now += 0.2
    assert not view.valid()
    assert events == [ds.Added(writer.record)]  # nothing was published Removed meanwhile


def test_a_scan_that_stalls_restarts_every_clock(store, bucket, clock, monkeypatch):
    view = reader(bucket, clock, 10.0)
    Writer(store, clock, 10)
    view.refresh()
    for _ in range(10):
        view.refresh()  # the usual cost of a scan: no time at all on this clock
    stalled = view._scan_directory

    def frozen_mount(*args: object) -> list:  # the scan's system calls wait 30 s for the store
        clock.now += 30.0
        return stalled(*args)

    monkeypatch.setattr(view, "_scan_directory", frozen_mount)
    view.refresh()
    assert alive(view)  # what the stalled scan read is as old as its start: a full TTL from now
    clock.now += 9.9
    assert alive(view)
    clock.now += 0.2
    assert not view.valid()


def scanned_alive(view: RecordingView, clock: Clock, seconds: float) -> None:
    """Let ``seconds`` pass, scanning every 0.2 s as a reader with TTL 1 rescans: alive at each scan."""
    for _ in range(round(seconds / 0.2)):
        clock.now += 0.2
        view.refresh()
        assert alive(view), clock.now


def beats_watched(view: RecordingView, clock: Clock, writer: Writer, beats: int) -> None:
    """``beats`` heartbeats of ``writer``, the reader scanning every 0.2 s in between: alive at each scan."""
    for _ in range(beats):
        scanned_alive(view, clock, writer.step - 0.2)
        clock.now += 0.2
        writer.beat(wait=False)
        view.refresh()


def watched_writer(
    store: Path, bucket: StoreDirectory, clock: Clock, writer_ttl: float
) -> tuple[RecordingView, Writer, list[ds.DiscoveryEvent]]:
    """A TTL-1 reader (and the events it hands out) of a writer of ``writer_ttl`` that has beaten
    three times: its heartbeat is confirmed evidence."""
    events: list[ds.DiscoveryEvent] = []
    view = reader(bucket, clock, 1.0, events)
    writer = Writer(store, clock, writer_ttl)
    view.refresh()
    for _ in range(3):
        writer.beat()
        view.refresh()
    return view, writer, events


def set_mtime(path: Path, mtime_ns: int) -> None:
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_a_stray_touch_between_two_beats_never_shortens_a_readers_patience(store, bucket, clock):
    """An operator's or a backup tool's ``touch`` 0.6 s after a beat of a TTL-10 writer: one short
    step, which the writer's next beat (2.7 s later) contradicts."""
    view, writer, events = watched_writer(store, bucket, clock, 10)
    for _ in range(3):
        scanned_alive(view, clock, 0.6)
        set_mtime(writer.path, writer.mtime_ns + round(0.6 * NS))  # the stray touch
        view.refresh()
        scanned_alive(view, clock, writer.step - 0.6 - 0.2)
        clock.now += 0.2
        writer.beat(wait=False)
        view.refresh()
    beats_watched(view, clock, writer, 3)  # the writer beats on, undisturbed
    assert events == [ds.Added(writer.record)]


def test_a_writer_whose_clock_steps_back_is_never_judged_dead(store, bucket, clock):
    """NTP steps a TTL-10 writer's wall clock back 3 s: its next mtime is 0.33 s after the last
    one, the one after that a full 3.33 s step."""
    view, writer, events = watched_writer(store, bucket, clock, 10)
    writer.mtime_ns -= 3 * NS  # the step back, seen at the next beat
    beats_watched(view, clock, writer, 4)
    assert events == [ds.Added(writer.record)]


def test_a_successors_takeover_with_the_same_bytes_starts_without_evidence(store, bucket, clock):
    """A failover successor (TTL 10) writes the same record to a new file 0.3 s after its
    predecessor's last beat (compare-and-replace): the 0.3 s step is no heartbeat of its own."""
    view, writer, events = watched_writer(store, bucket, clock, 1)  # a fast predecessor: a 0.33 s heartbeat
    successor = writer.path.with_name(writer.path.name + ".new")
    successor.write_bytes(writer.path.read_bytes())
    clock.now += 0.3
    writer.mtime_ns += round(0.3 * NS)
    set_mtime(successor, writer.mtime_ns)
    os.replace(successor, writer.path)
    view.refresh()
    writer.step = heartbeat_interval(10)  # the successor beats as a TTL-10 writer
    beats_watched(view, clock, writer, 4)
    assert events == [ds.Added(writer.record)]
