"""A loopback TCP proxy that can cut every connection: a network fault between a client and a
real server, without touching either of them."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards connections accepted on ``listener`` (default: a new one on 127.0.0.1) to 127.0.0.1:``target_port``.

    A listener created in another network namespace bridges that namespace's loopback to this one's.
    """

    def __init__(self, target_port: int, listener: socket.socket | None = None) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = listener if listener is not None else socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._open = True
        self._closed = False
        threading.Thread(target=self._accept, name=f"tcp-proxy-{self.port}", daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._open = False
            doomed, self._sockets = self._sockets, set()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._open = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._open:
                    _close(client)
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                # a cut while this connection was being made must drop it too
                cut_meanwhile = not self._open
                if not cut_meanwhile:
                    self._sockets |= {client, upstream}
            if cut_meanwhile:
                _close(client)
                _close(upstream)
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name=f"tcp-proxy-{self.port}-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._before_forwarding(source)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)

    def _before_forwarding(self, source: socket.socket) -> None:
        """Called with each chunk read from ``source`` before it is forwarded (a hook: nothing here)."""


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
