"""Every valid Unicode string travels through the API server unchanged (issue 34, case 2).

The API server decodes an apply body (``application/apply-patch+yaml``) with a YAML reader: it
refuses JSON's surrogate-pair escapes for characters outside the BMP (``non_bmp.json``: 400
"found invalid Unicode character escape code"), refuses some characters as literal text and folds
others as line breaks. The client sends literal UTF-8 and escapes only what YAML cannot carry.
A watch stream cut inside an event (its last line without its end) is a broken connection to
resume from, not a crash: orjson reports the truncated UTF-8 of such a character as "surrogates
not allowed", which is what two clients logged at shutdown.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
import yaml
from discovery_sync.backends.kube.wire import TRANSPORT_ERRORS, CutStream, KubeApi, load_cluster

import discovery_sync as ds
from testrigs.helpers import model_spec
from testrigs.kubeconfig import write_kubeconfig
from tests.kube.test_writes import patches

#: text outside the BMP, characters YAML refuses literally (DEL, C1, U+FFFE/U+FFFF), folds as line
#: breaks (NEL, U+2028, U+2029) or may take for a byte-order mark, JSON escapes and plain non-ASCII
TRICKY = 'llama 🚀 \U0001d518 \x7f \x80 \x85 \x9f \u2028 \u2029 \ufeff \ufffe \uffff é 日本 \x00 \t\r\n " \\'


def test_text_outside_the_bmp_and_yaml_specials_are_stored_and_read_back_unchanged(server, pod_client):
    writer, reader = pod_client("worker-0"), pod_client("worker-1")
    model = writer.register(model_spec(TRICKY, labels={TRICKY: [TRICKY]}))
    (request,) = patches(server)
    assert b"\\ud8" not in request.body and b"\\ud9" not in request.body  # no surrogate-pair escapes
    assert "🚀".encode() in request.body  # literal UTF-8
    # what a YAML reader (the API server's kind) makes of the body is what JSON makes of it
    assert yaml.safe_load(request.body.decode("utf-8")) == json.loads(request.body)
    assert reader.get(model.id()) == model
    assert reader.list(ds.Query.models())[0].card_json["display_name"] == TRICKY


@pytest.fixture
def cut_stream_server() -> Iterator[int]:
    """A loopback server answering one watch with half an event (ending inside 🚀), then closing."""
    listener = socket.create_server(("127.0.0.1", 0))
    event = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "🚀"}}}, ensure_ascii=False).encode()
    half = event[: event.index("🚀".encode()) + 2]

    def serve() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + b"%x\r\n%s\r\n" % (len(half), half)
                    + b"0\r\n\r\n"
                )

    thread = threading.Thread(target=serve, name="cut-stream-server", daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    thread.join(5)


def test_a_watch_stream_cut_inside_an_event_is_a_transport_error(cut_stream_server, tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cut_stream_server}")
    api = KubeApi(load_cluster(kubeconfig).api_client, "default")
    try:
        with pytest.raises(CutStream, match="ended inside an event") as cut:
            list(api.watch(api.worker_metadata, "1", lambda response: None))
        assert isinstance(cut.value, TRANSPORT_ERRORS)  # the watch thread retries it as a dropped connection
    finally:
        api.close()
