"""The etcd backend against a server that answers HTTP 200 with JSON of the wrong shape, and the
release of closed watches.

A small HTTP server in this file stands between the client and the real etcd: it forwards every
POST (streamed watch replies chunk by chunk) until told to answer nonsense instead.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import http.client
import json
import resource
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from discovery_sync.backends.etcd import watcher as watcher_module
from discovery_sync.backends.etcd.wire import EtcdGateway, parse_watch_result

import discovery_sync as ds
from discovery_sync.errors import DiscoveryError
from testrigs.helpers import endpoint_spec, fold, initial_state, next_event
from testrigs.waiting import wait_until

TTL = 2
WAIT = 15.0  # seconds any awaited condition may take before the test fails

# Nonsense to every call of the client: lease grant and keep-alive, range, txn, put, watch.
EVERY_CALL = {
    "empty-object": b"{}",
    "array": b"[]",
    "number": b"1",
    "null": b"null",
    "revision-not-a-number": b'{"header":{"revision":"seven"}}',
    "kvs-not-a-list": b'{"header":{"revision":"7"},"kvs":{"key":"YQ=="}}',
    "key-not-base64": b'{"header":{"revision":"7"},"kvs":[{"key":"%%%","value":"Yg=="}]}',
    "value-not-base64": b'{"header":{"revision":"7"},"kvs":[{"key":"YQ==","value":"not base64!"}]}',
    "mod-revision-not-a-number": b'{"header":{"revision":"7"},"kvs":[{"key":"YQ==","mod_revision":"x"}]}',
    "keepalive-ttl-not-a-number": b'{"result":{"header":{"revision":"7"},"ID":"1","TTL":"soon"}}',
    "event-key-not-base64": b'{"result":{"header":{"revision":"7"},"events":[{"kv":{"key":"%%%"}}]}}',
    "junk-lines": b'{"result":{"header":{"revision":"7"},"created":true}}\nthis is not JSON\n',
}
# Nonsense to a lease grant only (it is a well-formed, empty range reply).
GRANT_ONLY = {"id-not-a-number": b'{"header":{"revision":"7"},"ID":"abc","TTL":"2"}'}
# Nonsense with no well-formed header: connect's /v3/maintenance/status cannot take it either.
NO_HEADER = {
    name: body
    for name, body in EVERY_CALL.items()
    if name not in ("kvs-not-a-list", "key-not-base64", "value-not-base64", "mod-revision-not-a-number")
}
EVERYTHING = list(EVERY_CALL.values()) + list(GRANT_ONLY.values())
EVERYTHING_PARSED = [json.loads(body) for body in EVERYTHING if body != EVERY_CALL["junk-lines"]]


class NonsenseProxy:
    """An HTTP server on 127.0.0.1 forwarding every POST to etcd on ``target_port``, except while
    :meth:`answer` is in force: then it replies 200 with the next of its nonsense bodies in turn."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._changed = threading.Condition()
        self._bodies: list[bytes] = []
        self._only: str | None = None
        self._next = 0
        self.answered: collections.Counter[str] = collections.Counter()  # nonsense replies by path
        self._upstreams: set[http.client.HTTPConnection] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        serve = lambda: self._server.serve_forever(poll_interval=0.05)  # noqa: E731 (quick shutdown)
        threading.Thread(target=serve, name="nonsense-proxy", daemon=True).start()

    def url(self, prefix: str, ttl: int = TTL, options: str = "") -> str:
        return f"etcd://127.0.0.1:{self.port}/{prefix}?ttl={ttl}{options}"

    def answer(self, bodies: list[bytes], only: str | None = None) -> None:
        """Answer nonsense (to POSTs on ``only``, or all) and cut the streams being forwarded."""
        with self._changed:
            self._bodies, self._only, self._next = list(bodies), only, 0
            self.answered.clear()
        self._cut()

    def forward(self) -> None:
        with self._changed:
            self._bodies = []

    def wait_answered(self, count: int, path: str | None = None) -> None:
        """Until ``count`` nonsense replies were sent (on ``path``, or on any)."""

        def enough() -> bool:
            return (self.answered[path] if path else sum(self.answered.values())) >= count

        with self._changed:
            assert self._changed.wait_for(enough, WAIT), f"only {dict(self.answered)} nonsense replies"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._cut()

    def _nonsense_for(self, path: str) -> bytes | None:
        with self._changed:
            if not self._bodies or self._only not in (None, path):
                return None
            body = self._bodies[self._next % len(self._bodies)]
            self._next += 1
            self.answered[path] += 1
            self._changed.notify_all()
            return body

    def _cut(self) -> None:
        with self._changed:
            upstreams = list(self._upstreams)
        for upstream in upstreams:
            if upstream.sock is not None:
                with contextlib.suppress(OSError):
                    upstream.sock.shutdown(socket.SHUT_RDWR)  # wakes the handler blocked reading it

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        upstream = http.client.HTTPConnection("127.0.0.1", self.target_port, timeout=120)
        try:
            upstream.connect()  # before it is listed: _cut() shuts down the sockets of those listed
        except OSError:
            handler.close_connection = True
            return
        with self._changed:
            if self._bodies and self._only in (None, handler.path):
                # answer() came between the decision to forward and now, so its _cut() missed this
                # request: break it as it would have (a watch stream would otherwise stay healthy)
                handler.close_connection = True
                upstream.close()
                return
            self._upstreams.add(upstream)
        headers = {"Content-Type": "application/json"}
        if handler.headers.get("Authorization"):
            headers["Authorization"] = handler.headers["Authorization"]
        try:
            upstream.request("POST", handler.path, body, headers)
            reply = upstream.getresponse()
            handler.send_response(reply.status)
            handler.send_header("Content-Type", reply.getheader("Content-Type", "application/json"))
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            while chunk := reply.read1(65536):
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException):
            handler.close_connection = True  # the client sees a broken stream
        finally:
            with self._changed:
                self._upstreams.discard(upstream)
            upstream.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                nonsense = proxy._nonsense_for(self.path)
                if nonsense is None:
                    proxy._forward(self, body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(nonsense)))
                self.end_headers()
                self.wfile.write(nonsense)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def direct_url(etcd_server, prefix) -> str:
    return f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?ttl=30"


