"""A loopback HTTP server that answers with what a real kube-apiserver answered (a recorded step of
``tests/fixtures/kube-apiserver-1.28/``): its status, content type and body byte for byte, so the
official client raises on it exactly what it raised against the real server.

``answering(step)`` serves that one answer to every request; ``recorded_api(step, tmp_path)`` is a
:class:`~backends.kube.wire.KubeApi` of the step's namespace connected to it through a kubeconfig.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from backends.kube.wire import KubeApi, load_cluster
from testrigs.kubeconfig import write_kubeconfig
from tests.kube_fake.transcripts import Step

_NAMESPACE = re.compile(r"/namespaces/([^/?]+)")


def _payload(response: dict[str, Any]) -> bytes:
    if "body_text" in response:
        return str(response["body_text"]).encode()
    body = response["body"]
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _RecordedServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        response = self.server.response
        payload = _payload(response)
        self.send_response(int(response["status"]))
        self.send_header("Content-Type", str(response["content_type"]))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _answer


class _RecordedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.response = response


@contextmanager
def answering(step: Step) -> Iterator[str]:
    """Serve ``step``'s recorded answer to every request; yields the server's URL."""
    server = _RecordedServer(step.response)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def recorded_api(step: Step, tmp_path: Path) -> Iterator[KubeApi]:
    """A KubeApi of the namespace ``step``'s request named, talking to a server answering as recorded."""
    found = _NAMESPACE.search(step.path)
    namespace = found.group(1) if found else "default"
    with answering(step) as url:
        cluster = load_cluster(write_kubeconfig(tmp_path / "kubeconfig", url, namespace=namespace))
        api = KubeApi(cluster.api_client, namespace)
        try:
            yield api
        finally:
            api.close()
