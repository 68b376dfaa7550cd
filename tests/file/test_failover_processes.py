"""Failover of a cohort with real processes and real signals (docs/design.md §4.1): a primary and a
standby (``testrigs/cohort_worker.py``) share one logical id and the failover lock ``engine``; this
process watches, as the routers of the worker would."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from discovery_sync.backends.file.names import record_name

import discovery_sync as ds
from discovery_sync.logical_id import hash_key
from testrigs.helpers import assert_quiet, initial_state, next_event

REPO = Path(__file__).resolve().parents[2]
LOGICAL_ID = 0x7E57


class Worker:
    """A ``testrigs.cohort_worker`` process and the JSON lines it reports."""

    def __init__(self, url: str, port: int, log: Path, stale_after: float = 10.0) -> None:
        self.port = port
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "testrigs.cohort_worker", url, str(LOGICAL_ID), str(port), str(stale_after)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.states: queue.Queue[dict[str, Any]] = queue.Queue()  # its client's connection state changes
        threading.Thread(target=self._read, name=f"worker-{port}-stdout", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = orjson.loads(line)
            (self.states if event["event"] == "state" else self.events).put(event)

    def state_changes(self) -> list[tuple[str, str]]:
        """The (state, reason) changes reported so far."""
        changes = []
        while not self.states.empty():
            change = self.states.get()
            changes.append((change["state"], change["reason"]))
        return changes

    def expect(self, event: str, timeout: float = 20.0) -> dict[str, Any]:
        got = self.events.get(timeout=timeout)
        assert got["event"] == event, got
        return got

    def expect_all(self, events: set[str], timeout: float = 20.0) -> None:
        seen = {self.events.get(timeout=timeout)["event"] for _ in events}
        assert seen == events

    def shut_down(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(b"shutdown\n")
        self.process.stdin.flush()
        return self.expect("shut down")

    def close(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)
        self._log.close()


@pytest.fixture
def workers(tmp_path):
    started: list[Worker] = []

    def start(url: str, port: int, stale_after: float = 10.0) -> Worker:
        worker = Worker(url, port, tmp_path / f"worker-{port}.log", stale_after)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


def endpoint_of(port: int) -> ds.Endpoint:
    spec = ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp(f"127.0.0.1:{port}"))
    return spec.to_instance(LOGICAL_ID)


def watching(url: str) -> tuple[ds.Discovery, ds.Watch, ds.Watch]:
    observer = ds.connect(url, read_only=True)
    endpoints = observer.list_and_watch(ds.Query.endpoints("ns"))
    models = observer.list_and_watch(ds.Query.models("ns"))
    return observer, endpoints, models


def test_a_standby_takes_over_a_killed_primary_in_place(tmp_path, workers):
    url = f"file://{tmp_path / 'store'}"
    primary = workers(url, 9001)
    primary.expect("waiting")
    primary.expect("registered")
    observer, endpoints, models = watching(url)
    try:
        assert initial_state(endpoints)[0] == [ds.Added(endpoint_of(9001))]
        assert len(initial_state(models)[0]) == 1
        standby = workers(url, 9002)
        standby.expect("waiting")
        with pytest.raises(queue.Empty):  # the primary holds the failover lock
            standby.events.get(timeout=1.0)

        killed_at = time.monotonic()
        primary.process.kill()
        assert next_event(endpoints, timeout=10) == ds.Added(endpoint_of(9002))  # the address moves in place
        took = time.monotonic() - killed_at
        standby.expect("registered")
        assert_quiet(endpoints, 1.0)  # never Removed: one worker throughout
        assert_quiet(models, 0.1)  # the same card, taken over: nothing changes for routers
        assert observer.list(ds.Query.endpoints("ns")) == [endpoint_of(9002)]
        print(f"kill -9 to the new transport seen: {took * 1000:.0f} ms")
        assert took < 5.0  # the flock of a dead holder frees at once (the benchmark reports the figure)

        standby.shut_down()
        assert next_event(endpoints) == ds.Removed(endpoint_of(9002).id())
    finally:
        observer.shutdown()


def test_a_frozen_primary_resumed_writes_nothing_over_its_successor(tmp_path, workers):
    url = f"file://{tmp_path / 'store'}"
    stale_after = 2.0
    primary = workers(url, 9001, stale_after)
    primary.expect("waiting")
    primary.expect("registered")
    observer, endpoints, models = watching(url)
    try:
        initial_state(endpoints)
        initial_state(models)
        standby = workers(url, 9002, stale_after)
        standby.expect("waiting")

        os.kill(primary.process.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        assert next_event(endpoints, timeout=stale_after + 10) == ds.Added(endpoint_of(9002))
        standby.expect("registered")
        taken = store_file(tmp_path, endpoint_of(9002))
        taken_inode = taken.stat().st_ino
        time.sleep(max(0.0, frozen_at + 5.0 - time.monotonic()))  # the scenario: frozen for 5 s
        os.kill(primary.process.pid, signal.SIGCONT)

        primary.expect_all({"replaced", "lost"}, timeout=10)
        assert primary.shut_down()["error"] is None
        # replaced: LOST for good (its heartbeat still runs: nothing leads out of it), then CLOSED;
        # a freeze that caught a beat under way may show SUSPENDED first
        changes = primary.state_changes()
        assert [state for state, _ in changes if state != "suspended"] == ["lost", "closed"], changes
        assert "replaced" in changes[-2][1]
        assert standby.state_changes() == []
        assert_quiet(endpoints, 1.0)
        assert_quiet(models, 0.1)
        assert observer.list(ds.Query.endpoints("ns")) == [endpoint_of(9002)]
        assert taken.stat().st_ino == taken_inode  # nobody wrote over the successor's file
        assert taken.read_bytes() == ds.instance_to_json(endpoint_of(9002))
        assert len(observer.list(ds.Query.models("ns"))) == 1

        standby.shut_down()
        assert next_event(endpoints) == ds.Removed(endpoint_of(9002).id())
    finally:
        observer.shutdown()


def store_file(tmp_path: Path, endpoint: ds.Endpoint) -> Path:
    return tmp_path / "store" / "v1" / "instances" / record_name(endpoint.id())


def readme_program(tmp_path: Path, heading: str) -> Path:
    """The first python block of README.md's section ``heading``, as a program file."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.partition(f"\n## {heading}\n")[2].partition("\n## ")[0]
    program = tmp_path / "worker.py"
    program.write_text(section.partition("```python\n")[2].partition("```")[0], encoding="utf-8")
    return program


