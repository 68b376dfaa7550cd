"""Connecting the way a worker does: everything from the environment and the kubeconfig."""

from __future__ import annotations

import os

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec
from testrigs.kube_fake import WORKER_METADATA


@pytest.mark.skipif(os.path.exists("/etc/podinfo"), reason="this host has Downward-API files of its own")
def test_the_reference_environment_alone_connects(server, kubeconfig, monkeypatch):
    pod = server.create_pod("worker-0")
    monkeypatch.setenv("DYN_DISCOVERY_BACKEND", "kubernetes")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("POD_NAME", "worker-0")
    monkeypatch.setenv("POD_UID", pod["metadata"]["uid"])
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.delenv("DYN_KUBE_DISCOVERY_MODE", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with ds.connect() as client:
        assert client.backend_name == "kube" and client.instance_id == 1186445869714687
        endpoint = client.register(endpoint_spec())
        assert client.list(ds.Query.endpoints()) == [endpoint]
        assert server.get(WORKER_METADATA, "worker-0") is not None
    assert server.get(WORKER_METADATA, "worker-0") is None


def test_url_options_are_parsed(server, kubeconfig):
    pod = server.create_pod("worker-0")
    url = f"kube://?pod_name=worker-0&pod_uid={pod['metadata']['uid']}&ready_timeout=2.5&consistent_reads=false"
    with ds.connect(url, kubeconfig=str(kubeconfig), podinfo_dir=str(kubeconfig.parent)) as client:
        assert (client.ready_timeout, client.consistent_reads) == (2.5, False)
        assert client.status()["cr_name"] == "worker-0"
    with pytest.raises(ds.ValidationError, match=r"consistent_reads=.perhaps. is not valid: true or false"):
        ds.connect("kube://?pod_name=p&pod_uid=u&consistent_reads=perhaps", kubeconfig=str(kubeconfig))
