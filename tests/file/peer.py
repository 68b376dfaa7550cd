"""A separate process that holds records in a file store, for the cross-process tests.

    python peer.py STORE_URL COUNT [--name-prefix P] [--exit]

Registers COUNT endpoints (``ns.peer.{prefix}{i}``), prints one JSON line
``{"instance_id": ..., "paths": [...]}`` and then blocks until stdin closes or it is killed;
with ``--exit`` it shuts down cleanly right after printing.
"""

from __future__ import annotations

import argparse
import sys

import orjson

import discovery_sync as ds


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
