"""Clients without a pod identity (a laptop with a kubeconfig), read-only clients, the namespace
they read, and ``request_timeout``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, initial_state, model_spec, next_event
from testrigs.kube_fake import WORKER_METADATA
from testrigs.kubeconfig import write_kubeconfig
from tests.kube.rig import connect_reader

POD_VARIABLES = ("POD_NAME", "POD_UID", "POD_NAMESPACE", "DYN_KUBE_DISCOVERY_MODE", "CONTAINER_NAME")


@pytest.fixture(autouse=True)
def no_pod_environment(monkeypatch, tmp_path) -> Path:
    """No POD_* variables; an empty Downward-API directory for ``podinfo_dir``."""
    for variable in POD_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    empty = tmp_path / "podinfo"
    empty.mkdir()
    return empty


@pytest.fixture
def laptop(kubeconfig, no_pod_environment, clients):
    """``laptop(**options)``: a client with the kubeconfig alone: no identity, no pod."""

    def connect(**options) -> ds.Discovery:
        client = ds.connect("kube://", kubeconfig=str(kubeconfig), podinfo_dir=str(no_pod_environment), **options)
        clients.append(client)
        return client

    return connect


def test_a_client_without_identity_lists_gets_and_watches(server, pod_client, laptop):
    writer = pod_client("worker-0")
    endpoint = writer.register(endpoint_spec())
    reader = laptop()
    assert not reader.read_only
    assert reader.list(ds.Query.endpoints()) == [endpoint]
    assert reader.get(endpoint.id()) == endpoint
    with reader.list_and_watch(ds.Query.models()) as watch:
        initial_state(watch)
        model = writer.register(model_spec())
        assert next_event(watch) == ds.Added(model)
    status = reader.status()
    assert (status["pod"], status["cr_name"], status["namespace"], status["mode"]) == (None, None, "default", "pod")
    # its id names no worker: every Kubernetes worker id fits in 53 bits
    assert 2**53 <= reader.instance_id < 2**63
    report = reader.diagnose()
    assert report["problems"] == [] and "instance_id" not in report and status["instance_id"] is None
    assert writer.diagnose()["instance_id"] == f"{writer.instance_id:x}" == "43710f49c0cff"
    assert reader.collect_garbage() == [] and reader.collect_garbage(dry_run=True) == []
    with pytest.raises(ds.ValidationError, match="dry_run must be True or False"):
        reader.collect_garbage(dry_run="yes")


def test_writes_without_identity_say_what_is_missing(server, pod_client, laptop, no_pod_environment):
    endpoint = pod_client("worker-0").register(endpoint_spec())
    reader = laptop()
    server.clear_requests()
    clear = (
        r"has no pod identity, so it cannot {action}: set POD_NAME and POD_UID \(and POD_NAMESPACE\) from the "
        r"Downward API, mount the Downward-API files .*/pod_name and .*/pod_uid, or pass the pod_name and pod_uid "
        r"options; listing and watching work without an identity"
    )
    with pytest.raises(ds.ValidationError, match=clear.format(action="register records")) as refused:
        reader.register(endpoint_spec(endpoint="mine"))
    assert str(no_pod_environment / "pod_name") in str(refused.value)
    with pytest.raises(ds.ValidationError, match=clear.format(action="lease endpoints")):
        reader.lease_endpoint(endpoint_spec(endpoint="leased"))
    model_id = ds.ModelCardInstanceId("ns", "backend", "generate", reader.instance_id)
    with pytest.raises(ds.ValidationError, match=clear.format(action="update model taints")):
        reader.update_model_taints(model_id, ["a"])
    with pytest.raises(ds.ValidationError, match=clear.format(action="unregister records")):
        reader.unregister(endpoint)
    assert [cr["metadata"]["name"] for cr in server.objects(WORKER_METADATA)] == ["worker-0"]
    assert [r for r in server.requests if r.method != "GET"] == []


def test_a_half_set_identity_is_an_error_at_connect(kubeconfig, no_pod_environment, monkeypatch):
    monkeypatch.setenv("POD_NAME", "worker-0")
    with pytest.raises(ds.ValidationError, match=r"POD_UID is not set \(but POD_NAME='worker-0' is\)"):
        ds.connect("kube://", kubeconfig=str(kubeconfig), podinfo_dir=str(no_pod_environment))
    monkeypatch.delenv("POD_NAME")
    (no_pod_environment / "pod_uid").write_text("uid-0")
    with pytest.raises(ds.ValidationError, match=r"POD_NAME is not set \(but POD_UID='uid-0' is\).*pass pod_name="):
        ds.connect("kube://", kubeconfig=str(kubeconfig), podinfo_dir=str(no_pod_environment))


def test_container_mode_needs_no_container_name_to_read(server, laptop, monkeypatch):
    monkeypatch.setenv("DYN_KUBE_DISCOVERY_MODE", "container")
    reader = laptop()
    assert reader.status()["mode"] == "container"
    assert reader.list(ds.Query.endpoints()) == []


def test_a_read_only_client_with_an_identity_writes_nothing(server, pod_client, connect_as):
    uid = server.create_pod("worker-1")["metadata"]["uid"]
    server.clear_requests()
    # container mode would delete a stale CR at start: a read-only client does not
    reader = connect_as(pod_name="worker-1", pod_uid=uid, mode="container", container_name="main", read_only=True)
    assert reader.read_only and reader.identity is None and reader.status()["pod"] is None
    assert 2**53 <= reader.instance_id < 2**63
    for write in (
        lambda: reader.register(endpoint_spec()),
        lambda: reader.lease_endpoint(endpoint_spec()),
        lambda: reader.collect_garbage(),
    ):
        with pytest.raises(ds.ValidationError, match="read-only"):
            write()
    assert reader.list(ds.Query.endpoints()) == []
    assert server.objects(WORKER_METADATA) == []
    assert [r for r in server.requests if r.method != "GET"] == []
    reader.shutdown()
    assert [r for r in server.requests if r.method != "GET"] == []


def test_a_read_only_client_serves_its_own_pods_cr_like_any_other(server, pod_client, connect_as):
    writer = pod_client("worker-0")
    endpoint = writer.register(endpoint_spec())
    uid = server.get("pods", "worker-0")["metadata"]["uid"]
    reader = connect_as(pod_name="worker-0", pod_uid=uid, read_only=True)
    assert reader.list(ds.Query.endpoints()) == [endpoint]


def test_the_rig_reader_has_no_identity(server, kubeconfig, clients):
    reader = connect_reader(kubeconfig)
    clients.append(reader)
    assert reader.read_only and reader.status()["pod"] is None


# -- namespace -----------------------------------------------------------------------------------


def test_the_namespace_comes_from_option_then_pod_namespace_then_the_context_then_default(
    server, tmp_path, no_pod_environment, monkeypatch, clients
):
    with_context = write_kubeconfig(tmp_path / "with-context", server.url, namespace="from-context")
    without = write_kubeconfig(tmp_path / "without", server.url, namespace=None)

    def namespace(kubeconfig: Path, **options) -> str:
        client = ds.connect(
            "kube://", kubeconfig=str(kubeconfig), podinfo_dir=str(no_pod_environment), read_only=True, **options
        )
        clients.append(client)
        return client.api.namespace

    assert namespace(without) == "default"
    assert namespace(with_context) == "from-context"
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    assert namespace(with_context) == "from-env"
    (no_pod_environment / "pod_namespace").write_text("from-file\n")
    assert namespace(with_context) == "from-file"
    assert namespace(with_context, namespace="from-option") == "from-option"
    with pytest.raises(ds.ValidationError, match="not a valid Kubernetes namespace"):
        namespace(with_context, namespace="Not_A_Namespace")


def test_an_identified_client_writes_in_the_context_namespace_too(server, tmp_path, no_pod_environment, clients):
    uid = server.create_pod("worker-0", namespace="team-a")["metadata"]["uid"]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, namespace="team-a")
    client = ds.connect(
        "kube://", kubeconfig=str(kubeconfig), podinfo_dir=str(no_pod_environment), pod_name="worker-0", pod_uid=uid
    )
    clients.append(client)
    assert client.identity.namespace == client.api.namespace == "team-a"
    client.register(endpoint_spec())
    assert server.get(WORKER_METADATA, "worker-0", namespace="team-a") is not None


# -- request_timeout -----------------------------------------------------------------------------


def test_request_timeout_is_validated_like_the_other_durations(server, laptop):
    assert laptop().api.request_timeout is None  # default: 10 s to connect, 30 s to answer
    assert laptop(request_timeout="2.5").api.request_timeout == 2.5
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(ds.ValidationError, match=r"request_timeout=.* is not valid: a number of seconds"):
            laptop(request_timeout=bad)


VERSION_REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def answer_version_only(connection: socket.socket, stop: threading.Event) -> None:
    """Answer the requests for ``/version`` on ``connection`` (how connecting checks that the API
    server is there) and nothing else, keeping the connection open."""
    connection.settimeout(0.1)
    pending = b""
    while not stop.is_set():
        try:
            chunk = connection.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return
        if not chunk:
            return
        pending += chunk
        while b"\r\n\r\n" in pending:
            head, pending = pending.split(b"\r\n\r\n", 1)
            if not head.startswith(b"GET /version"):
                return  # held: never answered (the socket stays open until the fixture ends)
            connection.sendall(VERSION_REPLY)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback server that accepts connections and answers nothing but ``GET /version`` (so
    connecting succeeds): its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection = listener.accept()[0]
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)
            threading.Thread(target=answer_version_only, args=(connection, stop), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for connection in held:
            connection.close()
        listener.close()


def test_a_server_that_never_answers_fails_a_request_within_request_timeout(
    silent_server, tmp_path, no_pod_environment
):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", silent_server, namespace=None)
    with ds.connect(
        "kube://", kubeconfig=str(kubeconfig), podinfo_dir=str(no_pod_environment), request_timeout=1, ready_timeout=5
    ) as client:
        started = time.monotonic()
        with pytest.raises(ds.BackendUnavailable) as failed:
            client.check_connection()
        elapsed = time.monotonic() - started
        message = str(failed.value)
        assert elapsed < 2.0, elapsed  # one attempt: urllib3 does not retry the timed-out GET
        assert "\n" not in message
        assert message.startswith(
            f"listing DynamoWorkerMetadata failed: cannot reach the Kubernetes API server {silent_server} ("
        )
        assert "timed out" in message


def test_a_write_to_a_server_that_never_answers_is_bounded_by_write_timeout_and_request_timeout(
    silent_server, tmp_path, no_pod_environment
):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", silent_server, namespace=None)
    with ds.connect(
        "kube://",
        kubeconfig=str(kubeconfig),
        podinfo_dir=str(no_pod_environment),
        pod_name="worker-0",
        pod_uid="uid-0",
        request_timeout=0.5,
        write_timeout=1,
    ) as client:
        started = time.monotonic()
        with pytest.raises(ds.BackendUnavailable, match=f"cannot reach the Kubernetes API server {silent_server}"):
            client.register(endpoint_spec())
        assert time.monotonic() - started < 1 + 0.5 + 1


def test_in_a_pod_the_context_namespace_is_the_service_accounts(server, tmp_path, monkeypatch, no_pod_environment):
    from discovery_sync.backends.kube import wire

    def in_cluster(client_configuration) -> None:
        client_configuration.host = server.url

    (tmp_path / "namespace").write_text("team-b\n")
    monkeypatch.setattr(wire.config, "load_incluster_config", in_cluster)
    monkeypatch.setattr(wire, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "namespace"))
    with ds.connect("kube://", podinfo_dir=str(no_pod_environment), read_only=True) as client:
        assert client.api.namespace == "team-b" and client.api.server == server.url
        assert client.list(ds.Query.endpoints()) == []
    monkeypatch.setattr(wire, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "missing"))
    with ds.connect("kube://", podinfo_dir=str(no_pod_environment), read_only=True) as client:
        assert client.api.namespace == "default"
