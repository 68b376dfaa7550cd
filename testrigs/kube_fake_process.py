"""A FakeKubeServer in a process of its own, known to tests only by the kubeconfig it writes, as a
real cluster would be (tests/kube/test_cluster_rig.py runs the contract suite against it).

``python -m testrigs.kube_fake_process KUBECONFIG REPORT``: serve on a loopback port with no
EndpointSlice controller and no DynamoWorkerMetadata CRD installed, write KUBECONFIG, print
``ready``; when standard input closes, stop and write REPORT (JSON): ``writes``, every request
that was not a GET as ``[method, path, metadata.name of the body or null]``, and ``left``, the
names of the namespaces, nodes and CRDs still there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from testrigs.kube_fake import FakeKubeServer, RecordedRequest


def _body_name(request: RecordedRequest) -> str | None:
    try:
        body = json.loads(request.body) if request.body.strip() else None
    except ValueError:
        return None
    name = ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
    return name if isinstance(name, str) else None


def report(server: FakeKubeServer) -> dict[str, Any]:
    """What the server saw written, and what is left of the cluster-wide objects."""
    writes = [[r.method, r.path, _body_name(r)] for r in server.requests if r.method != "GET"]
    left = {
        plural: sorted(o["metadata"]["name"] for o in server.objects(plural))
        for plural in ("namespaces", "nodes", "customresourcedefinitions")
    }
    return {"writes": writes, "left": left}


def main(kubeconfig: str, report_path: str) -> None:
    server = FakeKubeServer(bookmark_interval=0.2, auto_endpoint_slices=False)
    server.set_crd_installed(False)
    server.start()
    try:
        server.write_kubeconfig(kubeconfig)
        print("ready", flush=True)
        sys.stdin.read()  # until the parent closes it
    finally:
        Path(report_path).write_text(json.dumps(report(server)))
        server.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
