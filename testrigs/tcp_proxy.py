"""A loopback TCP proxy that can cut every connection, or fall silent: network faults between a
client and a real server, without touching either of them."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards connections accepted on ``listener`` (default: a new one on 127.0.0.1) to 127.0.0.1:``target_port``.

    A listener created in another network namespace bridges that namespace's loopback to this one's.

    Two faults: :meth:`cut` drops every connection and refuses new ones; :meth:`silence` refuses new
    connections while the open ones stay open but forward nothing, either way (an API server
    shutting down keeps its watches so), or with ``drop_new`` lets new ones time out connecting
    (a partition that drops packets). :meth:`restore` ends either.
    """

    def __init__(self, target_port: int, listener: socket.socket | None = None) -> None:
        self.target = ("127.0.0.1", target_port)
        self._owns_listener = listener is None
        # SO_REUSEPORT lets silence() hold the port with a socket that never listens before the
        # listener closes, and restore() listen again before that one lets go: no other socket
        # can take the port meanwhile
        self._listener = listener if listener is not None else socket.create_server(("127.0.0.1", 0), reuse_port=True)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._silence_changed = threading.Condition(self._lock)  # notified when silence ends or a connection closes
        self._sockets: set[socket.socket] = set()
        self._open = True
        self._silent = False
        self._held: list[socket.socket] = []  # hold the port while silent
        self._closed = False
        self._start_accepting()

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._open = False
            doomed, self._sockets = self._sockets, set()
            self._silence_changed.notify_all()
        for sock in doomed:
            _close(sock)

    def silence(self, *, drop_new: bool = False) -> None:
        """Forward nothing on the open connections, either way, not even their closing, until
        :meth:`restore`; meanwhile new connections are refused (the port is held by a socket that
        does not listen) or, with ``drop_new``, time out connecting (it is held by one whose
        accept queue is full, so the kernel drops their SYNs). Needs a listener of the proxy's own."""
        if not self._owns_listener:
            raise ValueError("silence() needs a listener the proxy made itself (it closes it and listens again)")
        with self._lock:
            if self._silent or self._closed:
                return
            self._silent = True
            self._held = [_hold(self.port, listening=drop_new)]
            listener = self._listener
        _close(listener)  # the accepting thread ends
        if drop_new:  # fill the one place in the holder's accept queue
            self._held.append(socket.create_connection(("127.0.0.1", self.port), timeout=5))

    def restore(self) -> None:
        """Accept and forward again (the connections held silent deliver what they held back)."""
        with self._lock:
            self._open = True
            if not self._silent or self._closed:
                return
            self._silent = False
            self._silence_changed.notify_all()
            held, self._held = self._held, []
            self._listener = socket.create_server(("127.0.0.1", self.port), reuse_port=True)
        for sock in held:
            _close(sock)
        self._start_accepting()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._silent = False
            held, self._held = self._held, []
            self._silence_changed.notify_all()
        for sock in held:
            _close(sock)
        self.cut()
        _close(self._listener)

    def _start_accepting(self) -> None:
        threading.Thread(
            target=self._accept, args=(self._listener,), name=f"tcp-proxy-{self.port}", daemon=True
        ).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
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
            while True:
                data = source.recv(65536)
                if not self._wait_while_silent(source):
                    return
                if not data:
                    return
                self._before_forwarding(source)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets -= {source, sink}
                self._silence_changed.notify_all()
            _close(source)
            _close(sink)

    def _wait_while_silent(self, source: socket.socket) -> bool:
        """Hold what ``source`` sent (data or its end) while the proxy is silent; False when its
        connection was dropped meanwhile."""
        with self._lock:
            self._silence_changed.wait_for(lambda: not self._silent or source not in self._sockets)
            return source in self._sockets

    def _before_forwarding(self, source: socket.socket) -> None:
        """Called with each chunk read from ``source`` before it is forwarded (a hook: nothing here)."""


def _hold(port: int, *, listening: bool) -> socket.socket:
    """A socket bound to 127.0.0.1:``port`` (beside the listener, through SO_REUSEPORT) that never
    accepts: once the listener is closed, connections to the port are refused, or (``listening``,
    with an accept queue of one, once that is taken) their SYNs are dropped."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(("127.0.0.1", port))
        if listening:
            held.listen(0)
    except BaseException:
        _close(held)
        raise
    return held


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
