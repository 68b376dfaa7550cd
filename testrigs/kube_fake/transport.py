"""HTTP/1.1 plumbing: a threading loopback server, JSON replies, chunked watch streams and the
server's lifecycle as clients see it (health checks, the phases of a restart, a graceful shutdown)."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import status as st
from .api import KubeApi, Reply, Request, WatchReply
from .jsonwire import encode
from .resources import CUSTOM_GROUP, ResourceType
from .watch import bookmark

_LIVENESS_POLL = 0.25  # how often an idle watch stream checks that its client is still there
PRE_TIMEOUT_BOOKMARK = 2.0  # a real server's last BOOKMARK comes this long before timeoutSeconds
_HEALTH_PATHS = ("/readyz", "/livez", "/healthz")
_NOT_READY_TEXT = (
    "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[-]informer-sync failed: reason withheld\n"
    "[-]poststarthook/crd-informer-synced failed: reason withheld\nreadyz check failed\n"
)


class Lifecycle:
    """What a restarted server answers while it starts: 503 for custom resources until their paths
    are installed, 500 on ``/readyz`` until ready (durations in real seconds times ``time_scale``)."""

    def __init__(self, time_scale: float = 1.0):
        self.time_scale = time_scale
        self._installed_at = 0.0
        self._ready_at = 0.0

    def restarted(self, installing: float, not_ready: float) -> None:
        started = time.monotonic()
        self._installed_at = started + installing * self.time_scale
        self._ready_at = started + not_ready * self.time_scale

    def early_answer(self, path: str) -> Reply | None:
        """The answer a starting server gives instead of serving ``path``, if any."""
        if path.startswith(f"/apis/{CUSTOM_GROUP}") and time.monotonic() < self._installed_at:
            message = "the request has been made before all known HTTP paths have been installed, please try again"
            error = st.ApiError(503, message, "ServiceUnavailable", {"retryAfterSeconds": 5})
            return Reply(503, error.to_status())
        return None

    def health(self, path: str) -> tuple[int, str]:
        """``/readyz`` (and ``/livez``, ``/healthz``): status and text."""
        if path == "/readyz" and time.monotonic() < self._ready_at:
            return 500, _NOT_READY_TEXT
        return 200, "ok"


def _encode(obj: dict[str, Any]) -> bytes:
    """JSON text as the Go API server writes it (literal UTF-8, Go's number forms; :mod:`.jsonwire`)."""
    return encode(obj)


class HttpServer(ThreadingHTTPServer):
    """Serves :class:`KubeApi` on 127.0.0.1 (on ``port``; 0: one the OS chooses) and tracks its connections."""

    daemon_threads = True
    allow_reuse_address = True
    # a real apiserver (Go) listens with the kernel's largest backlog; socketserver's default of 5
    # drops connections that arrive while its accept thread waits for the GIL (the client's SYN is
    # then retried after 1, 3, 7, 15 s...)
    request_queue_size = 4096

    def __init__(
        self,
        api: KubeApi,
        record: Callable[[Request, str], None],
        bookmark_interval: Callable[[], float],
        bookmark_sent: Callable[[ResourceType], None] = lambda rt: None,
        *,
        port: int = 0,
        lifecycle: Lifecycle | None = None,
    ):
        super().__init__(("127.0.0.1", port), _Handler)
        self.api = api
        self.record = record
        self.bookmark_interval = bookmark_interval
        self.bookmark_sent = bookmark_sent
        self.lifecycle = lifecycle or Lifecycle()
        self.stopping = threading.Event()
        self.refusing = threading.Event()  # shutting down: no new connection, no new request
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._busy: set[socket.socket] = set()  # connections in the middle of a request
        self._streams = 0
        self._streams_done = threading.Condition(self._lock)
        self.arrivals: dict[str, int] = {}  # requests whose body is being read, by method and path
        self.errors: list[BaseException] = []  # failures of the fake itself, raised by FakeKubeServer.stop

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (or a connection dropped at stop) is normal; anything else is
        a bug of the fake, kept for the test to fail on instead of printed."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError) or (isinstance(exc, OSError) and self.stopping.is_set()):
            return
        if exc is not None:
            with self._lock:
                self.errors.append(exc)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._lock:
            if alive:
                self._connections[conn] = threading.current_thread()
            else:
                self._connections.pop(conn, None)
                self._busy.discard(conn)

    def mark_busy(self, conn: socket.socket, busy: bool) -> bool:
        """Mark a connection as serving a request (False: refused, the server is shutting down)."""
        with self._lock:
            if busy and self.refusing.is_set():
                return False
            (self._busy.add if busy else self._busy.discard)(conn)
            return True

    def refuse(self) -> None:
        """Begin a graceful shutdown: stop listening (connections are refused) and close idle
        kept-alive connections without a response; requests in progress (watches) go on."""
        self.refusing.set()
        self.shutdown()
        self.server_close()
        with self._lock:
            idle = [conn for conn in self._connections if conn not in self._busy]
        for conn in idle:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def arriving(self, request_line: str, delta: int) -> None:
        """Count requests whose headers came and whose body is still being read (a diagnostic)."""
        with self._lock:
            self.arrivals[request_line] = self.arrivals.get(request_line, 0) + delta
            if not self.arrivals[request_line]:
                del self.arrivals[request_line]

    def stream_delta(self, delta: int) -> None:
        with self._lock:
            self._streams += delta
            self._streams_done.notify_all()

    def wait_streams_closed(self, timeout: float) -> None:
        with self._lock:
            self._streams_done.wait_for(lambda: self._streams == 0, timeout)

    def drop_connections(self, timeout: float) -> None:
        """Shut down every open connection (idle keep-alive ones included) and join their threads."""
        with self._lock:
            connections = list(self._connections.items())
        for conn, _ in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for _, thread in connections:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-fake/1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test-control API keeps its own request log."""

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        if not self.server.mark_busy(self.connection, True):
            self.close_connection = True  # shutting down: closed without a response
            return
        try:
            self._answer()
        finally:
            self.server.mark_busy(self.connection, False)

    def _answer(self) -> None:
        url = urlsplit(self.path)
        self.server.arriving(f"{self.command} {url.path}", +1)
        try:
            body = self._read_body()
        finally:
            self.server.arriving(f"{self.command} {url.path}", -1)
        req = Request(
            method=self.command,
            path=unquote(url.path),
            query=parse_qs(url.query, keep_blank_values=True),
            headers=self.headers,
            body=body,
        )
        self.server.record(req, url.query)
        if req.path in _HEALTH_PATHS:
            self._send_text(*self.server.lifecycle.health(req.path))
            return
        reply = self.server.lifecycle.early_answer(req.path) or self.server.api.handle(req)
        if isinstance(reply, WatchReply):
            self._stream(reply)
        else:
            self._send(reply)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _send(self, reply: Reply) -> None:
        if reply.text is not None:
            payload, content_type = reply.text.encode(), "text/plain; charset=utf-8"
        else:  # Go's json.Encoder ends the document with a newline
            payload, content_type = _encode(reply.body) + b"\n", "application/json"
        self.send_response(reply.code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        for warning in reply.warnings:
            self.send_header("Warning", warning)
        self.end_headers()
        self.wfile.write(payload)

    def _send_text(self, code: int, text: str) -> None:
        payload = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(payload)

    def _chunk(self, event: dict[str, Any]) -> None:
        """One event = one chunk = one JSON line, sent at once (the writer is unbuffered)."""
        line = _encode(event) + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))

    def _client_gone(self) -> bool:
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return peeked == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _stream(self, reply: WatchReply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.server.stream_delta(+1)
        try:
            try:
                if reply.error is not None:
                    self._chunk(reply.error)
                else:
                    self._drain(reply)
            finally:  # unregistered before the client can see the end of the stream
                if reply.watcher is not None:
                    self.server.api.store.unwatch(reply.watcher)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            self.server.stream_delta(-1)
        if self.server.stopping.is_set():
            self.close_connection = True

    def _drain(self, reply: WatchReply) -> None:
        """Send events until ``timeoutSeconds`` (times the time scale), the watcher's close or the
        client's hang-up. BOOKMARKs (when allowed) as a real server sends them: due every bookmark
        interval and 2 s before the timeout, sent only once the type changed after the start."""
        watcher = reply.watcher
        assert watcher is not None
        scale = self.server.lifecycle.time_scale
        opened = time.monotonic()
        deadline = opened + reply.timeout * scale
        last_bookmark_at = deadline - PRE_TIMEOUT_BOOKMARK * scale

        def due_after(moment: float) -> float | None:
            due = min(moment + self.server.bookmark_interval(), last_bookmark_at)
            return due if due > moment else None

        next_bookmark = due_after(opened) if reply.bookmarks else None
        while not self.server.stopping.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            wait = min(deadline - now, _LIVENESS_POLL)
            if next_bookmark is not None:
                wait = min(wait, max(0.0, next_bookmark - now))
            event, bookmark_rv = watcher.next(wait)
            if event is not None:
                self._chunk(event)
                continue
            if watcher.closed or self._client_gone():
                return
            now = time.monotonic()
            if next_bookmark is not None and now >= next_bookmark:
                if bookmark_rv is not None:
                    self._chunk(bookmark(reply.resource, bookmark_rv))
                    self.server.bookmark_sent(reply.resource)
                next_bookmark = due_after(now)
