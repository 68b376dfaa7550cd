"""A separate process that holds records in a file store, for the cross-process tests (``Peer``
starts one and reads what it printed).

    python testrigs/file_peer.py STORE_URL COUNT [--name-prefix P] [--exit]

Registers COUNT endpoints (``ns.peer.{prefix}{i}``), prints one JSON line
``{"instance_id": ..., "paths": [...]}`` and then blocks until stdin closes or it is killed;
with ``--exit`` it shuts down cleanly right after printing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import orjson

import discovery_sync as ds

REPO = Path(__file__).resolve().parents[1]


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """One of the pipes the peer was started with (``subprocess.PIPE``: never None)."""
    if stream is None:
        raise RuntimeError("the peer was started without this pipe")
    return stream


class Peer:
    """A peer process (see this module); ``info`` is what it printed once its records were stored."""

    def __init__(self, url: str, count: int, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, url, str(count), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        line = _pipe(self.process.stdout).readline()
        if not line:
            self.process.wait(10)
            raise RuntimeError(f"peer exited with {self.process.returncode} before registering")
        self.info: dict[str, Any] = orjson.loads(line)

    def kill(self) -> None:
        """SIGKILL the peer and reap it: its records stay behind."""
        self.process.kill()  # SIGKILL: no cleanup of any kind
        self.process.wait(10)

    def stop(self) -> int:
        """Close its stdin (a clean shutdown) and return its exit status."""
        _pipe(self.process.stdin).close()
        return self.process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("count", type=int)
    parser.add_argument("--name-prefix", default="ep")
    parser.add_argument("--exit", action="store_true")
    args = parser.parse_args()
    client = ds.connect(args.url)
    registered = [
        client.register(
            ds.EndpointSpec("ns", "peer", f"{args.name_prefix}{i}", ds.Transport.tcp(f"127.0.0.1:{9000 + i}"))
        )
        for i in range(args.count)
    ]
    line = {"instance_id": client.instance_id, "paths": [r.id().to_path() for r in registered]}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()
    if not args.exit:
        sys.stdin.read()  # until the parent closes stdin (or kills us)
    client.shutdown()


if __name__ == "__main__":
    main()
