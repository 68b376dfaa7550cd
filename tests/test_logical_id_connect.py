"""Logical instance ids at connect: the ``logical_instance_id``/``logical_instance_key`` options
and ``DYN_DISCOVERY_LOGICAL_INSTANCE_ID``/``_KEY`` on every backend. File and memory clients take
the id as their instance id; etcd and Kubernetes refuse one before any network access; read-only
clients ignore the variables and refuse the options."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file import FileDiscovery
from discovery_sync.backends.memory import MemoryDiscovery
from discovery_sync.tools import cli

import discovery_sync as ds
from discovery_sync.logical_id import ID_VARIABLE, KEY_VARIABLE, hash_key
from testrigs.kubeconfig import write_kubeconfig

KEY = "vllm-decode-7f9c8d-xk2lp"
KEY_ID = 7575908917934716  # the reference's DefaultHasher of KEY, masked
U64_MAX = 2**64 - 1
EXPLAINED = "use the file backend on the pod's shared directory (DYN_DISCOVERY_BACKEND=file and DYN_FILE_KV"


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (ID_VARIABLE, KEY_VARIABLE, "POD_NAME", "POD_UID", "DYN_DISCOVERY_BACKEND", "ETCD_ENDPOINTS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that answers nothing: ``accept()`` afterwards tells whether a client connected
    (the kernel completes the handshake into the backlog). A client that connects before refusing
    fails the test at once (connect_timeout=0.1, request_timeout=0.1) instead of retrying for 10 s."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server


def assert_untouched(server: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        server.accept()[0].close()


def clients(tmp_path: Path) -> list[str]:
    return ["memory://logical-id", f"file://{tmp_path}/store"]


# -- file and memory: the logical id is the instance id ----------------------------------------------
@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_a_logical_id_becomes_the_instance_id(tmp_path, scheme):
    url = "memory://logical-id" if scheme == "memory" else f"file://{tmp_path}/store"
    with ds.connect(f"{url}?logical_instance_key={KEY}") as client:
        assert client.instance_id == client.logical_instance_id == KEY_ID
        endpoint = client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("h:1")))
        assert endpoint.instance_id == KEY_ID
    with ds.connect(url, logical_instance_id="0x2a") as client:
        assert client.instance_id == client.logical_instance_id == 42
    with ds.connect(url, logical_instance_id=U64_MAX) as client:  # an explicit id is not masked
        assert client.instance_id == client.logical_instance_id == U64_MAX


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_without_a_logical_id_there_is_none(tmp_path, scheme):
    url = "memory://logical-id" if scheme == "memory" else f"file://{tmp_path}/store"
    with ds.connect(url, instance_id=7) as client:
        assert client.logical_instance_id is None
        assert client.instance_id == 7
    with ds.connect(url, logical_instance_key="  ") as client:  # a blank key is no key
        assert client.logical_instance_id is None


def test_the_environment_gives_the_id(tmp_path, env):
    env.setenv(KEY_VARIABLE, "ns/$(POD_NAME)/engine")
    env.setenv("POD_NAME", "leader-0")
    for url in clients(tmp_path):
        with ds.connect(url) as client:
            assert client.instance_id == client.logical_instance_id == hash_key("ns/leader-0/engine")
    env.setenv(ID_VARIABLE, "0x2a")  # the id beats the key
    for url in clients(tmp_path):
        with ds.connect(url) as client:
            assert client.instance_id == client.logical_instance_id == 42


def test_an_id_of_ten_thousand_leading_zeros_then_1_is_1(tmp_path, env):
    """As the reference parses it (issue 38, point 5); connect() raised int()'s bare ValueError."""
    padded = "0" * 10_000 + "1"
    for url in clients(tmp_path):
        with ds.connect(url, logical_instance_id=padded) as client:
            assert client.instance_id == client.logical_instance_id == 1
    env.setenv(ID_VARIABLE, padded)
    for url in clients(tmp_path):
        with ds.connect(url) as client:
            assert client.instance_id == client.logical_instance_id == 1
    env.setenv(ID_VARIABLE, "0" * 10_000 + "2" * 21)
    for url in clients(tmp_path):
        with pytest.raises(ds.ValidationError, match=f"^{ID_VARIABLE}='0000.*is not valid.*larger"):
            ds.connect(url)


def test_bad_environment_values_are_refused_naming_the_variable(tmp_path, env):
    env.setenv(ID_VARIABLE, "0")
    for url in clients(tmp_path):
        with pytest.raises(ds.ValidationError, match=f"^{ID_VARIABLE}='0' is not valid: a non-zero whole number"):
            ds.connect(url)
    env.delenv(ID_VARIABLE)
    env.setenv(KEY_VARIABLE, "ns/$(POD_NAME)")
    for url in clients(tmp_path):
        with pytest.raises(ds.ValidationError, match=rf"^{KEY_VARIABLE}=.*'POD_NAME'.*not set"):
            ds.connect(url)
    assert not (tmp_path / "store").exists()  # refused before the store was touched


