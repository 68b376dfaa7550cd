"""A reference-runtime (ai-dynamo-runtime) process driven by JSON commands, one per line.

Run by :class:`testrigs.reference.RustPeer` (``python -m testrigs.reference_peer BACKEND``); it reads
``{"cmd": ..., ...}`` lines from stdin and answers each with one JSON line (``{"ok": true, ...}`` or
``{"error": "..."}``). Everything discovery-related is the real Rust code of the wheel: this file only
translates commands into its Python API.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from typing import Any

from dynamo._core import DistributedRuntime, EngineType, FpmEventSubscriber, make_engine, run_input
from dynamo.llm import (
    EntrypointArgs,
    KvEventPublisher,
    ModelInput,
    ModelRuntimeConfig,
    ModelType,
    WorkerType,
    register_model,
    update_model_taints,
)

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy


async def handler(request: Any, context: Any = None) -> AsyncIterator[dict[str, Any]]:
    """The endpoints' request handler: one reply echoing the request."""
    yield {"echo": request}


class Peer:
    def __init__(self, backend: str) -> None:
        self.drt = DistributedRuntime(asyncio.get_running_loop(), backend, "tcp")
        self.endpoints: dict[str, Any] = {}
        self.clients: dict[str, Any] = {}
        self.serving: list[asyncio.Future[Any]] = []
        self.subscribers: dict[str, Any] = {}
        self.publishers: list[Any] = []
        self.frontend_port: int | None = None

    def endpoint(self, path: str) -> Any:
        if path not in self.endpoints:
            self.endpoints[path] = self.drt.endpoint(path)
        return self.endpoints[path]

    async def client(self, path: str) -> Any:
        if path not in self.clients:
            self.clients[path] = await self.endpoint(path).client()
        return self.clients[path]

    # -- commands ---------------------------------------------------------------------------------
    async def cmd_serve(self, endpoint: str) -> dict[str, Any]:
        ep = self.endpoint(endpoint)
        self.serving.append(asyncio.ensure_future(ep.serve_endpoint(handler)))
        return {"instance_id": ep.connection_id()}

    async def cmd_serving(self) -> dict[str, Any]:
        """The state of every ``serve_endpoint`` started (a diagnostic for a registration that is late)."""
        states = []
        for future in self.serving:
            if not future.done():
                states.append("running")
            elif future.cancelled():
                states.append("cancelled")
            else:
                error = future.exception()
                states.append(f"failed: {error!r}" if error else "returned")
        return {"serving": states}

    async def cmd_ids(self, endpoint: str) -> dict[str, Any]:
        return {"ids": sorted((await self.client(endpoint)).instance_ids())}

    async def cmd_instances(self, endpoint: str) -> dict[str, Any]:
        found = []
        for instance in (await self.client(endpoint)).instances():
            found.append(
                {
                    "instance_id": instance.instance_id,
                    "transport": [str(instance.transport.kind), instance.transport.address],
                    "device_type": instance.device_type,
                }
            )
        return {"instances": found}

    async def cmd_wait_ids(
        self, endpoint: str, present: Sequence[int] = (), absent: Sequence[int] = (), timeout: float = 5.0
    ) -> dict[str, Any]:
        """Poll the Rust client's view every 0.2 ms until the ids are present/absent."""
        client = await self.client(endpoint)
        deadline = time.monotonic() + timeout
        while True:
            ids = set(client.instance_ids())
            if set(present) <= ids and not (set(absent) & ids):
                return {"seen": True, "at_ns": time.monotonic_ns(), "ids": sorted(ids)}
            if time.monotonic() > deadline:
                return {"seen": False, "ids": sorted(ids)}
            await asyncio.sleep(0.0002)

    async def cmd_wait_count(
        self, endpoint: str, count: int, timeout: float = 60.0, interval: float = 0.01
    ) -> dict[str, Any]:
        """Create the endpoint's client now and poll how many instances it knows every ``interval``
        seconds (coarse, so that polling a large view does not compete with the runtime for the CPU)
        until it knows ``count``; ``at_ns`` is when it was seen, on CLOCK_MONOTONIC."""
        started = time.monotonic_ns()
        client = await self.client(endpoint)
        deadline = time.monotonic() + timeout
        while True:
            known = len(client.instance_ids())
            if known >= count:
                return {"seen": True, "started_ns": started, "at_ns": time.monotonic_ns(), "known": known}
            if time.monotonic() > deadline:
                return {"seen": False, "started_ns": started, "known": known}
            await asyncio.sleep(interval)

    async def cmd_ping(self) -> dict[str, Any]:
        """Answers once the runtime is up (it is created before the first command is read)."""
        return {}

    async def cmd_register_instance(self, endpoint: str) -> dict[str, Any]:
        started = time.monotonic_ns()
        await self.endpoint(endpoint).register_endpoint_instance()
        return {"started_ns": started, "took_ns": time.monotonic_ns() - started}

    async def cmd_unregister_instance(self, endpoint: str) -> dict[str, Any]:
        await self.endpoint(endpoint).unregister_endpoint_instance()
        return {}

    async def cmd_register_model(
        self,
        endpoint: str,
        path: str,
        name: str,
        taints: Sequence[str] = (),
        topology: dict[str, str] | None = None,
        lora_name: str | None = None,
        base_model_path: str | None = None,
    ) -> dict[str, Any]:
        config = ModelRuntimeConfig()
        if taints:
            config.taints = set(taints)
        if topology:
            config.topology_domains = topology
        await register_model(
            ModelInput.Tokens,
            ModelType.Chat,
            self.endpoint(endpoint),
            path,
            name,
            worker_type=WorkerType.Aggregated,
            runtime_config=config,
            lora_name=lora_name,
            base_model_path=base_model_path,
        )
        return {}

    async def cmd_update_taints(self, endpoint: str, taints: list[str]) -> dict[str, Any]:
        await update_model_taints(self.endpoint(endpoint), set(taints))
        return {}

    async def cmd_model_cards(self, endpoint: str) -> dict[str, Any]:
        """Model cards of the endpoint's component as the runtime's own MDC watch sees them."""
        if endpoint not in self.subscribers:
            subscriber = FpmEventSubscriber(self.endpoint(endpoint))
            subscriber.start_tracking()
            self.subscribers[endpoint] = subscriber
            await asyncio.sleep(0.2)  # its discovery watch starts in the background
        cards = self.subscribers[endpoint].get_model_cards()
        return {"cards": {str(k): json.loads(v) for k, v in cards.items()}}

    async def cmd_kv_publisher(self, endpoint: str) -> dict[str, Any]:
        self.publishers.append(KvEventPublisher(self.endpoint(endpoint), kv_block_size=16))
        return {}

    async def cmd_frontend(self, timeout: float = 30.0, namespace: str | None = None) -> dict[str, Any]:
        """Run the reference HTTP frontend (``run_input(drt, "http", ...)`` with a dynamic engine,
        the models it discovers, only those of ``namespace`` when given) on a free port of
        127.0.0.1; answers once ``/v1/models`` does."""
        with socket.socket() as sock:  # inside the peer: its loopback may be a namespace of its own
            sock.bind(("127.0.0.1", 0))
            self.frontend_port = sock.getsockname()[1]
        args = EntrypointArgs(
            EngineType.Dynamic, http_host="127.0.0.1", http_port=self.frontend_port, namespace=namespace
        )
        self.serving.append(asyncio.ensure_future(run_input(self.drt, "http", await make_engine(self.drt, args))))
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self.cmd_models()
                return {"port": self.frontend_port}
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def cmd_models(self) -> dict[str, Any]:
        """The model names the frontend lists on ``GET /v1/models``, sorted."""
        url = f"http://127.0.0.1:{self.frontend_port}/v1/models"

        def get() -> Any:
            with _DIRECT.open(url, timeout=5) as response:
                return json.load(response)

        listed = await asyncio.get_running_loop().run_in_executor(None, get)
        return {"models": sorted(model["id"] for model in listed["data"])}

    async def cmd_wait_models(self, models: Sequence[str], timeout: float = 5.0) -> dict[str, Any]:
        """Poll ``/v1/models`` every 5 ms until it lists exactly ``models``; ``seen`` says whether it
        did within ``timeout`` seconds, ``models`` what it listed last."""
        deadline = time.monotonic() + timeout
        while True:
            listed = (await self.cmd_models())["models"]
            if listed == sorted(models):
                return {"seen": True, "models": listed}
            if time.monotonic() > deadline:
                return {"seen": False, "models": listed}
            await asyncio.sleep(0.005)

    async def cmd_shutdown(self) -> dict[str, Any]:
        self.drt.shutdown()
        return {}


async def main() -> None:
    peer = Peer(sys.argv[1])
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        request = json.loads(line)
        name = request.pop("cmd")
        try:
            reply = {"ok": True, **(await getattr(peer, f"cmd_{name}")(**request))}
        except Exception as exc:  # reported to the driver, which fails the test
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if name == "shutdown":
            break
    for future in peer.serving:
        future.cancel()


if __name__ == "__main__":
    asyncio.run(main())
