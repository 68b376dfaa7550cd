"""The contract-suite rig for the Kubernetes backend: a FakeKubeServer and one ready pod per client.

The fake keeps an EndpointSlice of its pods (as the EndpointSlice controller does), so a pod
created ready is a served worker. Each client is connected with its own pod's identity through
connect options, never through ``os.environ``; a reader (``rig.reader()``) with only the
kubeconfig and the namespace: no pod identity, no pod, ``read_only=True``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.kube_fake import FakeKubeServer
from tests.contract.conftest import StoreRig


@dataclass
class KubeRig(StoreRig):
    server: FakeKubeServer | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.server is not None:
                self.server.stop()


def connect_pod(server: FakeKubeServer, kubeconfig: Path, pod_name: str, **options: object) -> ds.Discovery:
    """Create a ready pod called ``pod_name`` and connect a client as that pod (``options`` override)."""
    pod = server.create_pod(pod_name)
    settings: dict[str, object] = {
        "pod_name": pod_name,
        "pod_uid": pod["metadata"]["uid"],
        "namespace": "default",
        "mode": "pod",
        "kubeconfig": str(kubeconfig),
        "podinfo_dir": str(kubeconfig.parent / "no-podinfo"),
    }
    return ds.connect("kube://", **{**settings, **options})


def connect_reader(kubeconfig: Path, **options: object) -> ds.Discovery:
    """A read-only client with no pod identity and no pod: the kubeconfig and the namespace only."""
    settings: dict[str, object] = {"kubeconfig": str(kubeconfig), "namespace": "default", "read_only": True}
    return ds.connect("kube://", **{**settings, **options})


def kube_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
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