def test_an_option_replaces_the_environment(tmp_path, env):
    env.setenv(ID_VARIABLE, "99")
    env.setenv(KEY_VARIABLE, "ns/$(MISSING)")
    env.setenv("POD_NAME", "leader-0")
    for url in clients(tmp_path):
        with ds.connect(url, logical_instance_key="$(POD_NAME)") as client:  # $(VAR) still reads the environment
            assert client.logical_instance_id == hash_key("leader-0")
        with ds.connect(f"{url}?logical_instance_key=k") as client:
            assert client.logical_instance_id == hash_key("k")
        with ds.connect(url, logical_instance_id="") as client:  # given, though blank: the variables are not read
            assert client.logical_instance_id is None


def test_option_errors_name_the_backend_option(tmp_path):
    with pytest.raises(ds.ValidationError, match=r"^memory option logical_instance_id='nope' is not valid"):
        ds.connect("memory://?logical_instance_id=nope")
    with pytest.raises(ds.ValidationError, match=r"^file store option logical_instance_key='\$\(NOPE\)' is not valid"):
        ds.connect(f"file://{tmp_path}", logical_instance_key="$(NOPE)")
    for bad in (0, True, U64_MAX + 1, "٤٢"):
        with pytest.raises(ds.ValidationError, match="memory option logical_instance_id="):
            ds.connect("memory://", logical_instance_id=bad)


def test_a_keyword_beats_the_url_query(tmp_path):
    for url in clients(tmp_path):
        with ds.connect(f"{url}?logical_instance_id=5", logical_instance_id=6) as client:
            assert client.logical_instance_id == 6
        with ds.connect(f"{url}?logical_instance_key=a", logical_instance_key="b") as client:
            assert client.logical_instance_id == hash_key("b")
        with ds.connect(f"{url}?logical_instance_key=a", logical_instance_id=8) as client:  # the id beats a key
            assert client.logical_instance_id == 8


def test_instance_id_must_agree_with_the_logical_id(tmp_path):
    for url in clients(tmp_path):
        with ds.connect(f"{url}?instance_id=42&logical_instance_id=0x2a") as client:
            assert client.instance_id == client.logical_instance_id == 42
        with pytest.raises(ds.ValidationError, match="instance_id=7 and logical_instance_id=42 disagree"):
            ds.connect(url, instance_id=7, logical_instance_id=42)
        with pytest.raises(ds.ValidationError, match=f"instance_id=7 and logical_instance_id={KEY_ID} disagree"):
            ds.connect(f"{url}?instance_id=7&logical_instance_key={KEY}")


def test_the_constructors_take_and_check_the_logical_id(tmp_path):
    with MemoryDiscovery(logical_instance_id=5) as memory, FileDiscovery(tmp_path, logical_instance_id=6) as file:
        assert (memory.instance_id, memory.logical_instance_id) == (5, 5)
        assert (file.instance_id, file.logical_instance_id) == (6, 6)
    for bad in (0, -1, True, U64_MAX + 1, 1.5):
        with pytest.raises(ds.ValidationError, match="logical_instance_id"):
            MemoryDiscovery(logical_instance_id=bad)
        with pytest.raises(ds.ValidationError, match="logical_instance_id"):
            FileDiscovery(tmp_path, logical_instance_id=bad)
    with pytest.raises(ds.ValidationError, match="disagree"):
        FileDiscovery(tmp_path, instance_id=1, logical_instance_id=2)