@pytest.fixture
def proxy(etcd_server) -> Iterator[NonsenseProxy]:
    proxy = NonsenseProxy(etcd_server.client_port)
    yield proxy
    proxy.close()


@pytest.fixture(autouse=True)
def uncaught(escaped: list[threading.ExceptHookArgs]) -> Iterator[list[threading.ExceptHookArgs]]:
    """What reached threading.excepthook during the test: it must stay empty."""
    yield escaped
    assert not escaped, [(args.thread, args.exc_value) for args in escaped]


@pytest.fixture
def fast_watch_backoff(monkeypatch) -> None:
    monkeypatch.setattr(watcher_module, "BACKOFF_START", 0.01)
    monkeypatch.setattr(watcher_module, "BACKOFF_MAX", 0.05)


def follow(watch: ds.Watch, state: dict, expected: dict) -> dict:
    """Consume events until the watch describes ``expected``."""
    while state != expected:
        state = fold(state, next_event(watch, timeout=WAIT))
    return state


def watch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("discovery-sync-etcd-watch")}


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


# -- replies of every shape, without a server ------------------------------------------------------
HEADER = {"cluster_id": "1", "member_id": "2", "revision": "9", "raft_term": "2"}
KV = {"key": "YQ==", "create_revision": "2", "mod_revision": "3", "version": "1", "value": "Yg==", "lease": "5"}
SAMPLES: dict[str, tuple[Callable[[EtcdGateway], Any], Any]] = {
    "range": (lambda gw: gw.range(b"a", b"b"), {"header": HEADER, "kvs": [KV], "count": "1"}),
    "put": (lambda gw: gw.put(b"a", b"b", 5), {"header": HEADER}),
    "create": (
        lambda gw: gw.create(b"a", b"b", 5),
        {"header": HEADER, "responses": [{"response_range": {"header": HEADER, "kvs": [KV]}}]},
    ),
    "delete": (lambda gw: gw.delete(b"a"), {"header": HEADER}),
    "grant": (lambda gw: gw.lease_grant(2, 5), {"header": HEADER, "ID": "5", "TTL": "2"}),
    "keepalive": (lambda gw: gw.lease_keepalive(5), {"result": {"header": HEADER, "ID": "5", "TTL": "2"}}),
    "revoke": (lambda gw: gw.lease_revoke(5), {"header": HEADER}),
}
WATCH_SAMPLE = {
    "header": HEADER,
    "events": [{"type": "DELETE", "kv": {"key": "YQ==", "mod_revision": "4"}, "prev_kv": KV}, {"kv": KV}],
}
JUNK = [None, True, 0, -1, 1.5, 2**70, "", "x", "%%%", "-", [], [1], {}, {"a": 1}]


def mutations(value: Any) -> Iterator[Any]:
    """``value`` with one of its parts (itself included) replaced by each piece of junk in turn."""
    yield from JUNK
    if isinstance(value, dict):
        for key, item in value.items():
            yield {k: v for k, v in value.items() if k != key}
            for mutated in mutations(item):
                yield {**value, key: mutated}
    elif isinstance(value, list):
        for index, item in enumerate(value):
            for mutated in mutations(item):
                yield [*value[:index], mutated, *value[index + 1 :]]


