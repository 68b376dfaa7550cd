"""The contract-suite rig for the Kubernetes backend: a cluster and one ready pod per client.

By default the cluster is an in-process FakeKubeServer that keeps an EndpointSlice of its pods (as
the EndpointSlice controller does), so a pod created ready is a served worker. With the variable
``DISCOVERY_SYNC_TEST_KUBECONFIG`` naming a kubeconfig, it is that existing cluster instead
(:mod:`testrigs.kube_cluster`: a fresh namespace per test, pods made as a kubelet would make them,
everything the rig made deleted afterwards), reached with the kubeconfig's own user.

Each client is connected with its own pod's identity through connect options, never through
``os.environ``; a reader (``rig.reader()``) with only the kubeconfig and the namespace: no pod
identity, no pod, ``read_only=True``.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.kube_cluster import KubeCluster, RigNamespace
from testrigs.kube_fake import FakeKubeServer
from tests.contract.conftest import StoreRig

#: names a kubeconfig: the contract suite's Kubernetes cases then run on that cluster instead of the fake
CLUSTER_VARIABLE = "DISCOVERY_SYNC_TEST_KUBECONFIG"


@dataclass
class KubeRig(StoreRig):
    server: FakeKubeServer | None = None  # the in-process fake, when the rig runs one
    namespace: RigNamespace | None = None  # this test's namespace on an existing cluster

    def close(self) -> None:
        try:
            super().close()
        finally:
            try:
                if self.namespace is not None:
                    self.namespace.close()
            finally:
                if self.server is not None:
                    self.server.stop()


def _pod_settings(kubeconfig: Path, namespace: str, pod_name: str, pod_uid: str, podinfo: Path) -> dict[str, object]:
    return {
        "pod_name": pod_name,
        "pod_uid": pod_uid,
        "namespace": namespace,
        "mode": "pod",
        "kubeconfig": str(kubeconfig),
        "podinfo_dir": str(podinfo),  # a directory that does not exist: no downward-API files
    }


def connect_pod(server: FakeKubeServer, kubeconfig: Path, pod_name: str, **options: object) -> ds.Discovery:
    """Create a ready pod called ``pod_name`` and connect a client as that pod (``options`` override)."""
    pod = server.create_pod(pod_name)
    settings = _pod_settings(kubeconfig, "default", pod_name, pod["metadata"]["uid"], kubeconfig.parent / "no-podinfo")
    return ds.connect("kube://", **{**settings, **options})


def connect_cluster_pod(namespace: RigNamespace, pod_name: str, podinfo: Path, **options: object) -> ds.Discovery:
    """Start a ready pod called ``pod_name`` in the rig's namespace and connect a client as that pod."""
    uid = namespace.start_pod(pod_name)
    settings = _pod_settings(namespace.cluster.kubeconfig, namespace.name, pod_name, uid, podinfo)
    return ds.connect("kube://", **{**settings, **options})


def connect_reader(kubeconfig: Path, namespace: str = "default", **options: object) -> ds.Discovery:
    """A read-only client with no pod identity and no pod: the kubeconfig and the namespace only."""
    settings: dict[str, object] = {"kubeconfig": str(kubeconfig), "namespace": namespace, "read_only": True}
    return ds.connect("kube://", **{**settings, **options})


_clusters: dict[Path, KubeCluster] = {}  # one per kubeconfig for the test process; closed at its end


def _cluster(request: pytest.FixtureRequest, kubeconfig: Path) -> KubeCluster:
    cluster = _clusters.get(kubeconfig)
    if cluster is None:
        cluster = _clusters[kubeconfig] = KubeCluster(kubeconfig)

        def release() -> None:
            del _clusters[kubeconfig]
            cluster.close()  # the shared Node and CRD, if the rig made them and no other worker uses them

        request.config.add_cleanup(release)
    return cluster


def _cluster_rig(request: pytest.FixtureRequest, tmp_path: Path, kubeconfig: Path) -> StoreRig:
    namespace = _cluster(request, kubeconfig).open_namespace()
    numbers = itertools.count()
    return KubeRig(
        "kube",
        lambda **kw: connect_cluster_pod(namespace, f"worker-{next(numbers)}", tmp_path / "no-podinfo", **kw),
        quiet_period=0.3,
        connect_reader=lambda: connect_reader(kubeconfig, namespace.name),
        namespace=namespace,
    )


def kube_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
    cluster_kubeconfig = os.environ.get(CLUSTER_VARIABLE)
    if cluster_kubeconfig:
        return _cluster_rig(request, tmp_path, Path(cluster_kubeconfig).expanduser().resolve())
    server = FakeKubeServer(auto_endpoint_slices=True, bookmark_interval=0.2).start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    numbers = itertools.count()
    return KubeRig(
        "kube",
        lambda **kw: connect_pod(server, kubeconfig, f"worker-{next(numbers)}", **kw),
        quiet_period=0.3,
        connect_reader=lambda: connect_reader(kubeconfig),
        server=server,
    )
