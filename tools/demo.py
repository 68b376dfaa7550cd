"""``discovery-sync demo``: two clients on a file store — one registers, the other watches.

Runs start to finish in a second or two and exits 0 only when every expected event arrived.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import orjson

import discovery_sync as ds

TIMEOUT = 10.0


def _say(text: str, data: Any = None) -> None:
    print(text if data is None else f"{text} {orjson.dumps(data).decode()}")
    sys.stdout.flush()


def _expect(watch: ds.Watch, kind: type) -> ds.DiscoveryEvent:
    event = watch.get(timeout=TIMEOUT)
    _say(f"  watcher <- {type(event).__name__}:", event.to_dict())
    if not isinstance(event, kind):
        raise ds.DiscoveryError(f"expected {kind.__name__}, got {event!r}")
    return event


def run_demo(url: str | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="discovery-sync-demo-") as scratch:
        url = url or f"file://{scratch}/store"
        _say(f"store: {url}")
        worker, watcher = ds.connect(url), ds.connect(url)
        try:
            _say(f"worker instance id: {worker.instance_id:x}")
            endpoints = watcher.list_and_watch(ds.Query.endpoints("demo"))
            models = watcher.list_and_watch(ds.Query.models("demo"))
            _expect(endpoints, ds.Resync)
            _expect(models, ds.Resync)

            _say("worker registers endpoint demo.backend.generate and model Qwen/Qwen3-0.6B")
            transport = ds.Transport.tcp(f"127.0.0.1:9000/{worker.instance_id:x}/demo/backend/generate")
            endpoint = worker.register(ds.EndpointSpec("demo", "backend", "generate", transport, "cpu", "msgpack"))
            card = {"display_name": "Qwen/Qwen3-0.6B", "runtime_config": {"topology_domains": {"zone": "lab-1"}}}
            model = worker.register(ds.ModelSpec("demo", "backend", "generate", card))
            _expect(endpoints, ds.Added)
            _expect(models, ds.Added)

            listed = watcher.list(ds.Query.endpoints("demo")) + watcher.list(ds.Query.models("demo"))
            for instance in listed:
                _say("  list:", instance.to_dict())
            if {i.id() for i in listed} != {endpoint.id(), model.id()}:
                raise ds.DiscoveryError(f"list returned {listed!r}")

            _say("worker updates the model's taints")
            worker.update_model_taints(model.id(), ["gpu=none", "demo"])
            _expect(models, ds.ModelTaintsUpdated)

            _say("worker unregisters the endpoint, then shuts down")
            worker.unregister(endpoint)
            _expect(endpoints, ds.Removed)
            worker.shutdown()
            _expect(models, ds.Removed)
            endpoints.close()
            models.close()
        except ds.DiscoveryError as exc:
            _say(f"demo failed: {exc}")
            return 1
        finally:
            worker.shutdown()
            watcher.shutdown()
    _say("demo finished: register, list, watch, taint update and removal all seen")
    return 0