def malformed_only(call: Callable[[], Any]) -> None:
    """``call`` returns, or fails with a DiscoveryError; anything else is a bug."""
    with contextlib.suppress(DiscoveryError):
        call()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_mutation_of_a_reply_is_read_or_refused_with_a_discovery_error(name):
    call, sample = SAMPLES[name]
    gateway = EtcdGateway(["http://127.0.0.1:9"])
    call(replying(gateway, sample))  # the sample itself is read
    for mutated in [*mutations(sample), *EVERYTHING_PARSED]:
        malformed_only(lambda reply=mutated: call(replying(gateway, reply)))


def test_every_mutation_of_a_watch_message_is_read_or_refused_with_a_discovery_error():
    assert [e.deleted for e in parse_watch_result(WATCH_SAMPLE).events] == [True, False]
    for mutated in mutations(WATCH_SAMPLE):
        malformed_only(lambda result=mutated: parse_watch_result(result))


def test_a_token_that_is_not_a_string_is_malformed(monkeypatch):
    gateway = EtcdGateway(["http://127.0.0.1:9"], username="root", password="secret")
    for reply in ({"header": HEADER, "token": 7}, {"header": HEADER}, None, []):
        monkeypatch.setattr(gateway, "_post_raw", lambda path, body, headers, reply=reply, **options: reply)
        with pytest.raises(ds.BackendUnavailable, match="/v3/auth/authenticate"):
            gateway.headers()


def replying(gateway: EtcdGateway, reply: Any) -> EtcdGateway:
    """``gateway`` (a throwaway one) with every POST answered by ``reply``."""
    gateway.post = lambda path, body, **options: reply
    return gateway


# -- the client against a server answering nonsense -------------------------------------------------
@pytest.mark.parametrize("body", NO_HEADER.values(), ids=NO_HEADER)
def test_connect_to_nonsense_is_backend_unavailable_quoting_it(proxy, prefix, body):
    proxy.answer([body])
    with pytest.raises(ds.BackendUnavailable) as raised:
        ds.connect(proxy.url(prefix, options="&connect_timeout=0.1"))
    message = str(raised.value)
    assert "/v3/maintenance/status" in message
    assert body.decode().strip() in message


@pytest.mark.parametrize("body", [*EVERY_CALL.values(), *GRANT_ONLY.values()], ids=[*EVERY_CALL, *GRANT_ONLY])
def test_a_lease_grant_answered_with_nonsense_is_backend_unavailable_quoting_it(proxy, prefix, body):
    with ds.connect(proxy.url(prefix)) as client:  # connecting grants no lease: the first need does
        proxy.answer([body])
        with pytest.raises(ds.BackendUnavailable) as raised:
            client.instance_id  # noqa: B018
        message = str(raised.value)
        assert "/v3/lease/grant" in message
        assert body.decode().strip() in message
        proxy.forward()
        assert client.register(endpoint_spec()).instance_id == client.instance_id > 0  # the next need grants it


@pytest.mark.parametrize("body", EVERY_CALL.values(), ids=EVERY_CALL)
def test_register_and_list_against_nonsense_are_backend_unavailable(proxy, prefix, body):
    with ds.connect(proxy.url(prefix)) as client:
        assert client.instance_id  # the lease is granted before the nonsense
        proxy.answer([body])
        with pytest.raises(ds.BackendUnavailable, match="/v3/kv/txn"):
            client.register(endpoint_spec())
        with pytest.raises(ds.BackendUnavailable, match="/v3/kv/range"):
            client.list(ds.Query.endpoints())
        proxy.forward()
        endpoint = client.register(endpoint_spec())
        assert client.list(ds.Query.endpoints()) == [endpoint]


@pytest.mark.usefixtures("fast_watch_backoff")
@pytest.mark.parametrize("only", [None, "/v3/watch"], ids=["every-call", "watch-stream-only"])
def test_an_open_watch_lives_through_nonsense_and_delivers_later_changes(proxy, prefix, direct_url, only):
    client, writer = ds.connect(proxy.url(prefix, ttl=60)), ds.connect(direct_url)  # no keep-alive meanwhile
    try:
        with client.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            (thread,) = (w._thread for w in client._watchers)
            proxy.answer(EVERYTHING, only=only)
            proxy.wait_answered(len(EVERYTHING), only or "/v3/kv/range")  # every body met at least once
            first = writer.register(endpoint_spec(endpoint="during"))
            assert thread.is_alive()
            proxy.forward()
            state = follow(watch, {}, {first.id(): first})
            later = writer.register(endpoint_spec(endpoint="after"))
            follow(watch, state, {first.id(): first, later.id(): later})
            assert thread.is_alive()
    finally:
        client.shutdown()
        writer.shutdown()


