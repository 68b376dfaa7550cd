"""Run ``discovery-sync`` as a person does: in a pseudo-terminal of a given size, reading what it
shows with a deadline (select), typing Ctrl-C into it. Standard library only (``pty`` and ``termios``)."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time

ENV_DROP = ("DISCOVERY_SYNC_DEBUG", "COLUMNS", "LINES")


def environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ENV_DROP}
    return {**env, "TERM": "xterm", **extra}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "discovery_sync.tools", *args]


def piped(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI with its output piped (no terminal), run to its end."""
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout, env=environment())


class Terminal:
    """The CLI with stdin, stdout and stderr on a pseudo-terminal that is its controlling terminal."""

    def __init__(
        self,
        *args: str,
        columns: int = 120,
        rows: int = 40,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

        def become_terminal_owner() -> None:  # in the child: a new session whose terminal is the pty
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python turns it into KeyboardInterrupt only then

        self.process = subprocess.Popen(
            argv or command(*args),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environment(**(env or {})),
            preexec_fn=become_terminal_owner,
        )
        os.close(slave)
        self.master = master
        self.raw = b""
        self.closed = False

    @property
    def text(self) -> str:
        """All shown so far, with the terminal's CR LF as LF."""
        return self.raw.decode(errors="replace").replace("\r\n", "\n")

    def _read(self, deadline: float) -> bool:
        """Read what is there (waiting until ``deadline``); False at the end of the output."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        ready, _, _ = select.select([self.master], [], [], remaining)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every end of the pty's other side is closed
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.raw += chunk
        return True

    def expect(self, text: str, timeout: float = 30.0) -> str:
        """Read until ``text`` is shown; return everything shown so far."""
        deadline = time.monotonic() + timeout
        while text not in self.text:
            if self.closed or time.monotonic() >= deadline or not self._read(deadline):
                if text in self.text:
                    break
                raise AssertionError(f"{text!r} not shown within {timeout} s; shown: {self.text!r}")
        return self.text

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        """Read to the end of the output; the exit status and everything shown."""
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        try:
            status = self.process.wait(max(deadline - time.monotonic(), 0.1))
        finally:
            self.close()
        return status, self.text

    def ctrl_c(self) -> None:
        """Type Ctrl-C: the terminal sends SIGINT to the command."""
        os.write(self.master, b"\x03")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


def run_in_terminal(
    *args: str, columns: int = 120, timeout: float = 60.0, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run the CLI to its end in a terminal (``env``: variables to add); its exit status and what it showed."""
    terminal = Terminal(*args, columns=columns, env=env)
    return terminal.finish(timeout)
