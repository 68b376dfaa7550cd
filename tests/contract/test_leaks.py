"""Closed watches and live views are released on every backend: opening and closing them
thousands of times leaves no feed, thread or memory behind.

What we guarantee is that ``close()`` (or the client's ``shutdown()``) releases a watch or a
live view; a watch dropped open is not required to be released before its client shuts down.
The structural checks (weak references to every closed feed and view are dead after
``gc.collect()``, the number of watch objects alive is back where it was, no live-view thread
is left) catch a leak within a few cycles; the RSS check catches what holds none of those
objects (queues, callbacks, thread bookkeeping) over many.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref

import discovery_sync as ds
from discovery_sync.live_view import LiveView
from discovery_sync.watch import WatchFeed
from testrigs.helpers import endpoint_spec, initial_state

WARMUP = 500
#: open-and-close cycles per rig after the warm-up (one cycle: a watch and a live view). Memory
#: and the local file store cost about 0.3 ms a cycle and run 5,000. On etcd (9 ms) and
#: Kubernetes (2.3 ms) every watch starts a watch stream and its close stops it, so they run
#: fewer (so does sshfs): the weak references still catch one leaked watch there, and the RSS
#: bound still catches a leak of more than a few kB a cycle.
CYCLES = {"memory": 5000, "file-inotify": 5000, "file-polling": 5000, "kube": 1000}
SLOW_RIG_CYCLES = 300
RSS_SLACK = 5 * 2**20  # bytes of growth allowed over the measured cycles (allocator noise)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def alive(*types: type) -> int:
    """How many objects of ``types`` the garbage collector finds alive."""
    gc.collect()
    return sum(isinstance(o, types) for o in gc.get_objects())


def live_view_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("discovery-sync-live-view-")}


def test_closed_watches_and_live_views_are_released(rig):
    client = rig.client()
    record = client.register(endpoint_spec())
    query = ds.Query.endpoints("ns")
    closed: list[weakref.ref[object]] = []
    fake_api_server = getattr(rig, "server", None)  # the Kubernetes fake logs every request it serves

    def cycle() -> None:
        watch = client.list_and_watch(query)
        assert initial_state(watch, rig.event_timeout)[1].instances == (record,)
        watch.close()
        view = client.live_view(query)
        assert dict(view) == {client.instance_id: record}
        thread, view_watch = view._pump.thread, view._watch
        view.close()
        assert thread is not None
        thread.join(rig.event_timeout)
        assert not thread.is_alive(), "closing the last live view of a client stops its view pump's thread"
        assert view_watch.closed, "closing a live view closes its watch"
        closed.extend(weakref.ref(o) for o in (watch, watch._feed, view, view_watch, view_watch._feed))
        if fake_api_server is not None:
            fake_api_server.clear_requests()  # the rig's memory, not the client's

    cycles = CYCLES.get(rig.name, SLOW_RIG_CYCLES)
    for _ in range(min(WARMUP, cycles)):
        cycle()
    closed.clear()
    objects, threads = alive(ds.Watch, WatchFeed, LiveView), live_view_threads()
    resident = resident_bytes()
    for _ in range(cycles):
        cycle()
    gc.collect()
    grown = resident_bytes() - resident

    held = [type(o).__name__ for ref in closed if (o := ref()) is not None]
    assert not held, f"{len(held)} closed watches, feeds and live views are still referenced: {held[:5]} ..."
    assert alive(ds.Watch, WatchFeed, LiveView) == objects
    assert live_view_threads() <= threads
    assert grown < RSS_SLACK, f"RSS grew by {grown / 2**20:.1f} MiB over {cycles} closed watches and live views"