def test_the_keep_alive_outlives_nonsense_longer_than_the_ttl_and_recovers_the_lease(proxy, prefix, direct_url):
    client, observer = ds.connect(proxy.url(prefix)), ds.connect(direct_url)
    try:
        endpoint = client.register(endpoint_spec())
        lease_id = client.instance_id
        with observer.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            proxy.answer(EVERYTHING)
            wait_until(lambda: not client.status()["connected"], "the client is disconnected", timeout=WAIT)
            assert isinstance(next_event(watch, timeout=TTL + 5), ds.Removed)  # etcd expired the lease
            proxy.wait_answered(5)
            assert client._lease._thread.is_alive()
            proxy.forward()
            assert next_event(watch, timeout=WAIT) == ds.Added(endpoint)  # written back
        wait_until(lambda: client.status()["connected"], "the client is connected again", timeout=WAIT)
        status = client.status()
        assert (client.instance_id, status["lease_id"], status["lease_losses"]) == (lease_id, lease_id, 1)
        assert observer.list(ds.Query.endpoints()) == [endpoint]
        assert client.list(ds.Query.endpoints()) == [endpoint]
    finally:
        client.shutdown()
        observer.shutdown()


def test_the_keep_alive_outlives_an_unexpected_exception(direct_url, monkeypatch):
    with ds.connect(direct_url.replace("ttl=30", f"ttl={TTL}")) as client:
        endpoint, lease_id = client.register(endpoint_spec()), client.instance_id
        failures = iter([RuntimeError("injected"), KeyError("injected")])
        keepalive = client.gateway.lease_keepalive

        def flaky(lease_id: int, **options: Any) -> int:
            failure = next(failures, None)
            if failure is not None:
                raise failure
            return keepalive(lease_id, **options)

        monkeypatch.setattr(client.gateway, "lease_keepalive", flaky)
        wait_until(lambda: not client.status()["connected"], "the injected error is seen", timeout=WAIT)
        wait_until(lambda: client.status()["connected"], "the keep-alive succeeds again", timeout=WAIT)
        assert client._lease._thread.is_alive()
        # two missed renewals may outlast the 2 s TTL: then the lease was recovered
        assert (client.instance_id, client.list(ds.Query.endpoints())) == (lease_id, [endpoint])


def test_an_unexpected_exception_in_a_watch_thread_fails_the_watch(direct_url, monkeypatch):
    def broken(self, event) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(watcher_module.BucketStream, "_apply", broken)
    with ds.connect(direct_url) as client, client.list_and_watch(ds.Query.endpoints()) as watch:
        initial_state(watch)
        client.register(endpoint_spec())
        with pytest.raises(ds.WatchFailed) as failed:
            next_event(watch)
        assert isinstance(failed.value.__cause__, RuntimeError)


def test_a_quiet_watch_is_reopened_without_a_resync(etcd_server, prefix, direct_url):
    quiet_url = f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?watch_read_timeout=1"
    with (
        ds.connect(quiet_url) as client,
        ds.connect(direct_url) as writer,
        client.list_and_watch(ds.Query.endpoints()) as watch,
    ):
        initial_state(watch)
        with pytest.raises(ds.WatchTimeout):
            watch.get(timeout=2.5)  # two read timeouts: no Resync, nothing
        endpoint = writer.register(endpoint_spec())
        assert next_event(watch) == ds.Added(endpoint)


# -- closed watches are released --------------------------------------------------------------------
def test_closed_watches_leave_nothing_behind(direct_url):
    query = ds.Query.endpoints()
    with ds.connect(direct_url) as client:
        for _ in range(50):  # warm up: connection pools, caches, allocator arenas
            client.list_and_watch(query).close()
        gc.collect()
        watchers, threads, rss = len(client._watchers), watch_threads(), rss_mb()
        samples = []
        for cycle in range(2000):
            watch = client.list_and_watch(query)
            if cycle % 500 == 0:
                samples.append(weakref.ref(next(iter(client._watchers))))
            watch.close()
        del watch
        gc.collect()
        assert len(client._watchers) == watchers
        assert watch_threads() <= threads
        assert all(sample() is None for sample in samples)
        assert rss_mb() - rss < 10, f"RSS grew from {rss:.1f} to {rss_mb():.1f} MB"
