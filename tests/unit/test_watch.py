"""WatchFeed (producer side) and Watch (consumer side) without any backend (docs/design.md §4, §5 "Watch")."""

import queue
import threading

import pytest

from discovery_sync import (
    Added,
    DiscoveryError,
    ModelTaintsUpdated,
    Query,
    Removed,
    Resync,
    Transport,
    Watch,
    WatchClosed,
    WatchFailed,
    WatchTimeout,
)
from discovery_sync.watch import WatchFeed
from tests.unit.helpers import card, endpoint, model

JOIN_TIMEOUT = 5.0


def open_watch(query=None, **options):
    feed = WatchFeed(query or Query.endpoints(), **options)
    return feed, Watch(feed)


def started(snapshot=(), query=None, **options):
    """A watch whose initial Added/Resync events were already consumed."""
    feed, watch = open_watch(query, **options)
    feed.start(snapshot)
    events = drain(watch)
    assert isinstance(events[-1], Resync)
    return feed, watch


def drain(watch, timeout=0.0):
    """Every event available now (the feed is driven synchronously, so nothing is still in flight)."""
    events = []
    while True:
        try:
            events.append(watch.get(timeout=timeout))
        except WatchTimeout:
            return events


def ids(instances):
    return {instance.id() for instance in instances}


def in_thread(target):
    """Run ``target`` in a daemon thread; return the thread and a dict receiving its result or error."""
    outcome = {}

    def run():
        try:
            outcome["result"] = target()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def joined(thread):
    thread.join(JOIN_TIMEOUT)
    return not thread.is_alive()


# -- start -----------------------------------------------------------------------------------------
def test_start_yields_one_added_per_matching_record_then_one_resync():
    mine = [endpoint(2), endpoint(1)]
    feed, watch = open_watch(Query.endpoints("ns"))
    feed.start([*mine, endpoint(3, namespace="other"), model(1)])
    events = drain(watch)
    assert [type(e) for e in events] == [Added, Added, Resync]
    assert ids(e.instance for e in events[:2]) == ids(mine)
    assert ids(events[-1].instances) == ids(mine)
    assert drain(watch) == []


def test_initial_events_taken_one_by_one_keep_their_order_and_count_as_delivered_when_taken():
    records = [endpoint(i) for i in (3, 1, 2)]
    feed, watch = open_watch()
    feed.start(records)
    assert feed.delivered() == [0, 0, 0, 0]  # all pending: none taken
    first = watch.get(timeout=0)
    assert isinstance(first, Added) and first.instance.id() == endpoint(1).id()
    assert feed.delivered() == [1, 0, 0, 0]
    feed.added(endpoint(4))  # a change queued meanwhile comes after the Resync
    rest = drain(watch)
    assert [type(e) for e in rest] == [Added, Added, Resync, Added]
    assert [e.instance.instance_id for e in rest[:2]] == [2, 3]
    assert rest[2].instances == tuple(sorted(records, key=lambda r: r.instance_id))
    assert rest[3] == Added(endpoint(4))
    assert feed.delivered() == [4, 0, 0, 1]


def test_start_with_nothing_yields_an_empty_resync():
    feed, watch = open_watch()
    feed.start([])
    assert drain(watch) == [Resync(())]


def test_changes_follow_the_resync():
    feed, watch = started([endpoint(1)])
    feed.added(endpoint(2))
    feed.removed(endpoint(1).id())
    assert drain(watch) == [Added(endpoint(2)), Removed(endpoint(1).id())]


def test_a_feed_delivers_the_very_event_objects_it_is_given():
    feed, watch = started([endpoint(1)])
    added, removed = Added(endpoint(2)), Removed(endpoint(1).id())
    assert feed.publish(added) and feed.publish(removed)
    delivered = drain(watch)
    assert delivered == [added, removed] and delivered[0] is added and delivered[1] is removed
    with pytest.raises(TypeError):
        feed.publish(Resync(()))  # a Resync is the feed's own


def test_records_outside_the_query_are_not_delivered():
    feed, watch = started(query=Query.endpoints("ns", "comp"))
    assert feed.added(endpoint(1, component="comp2")) is False
    assert feed.removed(endpoint(1).id()) is False
    assert drain(watch) == []


# -- get / timeout -----------------------------------------------------------------------------------
def test_get_times_out_with_watch_timeout_which_is_a_queue_empty():
    _, watch = started()
    with pytest.raises(WatchTimeout) as caught:
        watch.get(timeout=0.05)
    assert isinstance(caught.value, queue.Empty)
    assert isinstance(caught.value, DiscoveryError)


# -- close --------------------------------------------------------------------------------------------
def test_close_wakes_a_consumer_blocked_in_get():
    _, watch = started()
    entered = threading.Event()

    def consume():
        entered.set()
        return watch.get()

    thread, outcome = in_thread(consume)
    assert entered.wait(JOIN_TIMEOUT)
    watch.close()
    assert joined(thread)
    assert isinstance(outcome.get("error"), WatchClosed)


def test_get_after_close_raises_watch_closed_and_close_is_idempotent():
    feed, watch = started()
    feed.added(endpoint(1))
    watch.close()
    watch.close()
    assert watch.closed
    with pytest.raises(WatchClosed):
        watch.get(timeout=0)


def test_context_manager_closes():
    feed, watch = open_watch()
    with watch:
        feed.start([])
    assert watch.closed
    with pytest.raises(WatchClosed):
        watch.get(timeout=0)


