"""The etcd client's lease is granted on first need, never by connecting or reading; read-only
clients never grant one; an unreachable etcd fails fast, in one line of words (issue 17).

The server's leases are read through the gateway (``/v3/lease/leases``); other tests' leases may
expire meanwhile, so a test compares the leases that appeared, never the whole list.
"""

from __future__ import annotations

import queue
import socket
import ssl
import threading
import time
from typing import Any

import pytest
import requests
import urllib3
from discovery_sync.backends.etcd import EtcdDiscovery
from discovery_sync.backends.etcd.wire import failure_cause

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, initial_state, model_spec, next_event
from testrigs.net import free_port

WAIT = 10.0  # seconds a thread may take to arrive where a test waits for it


def base_status(*, read_only: bool) -> dict[str, Any]:
    """The keys every backend's status() has, for a client that registered nothing."""
    return {
        "backend": "etcd",
        "read_only": read_only,
        "closed": False,
        "records": 0,
        "logical_instance_id": None,
        "replaced": None,
        "connection": "connected",
    }


@pytest.fixture
def url(etcd_server, prefix) -> str:
    return f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?ttl=5"


@pytest.fixture
def leases(etcd_server):
    """``leases()``: the ids of the leases the server holds now."""

    def read() -> set[int]:
        reply = requests.post(f"{etcd_server.url}/v3/lease/leases", json={}, timeout=5)
        reply.raise_for_status()
        return {int(lease["ID"]) for lease in reply.json().get("leases", [])}

    return read


@pytest.fixture
def closed_port() -> int:
    """A loopback port nobody listens on (bound, read, closed)."""
    return free_port()


# -- no lease until one is needed -------------------------------------------------------------------
def test_connecting_reading_watching_and_diagnosing_grant_no_lease(url, leases):
    with ds.connect(url) as writer:
        endpoint = writer.register(endpoint_spec())
        before = leases()
        client = ds.connect(url)
        try:
            assert client.list(ds.Query.endpoints()) == [endpoint]
            assert client.get(endpoint.id()) == endpoint
            with client.list_and_watch(ds.Query.endpoints()) as watch:
                assert initial_state(watch)[1] == ds.Resync((endpoint,))
            client.check_connection()
            report = client.diagnose()
            assert (report["instance_id"], report["problems"], report["lease"]["lease"]) == (
                "no lease yet",
                [],
                "no lease yet",
            )
            assert client.status() == {
                **base_status(read_only=False),
                "lease": "no lease yet",
                "lease_id": None,
                "ttl": 5,
            }
            assert client.collect_garbage(dry_run=True) == []
            assert leases() - before == set()
        finally:
            client.shutdown()
        assert leases() - before == set()
        assert writer.list(ds.Query.endpoints()) == [endpoint]


def test_the_first_register_grants_exactly_one_lease_and_shutdown_revokes_it(url, leases):
    before = leases()
    client = ds.connect(url)
    try:
        endpoint = client.register(endpoint_spec())
        assert leases() - before == {endpoint.instance_id}
        model = client.register(model_spec())
        assert leases() - before == {endpoint.instance_id} == {model.instance_id} == {client.instance_id}
        status = client.status()
        assert (status["lease"], status["lease_id"]) == ("granted", client.instance_id)
        assert client.diagnose()["instance_id"] == f"{client.instance_id:x}"
    finally:
        client.shutdown()
    assert endpoint.instance_id not in leases()
    assert client.instance_id == endpoint.instance_id  # still readable after shutdown


def test_reading_instance_id_grants_the_lease_later_records_carry(url, leases):
    before = leases()
    with ds.connect(url) as client, ds.connect(url) as observer:
        instance_id = client.instance_id
        assert leases() - before == {instance_id}
        with observer.list_and_watch(ds.Query.endpoints()) as watch:
            initial_state(watch)
            endpoint = client.register(endpoint_spec())
            assert next_event(watch) == ds.Added(endpoint)
        assert endpoint.instance_id == instance_id
        kvs, _ = client.gateway.range(client.keys.key(endpoint.id()))
        assert [kv.lease for kv in kvs] == [instance_id]  # the record lives on that lease
        assert leases() - before == {instance_id}  # the observer granted none
    assert instance_id not in leases()


