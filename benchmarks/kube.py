"""The Kubernetes backend's numbers through the fake API server, printed as one JSON object.

    .venv/bin/python -m benchmarks.kube [--events 300] [--sizes 250,500,1000,2000] [--reference]

Run from the repository root: the fake API server is test code (``testrigs/kube_fake``), so this
lives beside the tests rather than in the installed ``discovery-sync bench``.

* ``initial_sync``: N workers (a ready Pod and a DynamoWorkerMetadata with one endpoint and one
  model card each) exist; a new process (the reader: its RSS and first connect are the client's
  alone) connects and ``list_and_watch`` runs until its ``Resync``: the time, and the RSS grown
  per worker. Also the time of the process's first ``connect()`` (imports, kubeconfig, first
  request), and of a warm ``list()`` with consistent reads (the default: a LIST of one object per
  resource, see backends/kube/view.py) and without (what the watches hold).
  With ``--reference`` (needs ``ai-dynamo-runtime``) every worker serves one endpoint,
  ``bench.background.generate`` (the reference's clients are per endpoint), and beside our reader a
  reference-runtime process reads the same server: ``sync_ms`` from creating its
  ``DistributedRuntime`` (which creates its Kubernetes discovery client and starts its daemon's
  LIST+WATCH of EndpointSlices and DynamoWorkerMetadata) until its client of the endpoint knows
  every worker's instance (polled every 10 ms), and the RSS it grew meanwhile (after a 1 s
  settle). Both readers also read a namespace without workers in a server of their own (their
  fixed cost: the reference's runtime grows about 18 MB, ours about 50 kB);
  ``rss_kb_per_worker_net`` subtracts it. ``reference_over_ours`` holds the ratios reference/ours
  (``rss_per_worker_net_over_our_gross``: against our figure with its fixed cost, the stricter
  one for us).
* ``delivery``: a writer process registers (and unregisters) endpoints stamped with the send
  time; a watcher in this process times each ``Added``. Measured in an empty namespace and next
  to 1,000 other workers (a change must cost what it touches, not the namespace).
* ``graceful_delete``: a served worker's pod is deleted gracefully through the API (grace 30 s, as
  ``kubectl delete pod`` does); a watcher times the ``Removed`` from the DELETE request. The
  EndpointSlice controller marks the terminating pod's endpoint not ready at once, so the worker
  stops being served long before the pod is gone. Upstream's anchor on a real cluster: 0.899 s
  (dynamo #14294, which it reports as the time a frontend kept routing to a deleted worker).
* ``interop`` (``--interop``, needs ``ai-dynamo-runtime``): reference-runtime workers and our
  client as ready pods of one fake server: Rust register -> our watch, our register -> the Rust
  client, Rust register -> Rust client (see ``python -m benchmarks.interop`` for file and etcd).

The fake server runs in this process, so it shares the watcher's interpreter (and GIL): the
numbers are an upper bound for a real API server, whose own latency is not modelled.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from discovery_sync.backends.kube.identity import PodIdentity
from discovery_sync.backends.kube.layout import worker_metadata_body
from discovery_sync.tools.bench import delivery_latencies
from discovery_sync.tools.stats import median_timed, summary

import discovery_sync as ds
from benchmarks.interop import bench_store
from testrigs.kube_fake import PODS, WORKER_METADATA, FakeKubeServer
from testrigs.kube_fake.objects import build_pod

NAMESPACE = "default"
#: the endpoint every worker serves in the side-by-side with the reference (``--reference``)
SHARED_ENDPOINT = "bench.background.generate"
#: seconds the reference reader may take to know every worker
REFERENCE_SYNC_TIMEOUT = 120.0
#: seconds the reference reader idles after its sync before its RSS is read (its daemon may still
#: be building the snapshot it has just published)
REFERENCE_SETTLE = 1.0


def _url(kubeconfig: Path, pod: dict[str, Any], **options: Any) -> str:
    settings = {
        "pod_name": pod["metadata"]["name"],
        "pod_uid": pod["metadata"]["uid"],
        "namespace": NAMESPACE,
        "kubeconfig": str(kubeconfig),
        "podinfo_dir": str(kubeconfig.parent / "no-podinfo"),
        **options,
    }
    return "kube://?" + urlencode(settings)


def _card(i: int) -> dict[str, Any]:
    """A model card about as large as a served model's (its display name, tokenizer, runtime config)."""
    return {
        "display_name": f"org/model-{i % 8}",
        "slug": f"org--model-{i % 8}",
        "model_type": "chat",
        "model_input": "tokens",
        "context_length": 131072,
        "kv_cache_block_size": 16,
        "migration_limit": 0,
        "tokenizer": {"kind": "hf_tokenizer_json", "path": f"/models/org/model-{i % 8}/tokenizer.json"},
        "prompt_formatter": {"kind": "hf_tokenizer_config_json", "path": f"/models/org/model-{i % 8}/config.json"},
        "gen_config": {"path": f"/models/org/model-{i % 8}/generation_config.json"},
        "runtime_config": {"total_kv_blocks": 48000, "max_num_seqs": 256, "max_num_batched_tokens": 8192},
    }


