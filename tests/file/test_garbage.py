"""``collect_garbage()`` on the file store waits for dead owners' heartbeats to lapse only when
something could be dead: on a store holding nothing but this client's own records it returns at
once (the CLI's ``gc`` on an empty or missing store took 12 s of waiting for nothing)."""

from __future__ import annotations

import threading
from pathlib import Path

import discovery_sync as ds
from discovery_sync.testing import ManualClock
from testrigs.helpers import endpoint_spec
from tests.file.clocked import Steps
from tests.file.junk import hand_written

WAIT = 10.0  # real seconds a background call may take to return


def collect_in_background(client: ds.Discovery) -> tuple[threading.Thread, list[ds.CollectedGarbage]]:
    found: list[ds.CollectedGarbage] = []
    thread = threading.Thread(target=lambda: found.append(client.collect_garbage()), name="test-gc", daemon=True)
    thread.start()
    return thread, found


def test_a_store_of_nothing_but_own_records_is_collected_without_waiting(store: Path) -> None:
    clock = ManualClock()  # never advanced: a wait for the TTL would never end
    with ds.connect(f"file://{store}?ttl=5", clock=clock) as client:
        client.register(endpoint_spec())
        thread, found = collect_in_background(client)
        thread.join(WAIT)
        assert not thread.is_alive() and found == [[]]


def test_another_owners_record_is_waited_for_and_then_judged(store: Path, steps: Steps) -> None:
    with ds.connect(f"file://{store}?ttl=5&uniform_ttl=true", clock=steps.clock) as client:
        client.register(endpoint_spec())
        record, path = hand_written(store, "orphan", 9)
        began = steps.clock.monotonic()
        found = steps.call("test-gc", client.collect_garbage, step=0.5, limit=30)
        assert steps.clock.monotonic() - began >= 5.0  # it waited for the orphan's TTL, on the clock
        assert found == [f"v1/instances/{record.id().to_path()}"]
        assert not path.exists()
