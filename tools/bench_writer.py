"""Writer process of the delivery benchmark: registers endpoints stamped with the send time.

    python -m discovery_sync.tools.bench_writer URL COUNT INTERVAL_SECONDS [churn]

Each endpoint's transport carries ``time.monotonic_ns()`` taken right before ``register``
(CLOCK_MONOTONIC is shared by all processes of a host), so the watcher can time delivery. With
``churn`` each endpoint is unregistered right after it is registered (so a store that keeps one
document per worker does not grow).
"""

from __future__ import annotations

import sys
import time

import discovery_sync as ds


def main() -> None:
    url, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    churn = sys.argv[4:] == ["churn"]
    with ds.connect(url) as client:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()  # the watcher is established
        for i in range(count):
            stamp = time.monotonic_ns()
            spec = ds.EndpointSpec("bench", "writer", f"e{i}", ds.Transport.tcp(f"127.0.0.1:1/{stamp}"))
            registered = client.register(spec)
            if churn:
                client.unregister(registered)
            time.sleep(interval)
        sys.stdin.readline()  # keep the records until the watcher is done


if __name__ == "__main__":
    main()
