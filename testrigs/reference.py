"""Run reference-runtime processes (reference_peer.py) as real peers of discovery-sync clients.

Used by the interop tests and by ``python -m benchmarks.interop``/``benchmarks.kube --interop``; needs
``ai-dynamo-runtime`` (test extra). Each peer runs ``python -m testrigs.reference_peer`` with the repository
root on its ``PYTHONPATH``, whatever the caller's working directory.

Every peer binds loopback only (``DYN_TCP_RPC_HOST``/``DYN_EVENT_PLANE_HOST``). Peers of the
file backend need no network at all and run in a network namespace of their own with only a
loopback interface when the machine allows it (root with ``unshare``), so nothing they open is
reachable from outside whatever they bind.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

REPLY_TIMEOUT = 60.0
REPOSITORY = Path(__file__).resolve().parents[1]  # where ``testrigs.reference_peer`` is importable from


def loopback_namespace_prefix() -> list[str]:
    """A command prefix that runs a program in a new network namespace with only ``lo`` up."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return []
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        return []
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']


class PeerError(AssertionError):
    """The peer answered a command with an error, or did not answer (a test failure)."""


def _pipe(stream: IO[str] | None) -> IO[str]:
    """One of the pipes the peer was started with (``subprocess.PIPE``: never None)."""
    if stream is None:
        raise RuntimeError("the reference peer was started without this pipe")
    return stream


class RustPeer:
    """One reference-runtime process. ``call("serve", endpoint="ns.comp.ep")`` etc.

    ``isolate`` runs it in a new loopback-only network namespace (when possible); ``prefix`` is a
    command prefix to run it with instead, e.g. ``nsenter --net=…`` into a namespace prepared by
    the caller.
    """

    def __init__(
        self, backend: str, env: dict[str, str], *, isolate: bool = False, prefix: list[str] | None = None
    ) -> None:
        full_env = {
            **os.environ,
            "DYN_TCP_RPC_HOST": "127.0.0.1",
            "DYN_EVENT_PLANE_HOST": "127.0.0.1",
            "DYN_DISCOVERY_BACKEND": backend,
            "HF_HUB_OFFLINE": "1",
            "NO_COLOR": "1",
            "DYN_SDK_DISABLE_ANSI_LOGGING": "1",
            "DYN_LOG": "warn",
            **env,
        }
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), full_env.get("PYTHONPATH")]))
        if prefix is None:  # an explicit prefix (e.g. nsenter into a prepared namespace) wins
            prefix = loopback_namespace_prefix() if isolate else []
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "testrigs.reference_peer", backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
        )
        self._stderr: deque[str] = deque(maxlen=200)
        #: what the test's side knows when the peer does not answer (e.g. the requests a fake server saw)
        self.context: Callable[[], str] | None = None
        self._replies: queue.Queue[str] = queue.Queue()
        pid = self.process.pid
        threading.Thread(target=self._drain_stderr, name=f"reference-peer-{pid}-stderr", daemon=True).start()
        threading.Thread(target=self._read_replies, name=f"reference-peer-{pid}-stdout", daemon=True).start()

    def _read_replies(self) -> None:
        for line in _pipe(self.process.stdout):
            self._replies.put(line)
        self._replies.put("")  # the peer exited

    def _drain_stderr(self) -> None:
        for line in _pipe(self.process.stderr):
            self._stderr.append(line.rstrip())

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Send one command and wait for its reply; raise PeerError on an error reply."""
        self.send(cmd, **args)
        return self.receive(cmd)

    def send(self, cmd: str, **args: Any) -> None:
        """Send a command without waiting; collect its reply with :meth:`receive`."""
        stdin = _pipe(self.process.stdin)
        stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        stdin.flush()

    def receive(self, cmd: str = "command", timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        """The next reply (to ``cmd``, named in errors); PeerError on an error reply, or when none
        comes within ``timeout`` seconds or the peer exited (with its log)."""
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            line = ""
        if not line:
            context = f"\nmeanwhile: {self.context()}" if self.context is not None else ""
            raise PeerError(f"the reference peer did not answer {cmd!r}; its log:\n{self.log()}{context}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise PeerError(f"{cmd} failed in the reference peer: {reply['error']}\n{self.log()}")
        return reply

    def log(self) -> str:
        """The last 200 lines the peer wrote to stderr."""
        return "\n".join(self._stderr)

    def shutdown(self) -> None:
        """A clean shutdown: ``drt.shutdown()`` (the only path on which the reference removes its records)."""
        if self.process.poll() is None:
            self.call("shutdown")
            self.process.wait(30)

    def kill(self) -> None:
        """SIGKILL: the reference leaves its records behind for the sweepers."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
