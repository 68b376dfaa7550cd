"""Loopback ports for the rigs and the tests: ``free_port()``."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listened on when it was chosen: bound to port 0, read,
    and closed again. Nothing reserves it: a server is started on it soon after (a rig's own), or a
    client connecting to it is refused (a "closed port").
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