def test_iteration_ends_when_the_watch_is_closed():
    feed, watch = open_watch()
    received = []
    resynced = threading.Event()

    def consume():
        for event in watch:
            received.append(event)
            if isinstance(event, Resync):
                resynced.set()

    thread, outcome = in_thread(consume)
    feed.start([endpoint(1)])
    assert resynced.wait(JOIN_TIMEOUT)
    watch.close()
    assert joined(thread)
    assert "error" not in outcome
    assert received == [Added(endpoint(1)), Resync((endpoint(1),))]


def test_iterating_a_closed_watch_yields_nothing():
    feed, watch = open_watch()
    feed.start([endpoint(1)])
    watch.close()
    assert list(watch) == []


# -- failure --------------------------------------------------------------------------------------------
def test_fail_delivers_queued_events_then_raises_watch_failed_every_time():
    feed, watch = started()
    feed.added(endpoint(1))
    feed.added(endpoint(2))
    cause = RuntimeError("backend thread died")
    feed.fail(cause)
    assert watch.get(timeout=0) == Added(endpoint(1))
    assert watch.get(timeout=0) == Added(endpoint(2))
    for _ in range(2):
        with pytest.raises(WatchFailed) as caught:
            watch.get(timeout=0)
        assert caught.value.__cause__ is cause


def test_fail_delivers_the_initial_events_first():
    feed, watch = open_watch()
    feed.start([endpoint(1)])
    feed.fail(RuntimeError("boom"))
    assert watch.get(timeout=0) == Added(endpoint(1))
    assert watch.get(timeout=0) == Resync((endpoint(1),))
    with pytest.raises(WatchFailed):
        watch.get(timeout=0)


def test_iteration_raises_watch_failed():
    feed, watch = started()
    feed.fail(RuntimeError("boom"))
    with pytest.raises(WatchFailed):
        list(watch)


def test_fail_wakes_a_consumer_blocked_in_get():
    feed, watch = started()
    entered = threading.Event()

    def consume():
        entered.set()
        return watch.get()

    thread, outcome = in_thread(consume)
    assert entered.wait(JOIN_TIMEOUT)
    cause = OSError("store gone")
    feed.fail(cause)
    assert joined(thread)
    assert isinstance(outcome.get("error"), WatchFailed)
    assert outcome["error"].__cause__ is cause


# -- lag ---------------------------------------------------------------------------------------------------
def test_lagged_feed_delivers_missed_changes_then_a_full_resync():
    feed, watch = started(maxsize=3)
    records = [endpoint(n) for n in range(1, 11)]
    for record in records:
        assert feed.added(record)
    events = drain(watch)
    *changes, final = events
    assert isinstance(final, Resync)
    assert ids(final.instances) == ids(records) == ids(watch.snapshot())
    assert all(isinstance(e, Added) for e in changes)
    assert sorted(e.instance.instance_id for e in changes) == list(range(1, 11))
    assert drain(watch) == []


def test_lagged_feed_queues_at_most_maxsize_events():
    # Ten versions of one endpoint: without lag all ten would be delivered one by one.
    feed, watch = started(maxsize=3)
    versions = [endpoint(1, transport=Transport.tcp(f"127.0.0.1:{9000 + n}")) for n in range(10)]
    for version in versions:
        feed.added(version)
    events = drain(watch)
    direct = [e.instance for e in events[:-2]]
    assert 1 <= len(direct) <= 3
    assert direct == versions[: len(direct)]
    assert events[-2:] == [Added(versions[-1]), Resync((versions[-1],))]


def test_lag_recovery_reports_removals_and_then_follows_new_changes():
    feed, watch = started([endpoint(1)], maxsize=2)
    for n in range(2, 6):
        feed.added(endpoint(n))
    feed.removed(endpoint(1).id())
    events = drain(watch)
    assert Removed(endpoint(1).id()) in events
    assert ids(events[-1].instances) == ids(endpoint(n) for n in range(2, 6))
    feed.added(endpoint(9))
    assert drain(watch) == [Added(endpoint(9))]


def test_a_feed_of_size_one_delivers_a_change_made_right_after_the_resync():
    feed, watch = open_watch(maxsize=1)
    feed.start([])
    assert watch.get(timeout=0) == Resync(())
    feed.added(endpoint(1))  # before the consumer asks for the next event
    assert drain(watch, timeout=0.05) in ([Added(endpoint(1))], [Added(endpoint(1)), Resync((endpoint(1),))])


# -- reconcile ----------------------------------------------------------------------------------------------
def test_reconcile_emits_the_difference_then_a_resync():
    feed, watch = started([endpoint(1), endpoint(2)])
    assert feed.reconcile([endpoint(1), endpoint(3), model(7)]) is True
    events = drain(watch)
    assert set(events[:-1]) == {Added(endpoint(3)), Removed(endpoint(2).id())}
    assert len(events) == 3
    assert ids(events[-1].instances) == ids([endpoint(1), endpoint(3)])


def test_reconcile_without_a_difference_emits_nothing():
    feed, watch = started([endpoint(1)])
    assert feed.reconcile([endpoint(1)]) is False
    assert drain(watch) == []


def test_reconcile_reports_taint_updates():
    before = model(card_json=card(taints=["a"]))
    after = model(card_json=card(taints=["c", "b"]))
    feed, watch = started([before], query=Query.models())
    assert feed.reconcile([after]) is True
    assert drain(watch) == [ModelTaintsUpdated(after.id(), ("b", "c")), Resync((after,))]


def test_reconcile_with_force_resync_emits_a_resync_only():
    feed, watch = started([endpoint(1)])
    assert feed.reconcile([endpoint(1)], force_resync=True) is False
    assert drain(watch) == [Resync((endpoint(1),))]
