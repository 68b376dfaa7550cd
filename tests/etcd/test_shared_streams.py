"""All the watches of one etcd client share one watch stream (and thread) per bucket.

The client under test reaches etcd through a proxy that counts the watch streams it carries (the
connections whose first request is ``POST /v3/watch``); writers go to etcd directly.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from discovery_sync.backends.etcd import watcher as watcher_module

import discovery_sync as ds
from testrigs.helpers import (
    caught_logs,
    endpoint_spec,
    fold,
    fold_until_resynced,
    initial_state,
    model_spec,
    next_event,
)
from testrigs.tcp_proxy import TcpProxy, _close
from testrigs.waiting import wait_until

WAIT = 10.0


class RecordingProxy(TcpProxy):
    """A TcpProxy that counts the watch streams passing through it, and can stall the connections
    open at one moment (their replies are held back until :meth:`thaw`) while new ones flow."""

    def __init__(self, target_port: int) -> None:
        self.watch_streams = 0  # open now
        self.watch_requests = 0  # opened in all
        self._count_lock = threading.Lock()
        self._frozen: set[socket.socket] = set()
        self._flowing = threading.Event()
        self._flowing.set()
        super().__init__(target_port)

    def stall(self) -> None:
        with self._lock:
            self._frozen = set(self._sockets)
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            replies = source.getsockname()[1] != self.port  # upstream -> client
            first = b"" if replies else source.recv(64, socket.MSG_PEEK)
        except OSError:  # cut meanwhile
            _close(source)
            _close(sink)
            return
        if replies or not first.startswith(b"POST /v3/watch "):
            super()._pump(source, sink)
            return
        with self._count_lock:
            self.watch_streams += 1
            self.watch_requests += 1
        try:
            super()._pump(source, sink)
        finally:
            with self._count_lock:
                self.watch_streams -= 1

    def _before_forwarding(self, source: socket.socket) -> None:
        if source in self._frozen:  # replies of a frozen connection wait for thaw()
            self._flowing.wait()

    def close(self) -> None:
        self.thaw()
        super().close()


@pytest.fixture
def proxy(etcd_server) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(etcd_server.client_port)
    yield proxy
    proxy.close()


@pytest.fixture
def direct_url(etcd_server, prefix) -> str:
    return f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?ttl=30"


@pytest.fixture
def proxied_url(proxy, prefix) -> str:
    return f"etcd://127.0.0.1:{proxy.port}/{prefix}?ttl=30"


@pytest.fixture(autouse=True)
def uncaught(escaped: list[threading.ExceptHookArgs]) -> Iterator[list[threading.ExceptHookArgs]]:
    yield escaped
    assert not escaped, [(args.thread, args.exc_value) for args in escaped]


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("discovery-sync-etcd-watch")]


def drain(watch: ds.Watch) -> list[ds.DiscoveryEvent]:
    """The events queued on ``watch`` now (nothing more is waited for)."""
    events = []
    while True:
        try:
            events.append(watch.get(timeout=0))
        except ds.WatchTimeout:
            return events


def mixed_queries(count: int) -> list[ds.Query]:
    """Endpoint and model queries of every scope, the "all" ones first."""
    queries = [ds.Query.endpoints(), ds.Query.models()]
    for i in range(count - 2):
        component, endpoint = f"c{i % 5}", f"e{i % 7}"
        make = ds.Query.endpoints if i % 3 else ds.Query.models
        scopes = [("ns",), ("ns", component), ("ns", component, endpoint), ("other", component)]
        queries.append(make(*scopes[i % 4]))
    return queries


def test_two_hundred_watches_share_one_stream_per_bucket_and_each_gets_exactly_its_events(
    proxy, proxied_url, direct_url
):
    threads_before = len(watch_threads())
    with ds.connect(direct_url) as writer, ds.connect(proxied_url) as client:
        early = [writer.register(endpoint_spec(component=f"c{i}", endpoint=f"e{i}")) for i in range(5)]
        early.append(writer.register(model_spec("early", component="c1", endpoint="e1")))
        queries = mixed_queries(200)
        watches = [client.list_and_watch(q) for q in queries]
        try:
            for query, watch in zip(queries, watches, strict=True):
                added, resync = initial_state(watch)
                expected = sorted((r for r in early if query.matches(r)), key=lambda r: r.id().to_path())
                assert sorted((e.instance for e in added), key=lambda r: r.id().to_path()) == expected
                assert set(resync.instances) == set(expected)

            assert len(watch_threads()) - threads_before == 2
            assert len(client._watchers) == 2
            wait_until(lambda: proxy.watch_streams == 2, "both streams are open")
            assert proxy.watch_requests == 2

            writes: list[tuple[ds.DiscoveryEvent, ds.DiscoveryInstance | None]] = []
            for i in range(7):
                endpoint = writer.register(endpoint_spec(component=f"c{i % 5}", endpoint=f"n{i}", port=9100 + i))
                writes.append((ds.Added(endpoint), endpoint))
            model = writer.register(model_spec("later", component="c2", endpoint="e2"))
            writes.append((ds.Added(model), model))
            writer.unregister(early[1])
            writes.append((ds.Removed(early[1].id()), early[1]))
            writer.unregister(early[5])
            writes.append((ds.Removed(early[5].id()), early[5]))
            # the "all" watches see the last change of each bucket: every watch has had its share by then
            seen: list[list[ds.DiscoveryEvent]] = [[], []]

            def caught_up(index: int, last: ds.DiscoveryEvent) -> bool:
                seen[index].extend(drain(watches[index]))
                return last in seen[index]

            wait_until(lambda: caught_up(0, ds.Removed(early[1].id())), "the endpoints watch has every change")
            wait_until(lambda: caught_up(1, ds.Removed(early[5].id())), "the models watch has every change")
            for index, (query, watch) in enumerate(zip(queries, watches, strict=True)):
                expected = [event for event, record in writes if query.matches(record)]
                got = seen[index] if index < 2 else drain(watch)
                assert got == expected, query
            assert proxy.watch_requests == 2  # nothing was re-opened
        finally:
            for watch in watches:
                watch.close()


def test_a_watch_joining_a_running_stream_starts_complete_and_gets_no_change_twice(
    direct_url, proxied_url, monkeypatch
):
    """Both ways a joining watch starts: from the stream's records (the stream is current), and
    from its own range (the stream lags behind: held back here), whose changes the stream then
    skips for it."""
    query = ds.Query.endpoints("ns")
    with ds.connect(direct_url) as writer, ds.connect(proxied_url) as client:
        first = writer.register(endpoint_spec(endpoint="first"))
        with client.list_and_watch(query) as old:
            assert initial_state(old)[1].instances == (first,)
            # the stream is current: the record registered just before the call is in the new watch
            second = writer.register(endpoint_spec(endpoint="second"))
            with client.list_and_watch(query) as current:
                assert set(initial_state(current)[1].instances) == {first, second}
                assert next_event(old) == ds.Added(second)

                # the stream lags: it holds the next change back while a third watch joins
                held, release = threading.Event(), threading.Event()
                handle = watcher_module.BucketStream._handle

                def slow(self, result) -> None:
                    if result.events and not release.is_set():
                        held.set()
                        release.wait(WAIT)
                    handle(self, result)

                monkeypatch.setattr(watcher_module.BucketStream, "_handle", slow)
                third = writer.register(endpoint_spec(endpoint="third"))
                assert held.wait(WAIT)
                (stream,) = client._watchers
                lagging_at = stream.revision
                with client.list_and_watch(query) as joined:
                    assert set(initial_state(joined)[1].instances) == {first, second, third}
                    assert stream.members[joined._feed].since > lagging_at  # it started from its own range
                    release.set()
                    fourth = writer.register(endpoint_spec(endpoint="fourth"))
                    writer.unregister(first)
                    for watch, expected in (
                        (old, [ds.Added(third), ds.Added(fourth), ds.Removed(first.id())]),
                        (current, [ds.Added(third), ds.Added(fourth), ds.Removed(first.id())]),
                        (joined, [ds.Added(fourth), ds.Removed(first.id())]),  # third is not repeated
                    ):
                        assert [next_event(watch) for _ in expected] == expected
                    with pytest.raises(ds.WatchTimeout):
                        joined.get(timeout=0.3)


def test_closing_the_watches_one_by_one_stops_the_stream_after_the_last(proxy, proxied_url):
    threads_before = {t.ident for t in watch_threads()}
    with ds.connect(proxied_url) as client:
        endpoints = [client.list_and_watch(ds.Query.endpoints("ns", f"c{i}")) for i in range(4)]
        models = client.list_and_watch(ds.Query.models())
        mine = [t for t in watch_threads() if t.ident not in threads_before]
        assert sorted(t.name for t in mine) == [
            "discovery-sync-etcd-watch-v1/instances",
            "discovery-sync-etcd-watch-v1/mdc",
        ]
        (endpoint_thread,) = (t for t in mine if t.name.endswith("instances"))
        wait_until(lambda: proxy.watch_streams == 2, "both streams are open")
        for watch in endpoints[:-1]:
            watch.close()
            assert endpoint_thread.is_alive()
        assert len(client._watchers) == 2
        endpoints[-1].close()
        assert not endpoint_thread.is_alive()  # close() returns once the stream's thread has ended
        assert len(client._watchers) == 1
        wait_until(lambda: proxy.watch_streams == 1, "the endpoints stream is closed")
        # a new watch of the bucket starts a new stream
        with client.list_and_watch(ds.Query.endpoints()) as again:
            initial_state(again)
            assert len(client._watchers) == 2
        models.close()
        assert client._watchers == set()
        wait_until(lambda: proxy.watch_streams == 0, "every stream is closed")
    assert {t.ident for t in watch_threads()} <= threads_before


def test_an_outage_with_compaction_resyncs_every_watch_of_the_bucket(etcd_server, proxy, proxied_url, direct_url):
    queries = [ds.Query.endpoints(), ds.Query.endpoints("ns"), ds.Query.endpoints("ns", "c1"), ds.Query.models()]
    with ds.connect(direct_url) as writer, ds.connect(proxied_url) as client:
        first = writer.register(endpoint_spec(component="c1", endpoint="first"))
        watches = [client.list_and_watch(q) for q in queries]
        try:
            states = [fold({}, initial_state(w)[1]) for w in watches]
            proxy.cut()  # the client loses its streams; everything below happens while it is away
            later = [writer.register(endpoint_spec(component=f"c{i % 2}", endpoint=f"later{i}")) for i in range(4)]
            writer.unregister(first)
            etcd_server.compact()
            proxy.restore()
            for query, watch, state in zip(queries[:3], watches[:3], states[:3], strict=True):
                expected = {e.id(): e for e in later if query.matches(e)}
                fold_until_resynced(watch, state, expected)
        finally:
            for watch in watches:
                watch.close()


def test_a_stream_reopened_past_a_compaction_resyncs_every_watch_of_the_bucket(
    etcd_server, proxy, prefix, direct_url, caplog
):
    """The stream is only quiet (its replies are held back) while the bucket changes and etcd
    compacts: it is re-opened from its revision, which is compacted, and resyncs."""
    quiet_url = f"etcd://127.0.0.1:{proxy.port}/{prefix}?watch_read_timeout=1&request_timeout=2"
    queries = [ds.Query.endpoints("ns", "c0"), ds.Query.endpoints("ns", "c1"), ds.Query.endpoints()]
    caplog.set_level(logging.INFO, logger="discovery_sync.backends.etcd")
    with (
        ds.connect(direct_url) as writer,
        ds.connect(quiet_url) as client,
        caught_logs("discovery_sync.backends.etcd", logging.INFO) as logs,
    ):
        first = writer.register(endpoint_spec(component="c0", endpoint="first"))
        watches = [client.list_and_watch(q) for q in queries]
        try:
            states = [fold({}, initial_state(w)[1]) for w in watches]
            proxy.stall()
            later = [writer.register(endpoint_spec(component=f"c{i % 2}", endpoint=f"later{i}")) for i in range(4)]
            writer.unregister(first)
            etcd_server.compact()
            assert logs.wait_for("was compacted", timeout=WAIT)
            proxy.thaw()
            for query, watch, state in zip(queries, watches, states, strict=True):
                expected = {e.id(): e for e in later if query.matches(e)}
                events = []
                while not (any(isinstance(e, ds.Resync) for e in events) and state == expected):
                    events.append(next_event(watch, timeout=30))
                    state = fold(state, events[-1])
        finally:
            for watch in watches:
                watch.close()


def test_a_crashed_stream_fails_every_watch_of_it_and_the_next_watch_gets_a_new_stream(direct_url, monkeypatch):
    apply = watcher_module.BucketStream._apply
    broken = threading.Event()

    def flaky(self, event) -> None:
        if not broken.is_set():
            broken.set()
            raise RuntimeError("injected")
        apply(self, event)

    monkeypatch.setattr(watcher_module.BucketStream, "_apply", flaky)
    with ds.connect(direct_url) as writer, ds.connect(direct_url) as client:
        watches = [client.list_and_watch(ds.Query.endpoints()), client.list_and_watch(ds.Query.endpoints("ns"))]
        for watch in watches:
            initial_state(watch)
        writer.register(endpoint_spec())
        for watch in watches:
            with pytest.raises(ds.WatchFailed) as failed:
                next_event(watch)
            assert isinstance(failed.value.__cause__, RuntimeError)
        with client.list_and_watch(ds.Query.endpoints()) as fresh:
            initial_state(fresh)
            assert len(client._watchers) == 2  # the dead stream stays until its watches close
            later = writer.register(endpoint_spec(endpoint="later"))
            assert next_event(fresh) == ds.Added(later)
        for watch in watches:
            watch.close()
        assert client._watchers == set()
