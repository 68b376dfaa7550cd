from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testrigs.kube_fake import FakeKubeServer
from testrigs.reference import RustPeer
from tests.interop.netns import LoopbackNamespace


@pytest.fixture
def file_store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def rust_peers() -> Iterator[Callable[..., RustPeer]]:
    """``start(backend, env, isolate=False, prefix=None)`` starts a reference-runtime peer; all killed at teardown."""
    started: list[RustPeer] = []

    def start(backend: str, env: dict[str, str], *, isolate: bool = False, prefix: list[str] | None = None) -> RustPeer:
        peer = RustPeer(backend, env, isolate=isolate, prefix=prefix)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.kill()


@pytest.fixture
def rust_peer(file_store: Path, rust_peers) -> Callable[[], RustPeer]:
    """Reference peers on the file store, each in a loopback-only network namespace."""
    return lambda: rust_peers("file", {"DYN_FILE_KV": str(file_store)}, isolate=True)


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    """The smallest local model directory the runtime accepts offline: a config.json of {}."""
    directory = tmp_path / "tiny-model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    return directory


@pytest.fixture
def kube_server() -> Iterator[FakeKubeServer]:
    with FakeKubeServer(auto_endpoint_slices=True, bookmark_interval=0.2) as fake:
        yield fake


@pytest.fixture
def kubeconfig(kube_server: FakeKubeServer, tmp_path: Path) -> Path:
    return kube_server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def rust_kube_peer(kube_server: FakeKubeServer, kubeconfig: Path, rust_peers, tmp_path: Path):
    """``start(pod_name, isolate=False)``: a ready pod in the fake and a reference peer running as it.

    Peers are not isolated (they reach the fake on this host's loopback) unless ``isolate``: then
    they run in a loopback-only network namespace whose loopback is bridged to the fake.
    """
    namespaces: list[LoopbackNamespace] = []

    def start(pod_name: str = "rust-0", *, isolate: bool = False) -> RustPeer:
        pod = kube_server.create_pod(pod_name)
        env = {
            "KUBECONFIG": str(kubeconfig),
            "POD_NAME": pod_name,
            "POD_UID": pod["metadata"]["uid"],
            "POD_NAMESPACE": "default",
            "DYN_LOG": "warn,dynamo_runtime::discovery=debug",  # for serve()'s message when a CR is late
        }
        if not (isolate and LoopbackNamespace.available()):
            return seen_by_the_fake(rust_peers("kubernetes", env))
        namespace = LoopbackNamespace(kube_server.port)
        namespaces.append(namespace)
        bridged = tmp_path / f"kubeconfig-{pod_name}"
        bridged.write_text(kubeconfig.read_text().replace(kube_server.url, f"http://127.0.0.1:{namespace.port}"))
        env["KUBECONFIG"] = str(bridged)
        return seen_by_the_fake(rust_peers("kubernetes", env, prefix=namespace.prefix))

    def seen_by_the_fake(peer: RustPeer) -> RustPeer:
        """A peer that says, when it does not answer, what the fake server saw meanwhile."""
        peer.context = lambda: (
            f"the fake's last requests {[(r.method, r.path) for r in kube_server.requests()[-12:]]}, "
            f"requests whose body it is reading {kube_server.requests_arriving()}"
        )
        return peer

    yield start
    for namespace in namespaces:
        namespace.close()