def _populate(server: FakeKubeServer, workers: int, shared: bool = False) -> None:
    """``workers`` ready pods in one EndpointSlice, each with a CR holding one endpoint and one model card:
    endpoint ``e<i>`` of ``bench.background``, or with ``shared`` all of them :data:`SHARED_ENDPOINT`."""
    targets = []
    for i in range(workers):
        name = f"bg-{i}"
        pod = server.upsert(PODS, build_pod(name, NAMESPACE, str(uuid.uuid4()), ("main",), True, {}))
        identity = PodIdentity(name, pod["metadata"]["uid"], NAMESPACE)
        served = SHARED_ENDPOINT.split(".")[2] if shared else f"e{i}"
        address = ds.Transport.tcp(f"10.0.{i // 250}.{i % 250}:9000")
        endpoint = ds.Endpoint("bench", "background", served, identity.instance_id, address)
        model = ds.Model("bench", "background", served, identity.instance_id, _card(i))
        server.upsert(
            WORKER_METADATA,
            {
                **worker_metadata_body(identity, [endpoint, model]),
                "metadata": {"name": name, "namespace": NAMESPACE, "ownerReferences": [identity.owner_reference()]},
            },
        )
        targets.append((name, pod["metadata"]["uid"], True))
    server.upsert_endpoint_slice("background", targets)


#: the reader's process: ``python -c READER URL EMPTY_URL WORKERS``; it times its first connect
#: (imports, kubeconfig, first request) before anything else of the library is imported
READER = (
    "import sys, time; started = time.perf_counter(); import discovery_sync as ds; "
    "first = ds.connect(sys.argv[2]); connected = time.perf_counter(); "
    "from benchmarks.kube import reader_figures; "
    "reader_figures(first, (connected - started) * 1000, sys.argv[1], int(sys.argv[3]))"
)


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def reader_figures(first: ds.Discovery, first_connect_ms: float, url: str, workers: int) -> None:
    """The reader's side of :func:`bench_initial_sync`, printed as JSON on standard output."""
    with first:
        first.list(ds.Query.endpoints())  # an empty namespace: no worker's cost before the baseline
    gc.collect()
    before = _rss_kb()
    start = time.perf_counter()
    with ds.connect(url) as reader:
        added = 0
        with reader.list_and_watch(ds.Query.endpoints()) as watch:
            while not isinstance(event := watch.get(timeout=120), ds.Resync):
                added += isinstance(event, ds.Added)
        elapsed = (time.perf_counter() - start) * 1000
        assert added == workers, f"{added} of {workers} workers were served"
        gc.collect()
        grown = _rss_kb() - before
        consistent = median_timed(lambda: reader.list(ds.Query.endpoints()))
    with ds.connect(url + "&consistent_reads=false") as cached_reader:
        assert len(cached_reader.list(ds.Query.endpoints())) == workers
        cached = median_timed(lambda: cached_reader.list(ds.Query.endpoints()))
    figures = {
        "workers": workers,
        "first_connect_ms": round(first_connect_ms, 1),
        "sync_ms": round(elapsed, 1),
        "us_per_worker": round(elapsed * 1000 / workers, 1) if workers else None,
        "rss_grown_kb": grown,
        "rss_kb_per_worker": round(grown / workers, 1) if workers else None,
        "list_consistent_ms": round(consistent, 2),
        "list_cached_ms": round(cached, 3),
    }
    sys.stdout.write(orjson.dumps(figures).decode() + "\n")


def _our_reader(server: FakeKubeServer, kubeconfig: Path, workers: int) -> dict[str, Any]:
    """Our reader's figures (:func:`reader_figures`) in a new process, over the workers of ``default``."""
    server.create_namespace("empty")
    empty = _url(kubeconfig, server.create_pod(f"reader-{uuid.uuid4().hex[:8]}", namespace="empty"), namespace="empty")
    url = _url(kubeconfig, server.create_pod(f"reader-{uuid.uuid4().hex[:8]}"))
    done = subprocess.run(
        [sys.executable, "-c", READER, url, empty, str(workers)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the reader failed: {done.stderr[-3000:]}")
    figures: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])
    return figures