def test_two_threads_registering_at_once_share_one_lease(url, leases, monkeypatch):
    before = leases()
    client = ds.connect(url)
    arrivals: queue.Queue[str] = queue.Queue()

    class ObservedLock:
        """The client's lease lock, telling who comes to take it."""

        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            arrivals.put(threading.current_thread().name)
            self.lock.acquire()

        def __exit__(self, *exc_info: object) -> None:
            self.lock.release()

    grant, grants = client.gateway.lease_grant, []

    def slow_grant(ttl: int, lease_id: int = 0) -> tuple[int, int]:
        grants.append(lease_id)
        if len(grants) == 1:  # the first grant waits until the other thread queues for the lock
            assert {arrivals.get(timeout=WAIT), arrivals.get(timeout=WAIT)} == {"register-a", "register-b"}
        return grant(ttl, lease_id)

    monkeypatch.setattr(client, "_lease_lock", ObservedLock())
    monkeypatch.setattr(client.gateway, "lease_grant", slow_grant)
    results: queue.Queue[Any] = queue.Queue()

    def register(name: str) -> None:
        try:
            results.put(client.register(endpoint_spec(endpoint=name)))
        except BaseException as exc:  # handed to the test thread
            results.put(exc)

    threads = [threading.Thread(target=register, args=(n,), name=f"register-{n}") for n in ("a", "b")]
    try:
        for thread in threads:
            thread.start()
        registered = [results.get(timeout=WAIT) for _ in threads]
        for thread in threads:
            thread.join(WAIT)
        for result in registered:
            assert isinstance(result, ds.Endpoint), result
        assert len(grants) == 1
        assert {e.instance_id for e in registered} == {client.instance_id} == leases() - before
    finally:
        client.shutdown()
    assert client.instance_id not in leases()


def test_a_client_shut_down_before_needing_a_lease_never_grants_one(url, leases):
    before = leases()
    client = ds.connect(url)
    client.shutdown()
    with pytest.raises(ds.ClientClosed):
        client.instance_id  # noqa: B018
    with pytest.raises(ds.ClientClosed):
        client.register(endpoint_spec())
    assert leases() - before == set()


# -- read-only clients ------------------------------------------------------------------------------
def test_a_read_only_client_never_grants_a_lease(url, leases):
    with ds.connect(url) as writer:
        endpoint = writer.register(endpoint_spec())
        before = leases()
        reader = ds.connect(url, read_only=True)
        try:
            assert reader.read_only
            instance_id = reader.instance_id
            assert 0 < instance_id < 2**63 and reader.instance_id == instance_id
            assert reader.list(ds.Query.endpoints()) == [endpoint]
            writes = [
                lambda: reader.register(endpoint_spec(endpoint="other")),
                lambda: reader.lease_endpoint(endpoint_spec(endpoint="leased")),
                lambda: reader.unregister(endpoint),
                lambda: reader.update_model_taints(
                    ds.ModelCardInstanceId("ns", "backend", "generate", instance_id), ["a"]
                ),
                lambda: reader.collect_garbage(),
            ]
            for write in writes:
                with pytest.raises(ds.ValidationError, match="read-only"):
                    write()
            assert reader.status() == {
                **base_status(read_only=True),
                "lease": "none (read-only client)",
                "lease_id": None,
                "ttl": 5,
            }
            report = reader.diagnose()
            assert "instance_id" not in report and report["problems"] == []
            assert leases() - before == set()
        finally:
            reader.shutdown()
        assert instance_id not in leases() and leases() - before == set()
        assert writer.list(ds.Query.endpoints()) == [endpoint]


@pytest.mark.parametrize("value", ["maybe", "2", 1])
def test_read_only_takes_a_boolean(value):
    with pytest.raises(ds.ValidationError, match="etcd option read_only"):
        ds.connect("etcd://127.0.0.1:1", read_only=value)


# -- an etcd that cannot be reached ----------------------------------------------------------------
def one_line_naming(message: str, endpoint: str) -> None:
    assert "\n" not in message
    assert endpoint in message
    for repr_text in ("HTTPConnectionPool", "Max retries", "NewConnectionError", "Caused by", "object at 0x"):
        assert repr_text not in message


def test_connecting_to_a_closed_port_fails_within_the_connect_timeout_in_one_line(closed_port):
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable) as raised:
        ds.connect(f"etcd://127.0.0.1:{closed_port}", connect_timeout=1)
    elapsed = time.monotonic() - started
    message = str(raised.value)
    one_line_naming(message, f"127.0.0.1:{closed_port}")
    assert message == (
        f"cannot reach etcd at http://127.0.0.1:{closed_port}: connection refused (tried for 1 s, "
        "connect_timeout=1): start etcd or check the address, or pass connect_timeout=none to wait for etcd "
        "without limit"
    )
    assert 0.9 < elapsed < 2.0  # tried again at the deadline, and no later