def test_the_readme_failover_example_fails_over(tmp_path):
    program = readme_program(tmp_path, "Failover: a primary and a standby, one worker")
    store = tmp_path / "store"
    env = {
        **os.environ,
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(store),
        "DYN_DISCOVERY_LOGICAL_INSTANCE_KEY": "ns/$(POD_NAME)/decode",
        "POD_NAME": "decode-0",
        "PYTHONPATH": str(REPO),
    }
    expected_id = hash_key("ns/decode-0/decode")

    def start(address: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, str(program), address], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    primary = start("127.0.0.1:9001")
    standby = None
    try:
        assert primary.stdout is not None and primary.stdout.readline() == b"serving\n"
        with ds.connect(f"file://{store}", read_only=True) as observer:
            watch = observer.list_and_watch(ds.Query.endpoints("ns"))
            (added,), _ = initial_state(watch)
            assert added.instance.instance_id == expected_id
            standby = start("127.0.0.1:9002")
            primary.kill()
            event = next_event(watch, timeout=20)
            assert isinstance(event, ds.Added) and event.instance.transport.value == "127.0.0.1:9002"
            assert event.instance.instance_id == expected_id
            assert standby.stdout is not None and standby.stdout.readline() == b"serving\n"
            assert_quiet(watch, 1.0)
            standby.communicate(b"\n", timeout=20)
            assert standby.returncode == 0
            assert next_event(watch) == ds.Removed(event.instance.id())
    finally:
        for process in (primary, standby):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def test_the_readme_connection_state_example_exits_when_its_records_are_lost(tmp_path):
    """README's worker, run as a process on a file store with a logical id: a successor with the
    same id takes its records over, the worker hears LOST, removes nothing and exits 1."""
    program = readme_program(tmp_path, "Connection state: a worker that knows when its registration is lost")
    store = tmp_path / "store"
    env = {
        **os.environ,
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(store),
        "DYN_DISCOVERY_LOGICAL_INSTANCE_ID": "0x2a",
        "PYTHONPATH": str(REPO),
    }
    worker = subprocess.Popen([sys.executable, str(program), "127.0.0.1:9001"], env=env, stderr=subprocess.PIPE)
    try:
        with ds.connect(f"file://{store}", read_only=True) as observer:
            watch = observer.list_and_watch(ds.Query.endpoints("ns"))
            while not isinstance(event := next_event(watch, timeout=20), ds.Added):
                pass  # the Resync of an empty store, before the worker registered
            assert event.instance.transport.value == "127.0.0.1:9001"
            with ds.connect(f"file://{store}", logical_instance_id=0x2A) as successor:
                successor.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:9002")))
                _, stderr = worker.communicate(timeout=30)
                assert worker.returncode == 1, stderr
                assert b"discovery: lost (replaced by" in stderr, stderr
                assert successor.get(event.instance.id()) == ds.Endpoint(
                    "ns", "backend", "generate", 0x2A, ds.Transport.tcp("127.0.0.1:9002")
                )  # the worker's shutdown removed nothing of its successor's
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
