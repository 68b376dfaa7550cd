"""A member of a failover cohort in a process of its own: the README's primary/standby worker.

    python -m testrigs.cohort_worker URL LOGICAL_ID PORT [STALE_AFTER]

It connects to URL as a member of the cohort LOGICAL_ID (``-``: as a plain client with an id
of its own, for comparisons), waits for the failover lock
``engine`` (broken after STALE_AFTER seconds when its holder freezes; default 10), registers an
endpoint served on 127.0.0.1:PORT and a model card, and reports on stdout, one JSON line each:
``{"event": "waiting"}`` before it waits for the lock, ``{"event": "registered", "at": t}`` (t:
``time.time()`` once both records are stored), ``{"event": "replaced", "by": …}`` when a
successor replaces it, ``{"event": "lost"}`` when its failover lock was broken, and
``{"event": "state", "state": …, "previous": …, "reason": …}`` for every change of its client's
connection state (``ds.StateChange``; readers that follow the other lines skip these). A line
``shutdown`` on stdin shuts the client down (``{"event": "shut down", "error": …}``) and exits.
Logs go to stderr.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import orjson

import discovery_sync as ds

_print_lock = threading.Lock()


def say(event: str, **fields: object) -> None:
    with _print_lock:
        sys.stdout.write(orjson.dumps({"event": event, **fields}).decode() + "\n")
        sys.stdout.flush()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    url, port = sys.argv[1], int(sys.argv[3])
    logical_id = None if sys.argv[2] == "-" else int(sys.argv[2], 0)
    stale_after = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    client = ds.connect(url, logical_instance_id=logical_id)
    closed = threading.Event()

    def tell(change: ds.StateChange) -> None:
        say("state", state=change.state.value, previous=change.previous.value, reason=change.reason)
        if change.state is ds.ConnectionState.CLOSED:
            closed.set()

    client.add_state_listener(tell)
    if logical_id is not None:
        client.on_replaced(lambda replacement: say("replaced", by=str(replacement)))
    lock = client.failover_lock("engine", stale_after=stale_after)
    lock.on_lost(lambda _lock: say("lost"))
    say("waiting")
    lock.acquire()
    client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp(f"127.0.0.1:{port}")))
    client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "llama", "source_path": "/m/llama"}))
    say("registered", at=time.time(), instance_id=client.instance_id)
    sys.stdin.readline()
    error = None
    try:
        client.shutdown()
    except ds.DiscoveryError as exc:
        error = str(exc)
    lock.release()
    closed.wait(10)  # the change is told on the client's listener thread: before "shut down"
    say("shut down", error=error)


if __name__ == "__main__":
    main()