def test_connecting_to_closed_ports_names_each_endpoint(closed_port):
    with pytest.raises(ds.BackendUnavailable) as raised:
        ds.connect(f"etcd://127.0.0.1:{closed_port},localhost:{closed_port}", connect_timeout=0.1)
    message = str(raised.value)
    one_line_naming(message, f"http://127.0.0.1:{closed_port}: connection refused")
    assert f"; http://localhost:{closed_port}: connection refused" in message
    assert "(tried for 0.1 s, connect_timeout=0.1)" in message


def test_request_timeout_bounds_a_request_to_a_server_that_never_answers(silent_port):
    started = time.monotonic()
    with pytest.raises(ds.BackendUnavailable) as raised:
        ds.connect(f"etcd://127.0.0.1:{silent_port}?connect_timeout=0.3&request_timeout=0.3")
    assert time.monotonic() - started < 2.0
    message = str(raised.value)
    one_line_naming(message, f"127.0.0.1:{silent_port}")
    assert "no reply within 0.3 s" in message


def test_a_tls_endpoint_that_speaks_plain_http_is_a_tls_error(etcd_server):
    with pytest.raises(ds.BackendUnavailable) as raised:
        EtcdDiscovery([f"https://127.0.0.1:{etcd_server.client_port}"], connect_timeout=0.1)
    message = str(raised.value)
    endpoint = f"https://127.0.0.1:{etcd_server.client_port}"
    one_line_naming(message, endpoint)
    # mostly a TLS error; on a loaded machine the server may close the socket before the handshake
    # reads its answer (seen once, under load): then a reset, in words all the same
    causes = ("TLS error: ", "connection reset by the server", "connection closed by the server")
    assert any(f"{endpoint}: {cause}" in message for cause in causes), message


@pytest.mark.parametrize("value", [0, -1, "abc", "0", "0.05", "nan", "inf", True])
def test_request_timeout_must_be_a_number_of_seconds_of_at_least_a_tenth(value):
    with pytest.raises(ds.ValidationError, match="etcd option request_timeout"):
        ds.connect("etcd://127.0.0.1:1", request_timeout=value)
    with pytest.raises(ds.ValidationError, match="etcd option request_timeout"):
        EtcdDiscovery(["http://127.0.0.1:1"], request_timeout=value)


def test_request_timeout_is_taken_from_the_url(etcd_server, prefix):
    with ds.connect(f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}?request_timeout=2.5") as client:
        assert (client.gateway.request_timeout, client.gateway.connect_timeout) == (2.5, 2.5)
    with ds.connect(f"etcd://127.0.0.1:{etcd_server.client_port}/{prefix}") as client:
        assert (client.gateway.request_timeout, client.gateway.connect_timeout) == (10.0, 3.05)


def wrapped(cause: BaseException, top: type[requests.RequestException] = requests.ConnectionError) -> Exception:
    """``cause`` as requests raises it: inside urllib3's MaxRetryError."""
    return top(urllib3.exceptions.MaxRetryError(None, "/v3/kv/range", cause))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (
            wrapped(urllib3.exceptions.NameResolutionError("etcd.invalid", None, socket.gaierror(-2, "Name unknown"))),  # type: ignore[arg-type]
            "name not resolved",
        ),
        (
            wrapped(urllib3.exceptions.ConnectTimeoutError(None, "timed out"), requests.ConnectTimeout),
            "connection timed out",
        ),
        (
            wrapped(
                urllib3.exceptions.SSLError(
                    ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
                ),
                requests.exceptions.SSLError,
            ),
            "TLS error: wrong version number",
        ),
        (
            requests.ConnectionError(
                urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
            ),
            "connection reset by the server",
        ),
        (
            requests.ConnectionError(urllib3.exceptions.ProtocolError("Connection aborted.", OSError(113, "x"))),
            "host unreachable",
        ),
        (requests.exceptions.InvalidURL("bad"), "the endpoint is not a valid URL"),
    ],
    ids=["name", "connect-timeout", "tls", "reset", "unreachable", "invalid-url"],
)
def test_failure_causes_are_words(exc, cause):
    assert failure_cause(exc) == cause


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.2994, "0.3"), (0.3, "0.3"), (5.0, "5"), (12.5, "12.5"), (120.0, "120"), (0.05, "0.05")]
)
def test_a_request_timeout_cut_to_a_deadline_reads_as_people_write_it(seconds, text):
    """A request timeout cut to the time left before connect_timeout (0.2994 s) is not shown to
    the millisecond in the message (a run under load read "no reply within 0.299 s")."""
    from discovery_sync.backends.etcd.wire import _seconds_text

    assert _seconds_text(seconds) == text