# -- read-only clients -------------------------------------------------------------------------------
def test_read_only_clients_ignore_the_environment(tmp_path, env, capsys):
    ds.connect(f"file://{tmp_path}/store").shutdown()  # the store exists (the CLI refuses a missing one)
    env.setenv(ID_VARIABLE, "0")  # invalid, and not even read
    env.setenv(KEY_VARIABLE, "ns/$(MISSING)")
    for url in clients(tmp_path):
        with ds.connect(url, read_only=True) as client:
            assert client.logical_instance_id is None
    # the CLI's reading commands connect read-only: `discovery-sync list` works in a cohort's pod
    assert cli.main(["--url", f"file://{tmp_path}/store", "list"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("option", ["logical_instance_id", "logical_instance_key"])
def test_read_only_clients_refuse_a_logical_option(tmp_path, option):
    urls = [*clients(tmp_path), "etcd://127.0.0.1:1?connect_timeout=0.1", "kube://?kubeconfig=/nonexistent"]
    for url in urls:
        with pytest.raises(
            ds.ValidationError, match=f"option {option} cannot be used with read_only=true: a read-only"
        ):
            ds.connect(url, read_only="true", **{option: "5"})
    with pytest.raises(ds.ValidationError, match="read-only client registers nothing"):
        MemoryDiscovery(read_only=True, logical_instance_id=5)


def test_read_only_etcd_and_kube_clients_ignore_the_environment(env):
    env.setenv(KEY_VARIABLE, KEY)
    # they get past the logical id and fail only where they would without it
    with pytest.raises(ds.BackendUnavailable):
        ds.connect("etcd://127.0.0.1:1?read_only=true&connect_timeout=0.1")
    with pytest.raises(ds.BackendUnavailable, match="cannot load the kubeconfig /nonexistent"):
        ds.connect("kube://?kubeconfig=/nonexistent&read_only=true")


# -- etcd and Kubernetes cannot host a cohort ---------------------------------------------------------
ETCD_WHY = "an etcd client's instance id is its lease id"
KUBE_WHY = "a Kubernetes client's instance id is derived from its DynamoWorkerMetadata name"


def test_etcd_refuses_a_logical_id_before_connecting(listener, env):
    url = f"etcd://127.0.0.1:{listener.getsockname()[1]}?connect_timeout=0.1&request_timeout=0.1"
    with pytest.raises(ds.ValidationError) as caught:
        ds.connect(url, logical_instance_id=42)
    message = str(caught.value)
    assert message.startswith(
        "etcd option logical_instance_id gives this client the logical instance id 42, but the etcd backend "
        "cannot host a failover cohort: "
    )
    assert ETCD_WHY in message and "two live clients cannot share one lease" in message and EXPLAINED in message
    with pytest.raises(ds.ValidationError, match=f"^etcd option logical_instance_id gives .* {ETCD_WHY}"):
        ds.connect("etcd://127.0.0.1:1?connect_timeout=0.1", logical_instance_id=42)
    env.setenv(KEY_VARIABLE, KEY)
    with pytest.raises(ds.ValidationError, match=f"^{KEY_VARIABLE} gives .* id {KEY_ID}, but the etcd backend"):
        ds.connect(url)
    with pytest.raises(ds.ValidationError, match=f"^etcd option logical_instance_key gives .* {ETCD_WHY}"):
        ds.connect(url, logical_instance_key=KEY)
    assert_untouched(listener)


def test_kube_refuses_a_logical_id_before_contacting_the_cluster(listener, tmp_path, env):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{listener.getsockname()[1]}", token="t")
    identity = {"pod_name": "worker-0", "pod_uid": "uid-0", "ready_timeout": 0.2}
    with pytest.raises(ds.ValidationError) as caught:
        ds.connect(f"kube://?kubeconfig={kubeconfig}", logical_instance_key=KEY, **identity)
    message = str(caught.value)
    assert message.startswith(
        f"kube option logical_instance_key gives this client the logical instance id {KEY_ID}, but the "
        "Kubernetes backend cannot host a failover cohort: "
    )
    assert KUBE_WHY in message and "one CR per pod" in message and "readers key workers by CR" in message
    assert EXPLAINED in message
    env.setenv(ID_VARIABLE, "0x2a")
    env.setenv(KEY_VARIABLE, KEY)
    with pytest.raises(ds.ValidationError, match=f"^{ID_VARIABLE} and {KEY_VARIABLE} give .* id 42, but the Kub"):
        ds.connect(f"kube://?kubeconfig={kubeconfig}", **identity)
    with pytest.raises(ds.ValidationError, match=f"^{ID_VARIABLE} and {KEY_VARIABLE} give .* {KUBE_WHY}"):
        ds.connect("kube://?kubeconfig=/nonexistent")  # no identity needed to be refused
    assert_untouched(listener)


def test_bad_logical_values_on_etcd_and_kube_are_validation_errors(env):
    with pytest.raises(ds.ValidationError, match=r"^etcd option logical_instance_id='0' is not valid"):
        ds.connect("etcd://127.0.0.1:1?connect_timeout=0.1", logical_instance_id="0")
    env.setenv(KEY_VARIABLE, "$(")
    with pytest.raises(ds.ValidationError, match=rf"^{KEY_VARIABLE}='\$\(' is not valid: .*unterminated"):
        ds.connect("kube://?kubeconfig=/nonexistent")


# -- every backend knows the two options --------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["memory://", "file://{tmp}", "etcd://127.0.0.1:1?connect_timeout=0.1", "kube://?kubeconfig=/nonexistent"]
)
def test_every_backend_lists_the_options(tmp_path, url):
    with pytest.raises(ds.ValidationError, match=r"the valid ones are .*logical_instance_id, logical_instance_key"):
        ds.connect(url.format(tmp=tmp_path), colour="blue")
