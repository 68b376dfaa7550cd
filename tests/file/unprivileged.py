"""A file-store client in a process that file permissions apply to, driven by JSON lines.

The tests run as root in CI, and root reads a file of mode 000 and replaces other users' files
in a sticky directory. Run as root, this process first drops the capabilities that bypass those
checks (``setpriv``: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER), so it meets real
EACCES and EPERM; it keeps uid 0, so it still owns what root owns.

    python -m tests.file.unprivileged URL

Each line on stdin is one command, answered by one JSON line on stdout; logs go to stderr.
``{"op": "watch"}`` opens a watch on every endpoint, ``{"op": "next", "timeout": s}`` returns
its next event, ``{"op": "list"}``, ``{"op": "diagnose"}``, ``{"op": "gc"}``,
``{"op": "register", "endpoint": name}``, ``{"op": "wait_log", "text": t, "timeout": s}`` (the
log messages holding ``t``, once there is one), ``{"op": "shutdown"}`` (then the process exits).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

import discovery_sync as ds
from testrigs.helpers import LogCatcher

REPO = Path(__file__).resolve().parents[2]
DROPPED = "-dac_override,-dac_read_search,-fowner"


class UnprivilegedClient:
    """The process, and a call per command. Its log is in ``log_path``."""

    def __init__(self, url: str, log_path: Path) -> None:
        command = [sys.executable, "-m", "tests.file.unprivileged", url]
        if os.geteuid() == 0:
            command = ["setpriv", f"--inh-caps={DROPPED}", f"--bounding-set={DROPPED}", "--", *command]
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - open for the process's lifetime
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=REPO
        )
        self.call("ping")

    def call(self, op: str, **args: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(orjson.dumps({"op": op, **args}) + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the unprivileged client exited; its log: {self.log()}")
        answer = orjson.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["result"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self, timeout: float = 10.0) -> None:
        try:
            if self.process.poll() is None:
                self.call("shutdown")
            self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._log.close()


def _event(event: ds.DiscoveryEvent) -> dict[str, Any]:
    if isinstance(event, ds.Added):
        return {"type": "Added", "key": event.instance.id().to_path()}
    if isinstance(event, ds.Removed):
        return {"type": "Removed", "key": event.id.to_path()}
    if isinstance(event, ds.Resync):
        return {"type": "Resync", "keys": sorted(i.id().to_path() for i in event.instances)}
    return {"type": type(event).__name__}


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    messages = LogCatcher(logging.INFO)
    logging.getLogger("discovery_sync").addHandler(messages)
    client = ds.connect(sys.argv[1])
    watch: ds.Watch | None = None
    for line in sys.stdin:
        command = orjson.loads(line)
        op = command["op"]
        try:
            result: Any = None
            if op == "watch":
                watch = client.list_and_watch(ds.Query.endpoints())
            elif op == "next":
                assert watch is not None
                result = _event(watch.get(timeout=command.get("timeout", 10)))
            elif op == "list":
                result = sorted(i.id().to_path() for i in client.list(ds.Query.endpoints()))
            elif op == "diagnose":
                result = client.diagnose()
            elif op == "gc":
                garbage = client.collect_garbage()
                result = {"removed": list(garbage), "not_removed": garbage.not_removed}
            elif op == "register":
                spec = ds.EndpointSpec("ns", "backend", command["endpoint"], ds.Transport.tcp("127.0.0.1:1"))
                result = client.register(spec).id().to_path()
            elif op == "wait_log":
                result = messages.wait_for(command["text"], command.get("timeout", 10))
            elif op == "shutdown":
                client.shutdown()
            answer: dict[str, Any] = {"result": result}
        except Exception as exc:  # reported to the test, which decides
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.flush()
        if op == "shutdown":
            return
    client.shutdown()


if __name__ == "__main__":
    main()