def bench_initial_sync(base: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """Each size read by a new process (its RSS and its first connect are the client's alone)."""
    results = []
    for size in sizes:
        with FakeKubeServer(bookmark_interval=1.0, history_limit=10 * size) as server:
            _populate(server, size)
            results.append(_our_reader(server, server.write_kubeconfig(base / f"kubeconfig-{size}"), size))
    return results


#: the reference's reader: ``python -c REFERENCE_READER ENDPOINT WORKERS``, its pod in its environment
REFERENCE_READER = (
    "import sys; from benchmarks.kube import reference_reader_figures; "
    "reference_reader_figures(sys.argv[1], int(sys.argv[2]))"
)


def reference_reader_figures(endpoint: str, workers: int) -> None:
    """The reference reader's side of :func:`bench_initial_sync_beside_reference`, printed as JSON."""
    asyncio.run(_reference_reader(endpoint, workers))


async def _reference_reader(endpoint: str, workers: int) -> None:
    from dynamo._core import DistributedRuntime  # the runtime's code is loaded before the baseline

    gc.collect()
    before = _rss_kb()
    start = time.perf_counter()
    # the reference's Kubernetes discovery client is made here, and its daemon starts listing and watching
    runtime = DistributedRuntime(asyncio.get_running_loop(), "kubernetes", "tcp")
    created = time.perf_counter()
    client = await runtime.endpoint(endpoint).client()
    subscribed = time.perf_counter()
    while (known := len(client.instance_ids())) < workers:
        if time.perf_counter() - start > REFERENCE_SYNC_TIMEOUT:
            runtime.shutdown()
            raise RuntimeError(
                f"the reference client knew {known} instances of {workers} after {REFERENCE_SYNC_TIMEOUT} s"
            )
        await asyncio.sleep(0.01)
    synced = time.perf_counter()
    at_sync = _rss_kb() - before
    await asyncio.sleep(REFERENCE_SETTLE)
    settled = _rss_kb() - before
    known = len(client.instance_ids())
    runtime.shutdown()
    figures = {
        "workers": workers,
        "known": known,
        "runtime_ms": round((created - start) * 1000, 1),
        "client_ms": round((subscribed - created) * 1000, 1),
        "sync_ms": round((synced - start) * 1000, 1),
        "rss_grown_at_sync_kb": at_sync,
        "rss_grown_kb": settled,
        "rss_kb_per_worker": round(settled / workers, 1) if workers else None,
    }
    sys.stdout.write(orjson.dumps(figures).decode() + "\n")


def _reference_reader_run(server: FakeKubeServer, kubeconfig: Path, workers: int) -> dict[str, Any]:
    """The reference reader in a new process, as a pod of ``default`` (the reference's variables)."""
    name = f"ref-reader-{uuid.uuid4().hex[:8]}"
    uid = server.create_pod(name)["metadata"]["uid"]
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "POD_NAME": name,
        "POD_UID": uid,
        "POD_NAMESPACE": NAMESPACE,
        "DYN_DISCOVERY_BACKEND": "kubernetes",
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_EVENT_PLANE_HOST": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "NO_COLOR": "1",
        "DYN_SDK_DISABLE_ANSI_LOGGING": "1",
        "DYN_LOG": "warn",
    }
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE_READER, SHARED_ENDPOINT, str(workers)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=REFERENCE_SYNC_TIMEOUT + 60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the reference reader failed: {done.stderr[-3000:]}")
    figures: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])
    return figures


def _ratio(theirs: float | None, ours: float | None) -> float | None:
    return None if theirs is None or not ours else round(theirs / ours, 2)


def bench_initial_sync_beside_reference(base: Path, sizes: list[int]) -> dict[str, Any]:
    """Our reader and the reference's, each a new process, over the same server of N workers serving
    :data:`SHARED_ENDPOINT`; first both over a server without workers (their fixed RSS growth)."""
    with FakeKubeServer(bookmark_interval=1.0) as server:
        kubeconfig = server.write_kubeconfig(base / "kubeconfig-reference-0")
        baseline = {
            "ours": _our_reader(server, kubeconfig, 0),
            "reference": _reference_reader_run(server, kubeconfig, 0),
        }
    results = []
    for size in sizes:
        with FakeKubeServer(bookmark_interval=1.0, history_limit=10 * size) as server:
            _populate(server, size, shared=True)
            kubeconfig = server.write_kubeconfig(base / f"kubeconfig-reference-{size}")
            ours = _our_reader(server, kubeconfig, size)
            theirs = _reference_reader_run(server, kubeconfig, size)
        for figures, side in ((ours, "ours"), (theirs, "reference")):
            net = figures["rss_grown_kb"] - baseline[side]["rss_grown_kb"]
            figures["rss_kb_per_worker_net"] = round(net / size, 1)
        ratios = {
            "sync": _ratio(theirs["sync_ms"], ours["sync_ms"]),
            "rss_per_worker_net": _ratio(theirs["rss_kb_per_worker_net"], ours["rss_kb_per_worker_net"]),
            # against our figure of ``initial_sync`` (its fixed cost not subtracted): the stricter one for us
            "rss_per_worker_net_over_our_gross": _ratio(theirs["rss_kb_per_worker_net"], ours["rss_kb_per_worker"]),
        }
        results.append({"workers": size, "ours": ours, "reference": theirs, "reference_over_ours": ratios})
    return {
        "endpoint": SHARED_ENDPOINT,
        "baseline_rss_grown_kb": {side: figures["rss_grown_kb"] for side, figures in baseline.items()},
        "sizes": results,
    }


