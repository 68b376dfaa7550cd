"""Type-checked by tests/test_typing.py (mypy --strict), never run: client.metrics() is a typed
plain mapping, and the Prometheus helpers take any client."""

from __future__ import annotations

from typing import assert_type

import discovery_sync as ds
import discovery_sync.metrics


def figures(client: ds.Discovery) -> None:
    metrics = client.metrics()
    assert_type(metrics, ds.Metrics)
    assert_type(metrics["events_delivered"]["added"], int)
    assert_type(metrics["failed_writes"]["register"]["ConflictError"], int)
    assert_type(metrics["state"], str)
    heartbeat = metrics["heartbeat"]
    if heartbeat is not None:
        assert_type(heartbeat["count"], int)
        assert_type(heartbeat["sum"], float)
    assert_type(metrics["rescans"]["deep"]["max"], float)
    discovery_sync.metrics.register(client)
    discovery_sync.metrics.unregister(client)
