"""Processes of the two-host tests: each connects to the store through one mount and reports
what it does as JSON lines on stdout, until its stdin closes (or it is killed).

    python -m tests.netfs.agents watch URL COMPONENT
    python -m tests.netfs.agents hold URL COMPONENT COUNT [--skew SECONDS]
    python -m tests.netfs.agents churn URL COMPONENT PREFIX ROUNDS KEEP_EVERY [--lag N] [--pace SECONDS]

Every record lives in namespace ``ns`` under ``COMPONENT``. Every line carries ``"t"``:
``time.monotonic()`` when it was written (CLOCK_MONOTONIC is one clock for all processes of a
host, so the test can order what different processes did).

* ``watch``: ``list_and_watch(Query.endpoints("ns", COMPONENT))``; one line per event
  (``{"event": "Added"|"Removed"|"Resync", "path": ..., "paths": [...]}``).
* ``hold``: registers COUNT endpoints, prints ``{"instance_id", "paths"}`` and holds them. With
  ``--skew`` every heartbeat touch sets the file's mtime SECONDS away from this host's clock, as
  a host with a wrong clock would (the client's heartbeat schedule, a skewed time).
* ``churn``: registers ``{PREFIX}{i}`` for i < ROUNDS, one every ``--pace`` seconds, and keeps
  every KEEP_EVERY-th (i % KEEP_EVERY == KEEP_EVERY - 1); it unregisters each of the others once
  ``--lag`` newer ones are held, and all of them at the end; prints ``{"op": "registered",
  "path"}`` after every register, ``"unregistering"`` before every unregister starts and
  ``"unregistered"`` after it, then ``{"op": "done", "kept": [...]}``.

:class:`Agent` runs one in a subprocess and hands its lines to the test through a queue.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import discovery_sync as ds

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "ns"


# -- the test's side ----------------------------------------------------------------------------
class AgentError(AssertionError):
    pass


class Agent:
    """One agent process; ``next(timeout)`` returns its next line (a dict)."""

    def __init__(self, name: str, *args: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.netfs.agents", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=400)
        self._readers = [
            threading.Thread(target=self._read_stdout, name=f"agent-{name}-stdout", daemon=True),
            threading.Thread(target=self._read_stderr, name=f"agent-{name}-stderr", daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(orjson.loads(line))
        self._lines.put(None)  # end of output: the process exited

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip())

    def log(self) -> str:
        return "\n".join(self.stderr)

    def next(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise AgentError(f"agent {self.name} said nothing for {timeout:.1f} s; its log:\n{self.log()}") from None
        if line is None:
            self._lines.put(None)  # stay at the end
            self.process.wait(10)
            raise AgentError(f"agent {self.name} exited ({self.process.returncode}); its log:\n{self.log()}")
        return line

    def poll(self, timeout: float) -> dict[str, Any] | None:
        """The next line, or None when none comes within ``timeout`` (the process must be alive)."""
        try:
            return self.next(timeout)
        except AgentError:
            if self.process.poll() is not None:
                raise
            return None

    def kill(self) -> float:
        """SIGKILL (no cleanup of any kind); the monotonic time it was sent."""
        sent = time.monotonic()
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        return sent

    def stop(self, timeout: float = 30) -> int:
        """Close stdin (the agent shuts its client down cleanly) and wait for the exit code."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(5)
        return code

    def ensure_dead(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class WatchLog:
    """The state a ``watch`` agent reports, applied the way a consumer applies events."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.state: set[str] = set()
        self.events: list[dict[str, Any]] = []
        self.resyncs = 0

    def apply(self, line: dict[str, Any]) -> None:
        self.events.append(line)
        if line["event"] == "Added":
            self.state.add(line["path"])
        elif line["event"] == "Removed":
            self.state.discard(line["path"])
        elif line["event"] == "Resync":
            self.state = set(line["paths"])
            self.resyncs += 1

    def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Apply events until ``condition()`` holds (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while not condition():
            line = self.agent.poll(deadline - time.monotonic())
            if line is None:
                return condition()
            self.apply(line)
        return True

    def established(self, timeout: float) -> set[str]:
        """Wait for the watch's first Resync; the state it holds."""
        if not self.until(lambda: self.resyncs > 0, timeout):
            raise AgentError(f"watch {self.agent.name} was not established within {timeout} s:\n{self.agent.log()}")
        return set(self.state)

    def quiet(self, period: float) -> list[dict[str, Any]]:
        """Every event that arrives within ``period`` (applied)."""
        start = len(self.events)
        self.until(lambda: False, period)
        return self.events[start:]

    def removed(self) -> list[tuple[str, float]]:
        return [(e["path"], e["t"]) for e in self.events if e["event"] == "Removed"]


# -- the agents' side ----------------------------------------------------------------------------
_output_lock = threading.Lock()


def say(**fields: Any) -> None:
    fields["t"] = time.monotonic()
    with _output_lock:
        sys.stdout.write(orjson.dumps(fields).decode() + "\n")
        sys.stdout.flush()


def _wait_for_stdin_to_close() -> None:
    sys.stdin.buffer.read()


def _endpoint(component: str, name: str, port: int = 9000) -> ds.EndpointSpec:
    return ds.EndpointSpec(NAMESPACE, component, name, ds.Transport.tcp(f"127.0.0.1:{port}"))


def watch(url: str, component: str) -> None:
    client = ds.connect(url)
    try:
        feed = client.list_and_watch(ds.Query.endpoints(NAMESPACE, component))
        threading.Thread(target=lambda: (_wait_for_stdin_to_close(), feed.close()), daemon=True).start()
        try:
            for event in feed:
                if isinstance(event, ds.Resync):
                    say(event="Resync", paths=sorted(i.id().to_path() for i in event.instances))
                elif isinstance(event, ds.Added):
                    say(event="Added", path=event.instance.id().to_path())
                elif isinstance(event, ds.Removed):
                    say(event="Removed", path=event.id.to_path())
        except ds.WatchClosed:
            pass
    finally:
        client.shutdown()


def skew_heartbeats(seconds: float) -> None:
    """Make this process's heartbeat touches set mtimes ``seconds`` off this host's clock."""
    from discovery_sync.backends.file import liveness

    if not callable(getattr(liveness, "touch_record", None)):
        raise SystemExit("the file backend no longer heartbeats through liveness.touch_record: update this agent")

    def skewed_touch(dir_fd: int, name: str) -> bool:
        stamp = time.time() + seconds
        try:
            os.utime(name, (stamp, stamp), dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    liveness.touch_record = skewed_touch


def hold(url: str, component: str, count: int, skew: float | None) -> None:
    if skew is not None:
        skew_heartbeats(skew)
    client = ds.connect(url)
    try:
        registered = [client.register(_endpoint(component, f"e{i}", 9000 + i)) for i in range(count)]
        say(instance_id=client.instance_id, paths=[r.id().to_path() for r in registered])
        _wait_for_stdin_to_close()
    finally:
        client.shutdown()


def churn(url: str, component: str, prefix: str, rounds: int, keep_every: int, lag: int, pace: float) -> None:
    client = ds.connect(url)
    try:
        kept: list[str] = []
        held: collections.deque[ds.DiscoveryInstance] = collections.deque()

        def unregister(record: ds.DiscoveryInstance) -> None:
            say(op="unregistering", path=record.id().to_path())
            client.unregister(record)
            say(op="unregistered", path=record.id().to_path())

        for i in range(rounds):
            endpoint = client.register(_endpoint(component, f"{prefix}{i}", 9000 + i))
            say(op="registered", path=endpoint.id().to_path())
            if i % keep_every == keep_every - 1:
                kept.append(endpoint.id().to_path())
            else:
                held.append(endpoint)
            if len(held) > lag:
                unregister(held.popleft())
            time.sleep(pace)  # pacing the writer, so that watchers see records come and go
        while held:
            unregister(held.popleft())
        say(op="done", kept=kept, instance_id=client.instance_id)
        _wait_for_stdin_to_close()
    finally:
        client.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    watching = commands.add_parser("watch")
    watching.add_argument("url")
    watching.add_argument("component")
    holding = commands.add_parser("hold")
    holding.add_argument("url")
    holding.add_argument("component")
    holding.add_argument("count", type=int)
    holding.add_argument("--skew", type=float)
    churning = commands.add_parser("churn")
    churning.add_argument("url")
    churning.add_argument("component")
    churning.add_argument("prefix")
    churning.add_argument("rounds", type=int)
    churning.add_argument("keep_every", type=int)
    churning.add_argument("--lag", type=int, default=0)
    churning.add_argument("--pace", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "watch":
        watch(args.url, args.component)
    elif args.command == "hold":
        hold(args.url, args.component, args.count, args.skew)
    else:
        churn(args.url, args.component, args.prefix, args.rounds, args.keep_every, args.lag, args.pace)


if __name__ == "__main__":
    main()