def bench_delivery(base: Path, events: int, background: int) -> dict[str, Any]:
    with FakeKubeServer(auto_endpoint_slices=True, bookmark_interval=1.0, history_limit=10 * events) as server:
        _populate(server, background)
        kubeconfig = server.write_kubeconfig(base / f"kubeconfig-delivery-{background}")
        writer_url = _url(kubeconfig, server.create_pod("writer"))
        watcher_url = _url(kubeconfig, server.create_pod("watcher"))
        latencies = delivery_latencies(writer_url, watcher_url, events, churn=True)
    return {"background_workers": background, **summary(latencies)}


def bench_graceful_delete(base: Path, rounds: int) -> dict[str, Any]:
    """Milliseconds from a graceful pod DELETE (sent with the official client) to the watcher's ``Removed``."""
    from kubernetes import client, config

    with FakeKubeServer(auto_endpoint_slices=True) as server:
        kubeconfig = server.write_kubeconfig(base / "kubeconfig-graceful-delete")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        pods = client.CoreV1Api(api)
        latencies: list[float] = []
        watcher = ds.connect(_url(kubeconfig, server.create_pod("watcher")))
        with watcher, watcher.list_and_watch(ds.Query.endpoints("bench")) as watch:
            assert isinstance(watch.get(timeout=30), ds.Resync)
            for i in range(rounds):
                name = f"leaving-{i}"
                pod = server.create_pod(name)
                identity = PodIdentity(name, pod["metadata"]["uid"], NAMESPACE)
                endpoint = ds.Endpoint("bench", "leaving", "e", identity.instance_id, ds.Transport.tcp("10.1.0.1:9000"))
                body = worker_metadata_body(identity, [endpoint])
                server.upsert(WORKER_METADATA, {**body, "metadata": {**body["metadata"], "namespace": NAMESPACE}})
                assert watch.get(timeout=30) == ds.Added(endpoint)
                start = time.perf_counter()
                pods.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=30)
                assert watch.get(timeout=30) == ds.Removed(endpoint.id())
                latencies.append((time.perf_counter() - start) * 1000)
        api.close()
    return {"rounds": rounds, "upstream_anchor_ms": 899, **summary(latencies)}


def bench_interop(base: Path, events: int) -> dict[str, Any]:
    """Reference peers and our client as ready pods of one fake API server (plain HTTP, loopback)."""
    with FakeKubeServer(auto_endpoint_slices=True) as server:
        kubeconfig = server.write_kubeconfig(base / "kubeconfig-interop")

        def pod_env(name: str) -> dict[str, str]:
            uid = server.create_pod(name)["metadata"]["uid"]
            return {"KUBECONFIG": str(kubeconfig), "POD_NAME": name, "POD_UID": uid, "POD_NAMESPACE": NAMESPACE}

        ours = _url(kubeconfig, server.create_pod("bench-ours"))
        writer_env, observer_env = pod_env("bench-rust-writer"), pod_env("bench-rust-observer")
        return bench_store("kubernetes", writer_env, observer_env, lambda: ds.connect(ours), events)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--sizes", default="250,500,1000,2000")
    parser.add_argument("--rounds", type=int, default=30, help="graceful pod deletes timed")
    parser.add_argument("--only", choices=["graceful_delete", "initial_sync"], help="run this figure alone")
    parser.add_argument("--interop", action="store_true", help="reference-runtime peers instead")
    parser.add_argument(
        "--reference", action="store_true", help="initial sync beside a reference-runtime reader's, on one endpoint"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    result: dict[str, Any] = {"backend": "kube (fake API server, same process)"}
    with tempfile.TemporaryDirectory(prefix="discovery-sync-bench-kube-") as scratch:
        base = Path(scratch)
        if args.interop:
            result["interop"] = bench_interop(base, args.events)
        else:
            if args.only in (None, "initial_sync"):
                if args.reference:
                    result["initial_sync_beside_reference"] = bench_initial_sync_beside_reference(base, sizes)
                else:
                    result["initial_sync"] = bench_initial_sync(base, sizes)
            if args.only is None:
                result["delivery"] = [bench_delivery(base, args.events, background) for background in (0, 1000)]
            if args.only in (None, "graceful_delete"):
                result["graceful_delete"] = bench_graceful_delete(base, args.rounds)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
