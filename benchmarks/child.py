"""A benchmark's process of its own, driven by JSON lines: ``python -m benchmarks.<module> --child
ARGUMENTS`` reads one command per line on its stdin and answers each with one line on its stdout.
Run with this checkout on ``PYTHONPATH`` (its rigs and benchmarks), from the repository's root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent


class Child:
    """One child process of ``benchmarks.<module>``, in the role ``role`` (for messages)."""

    def __init__(self, module: str, role: str, arguments: list[str]) -> None:
        self.role = role
        self.process = subprocess.Popen(
            [sys.executable, "-m", f"benchmarks.{module}", "--child", *arguments],
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, **command: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The next answer; RuntimeError when the process ended instead."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.role} exited ({self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, **command: Any) -> dict[str, Any]:
        self.send(**command)
        return self.receive()

    def stop(self, *, check: bool = False) -> None:
        """Ask it to stop (``{"cmd": "stop"}``), killed after 30 s; with ``check``, RuntimeError
        when it failed."""
        if self.process.poll() is None:
            try:
                self.send(cmd="stop")
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        if check and self.process.returncode:
            raise RuntimeError(f"the {self.role} failed ({self.process.returncode})")
