"""A loopback-only network namespace whose 127.0.0.1:<port> leads to a server on this host's loopback.

Reference peers that publish events bind their ZMQ socket on 0.0.0.0 whatever
``DYN_EVENT_PLANE_HOST`` says, so they run in a namespace with only ``lo``. A Kubernetes peer
still has to reach the fake API server: a thread enters the namespace (``setns``), creates a
listening socket there and ends; the socket stays in the namespace, and a :class:`TcpProxy`
running here forwards what it accepts to the server's port on this host's loopback.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import threading

from testrigs.reference import loopback_namespace_prefix
from testrigs.tcp_proxy import TcpProxy

CLONE_NEWNET = 0x40000000


class LoopbackNamespace:
    """A network namespace with only ``lo`` up, held open by a ``sleep`` process until :meth:`close`."""

    @staticmethod
    def available() -> bool:
        return bool(loopback_namespace_prefix()) and shutil.which("nsenter") is not None

    def __init__(self, target_port: int) -> None:
        self._holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", "ip link set lo up && echo ready && exec sleep infinity"],
            stdout=subprocess.PIPE,
            text=True,
        )
        if self._holder.stdout is None or self._holder.stdout.readline() != "ready\n":
            self.close()
            raise RuntimeError("could not create a loopback-only network namespace")
        self.path = f"/proc/{self._holder.pid}/ns/net"
        listener = self._listen_inside()
        self.port = listener.getsockname()[1]
        self.proxy = TcpProxy(target_port, listener)

    @property
    def prefix(self) -> list[str]:
        """A command prefix that runs a program inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--"]

    def _listen_inside(self) -> socket.socket:
        made: list[socket.socket] = []
        failed: list[BaseException] = []

        def enter_and_listen() -> None:  # setns moves only this thread, which then ends
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the loopback namespace failed")
                finally:
                    os.close(fd)
                made.append(socket.create_server(("127.0.0.1", 0)))
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=enter_and_listen, name="loopback-namespace-listener")
        thread.start()
        thread.join()
        if failed:
            self.close()
            raise failed[0]
        return made[0]

    def close(self) -> None:
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.close()
        if self._holder.poll() is None:
            self._holder.kill()
        self._holder.wait(10)
        if self._holder.stdout is not None:
            self._holder.stdout.close()
