"""The Kubernetes backend's numbers through the fake API server, printed as one JSON object.

    .venv/bin/python -m benchmarks.kube [--events 300] [--sizes 250,500,1000,2000]

Run from the repository root: the fake API server is test code (``testrigs/kube_fake``), so this
lives beside the tests rather than in the installed ``discovery-sync bench``.

* ``initial_sync``: N workers (a ready Pod and a DynamoWorkerMetadata with one endpoint and one
  model card each) exist; a new process (the reader: its RSS and first connect are the client's
  alone) connects and ``list_and_watch`` runs until its ``Resync``: the time, and the RSS grown
  per worker. Also the time of the process's first ``connect()`` (imports, kubeconfig, first
  request), and of a warm ``list()`` with consistent reads (the default: a LIST of one object per
  resource, see backends/kube/view.py) and without (what the watches hold).
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
import gc
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


def _populate(server: FakeKubeServer, workers: int) -> None:
    """``workers`` ready pods in one EndpointSlice, each with a CR holding one endpoint and one model card."""
    targets = []
    for i in range(workers):
        name = f"bg-{i}"
        pod = server.upsert(PODS, build_pod(name, NAMESPACE, str(uuid.uuid4()), ("main",), True, {}))
        identity = PodIdentity(name, pod["metadata"]["uid"], NAMESPACE)
        endpoint = ds.Endpoint(
            "bench", "background", f"e{i}", identity.instance_id, ds.Transport.tcp(f"10.0.{i // 250}.{i % 250}:9000")
        )
        model = ds.Model("bench", "background", f"e{i}", identity.instance_id, _card(i))
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
        "us_per_worker": round(elapsed * 1000 / workers, 1),
        "rss_kb_per_worker": round(grown / workers, 1),
        "list_consistent_ms": round(consistent, 2),
        "list_cached_ms": round(cached, 3),
    }
    sys.stdout.write(orjson.dumps(figures).decode() + "\n")


def bench_initial_sync(base: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """Each size read by a new process (its RSS and its first connect are the client's alone)."""
    results = []
    for size in sizes:
        with FakeKubeServer(bookmark_interval=1.0, history_limit=10 * size) as server:
            _populate(server, size)
            kubeconfig = server.write_kubeconfig(base / f"kubeconfig-{size}")
            server.create_namespace("empty")
            empty = _url(kubeconfig, server.create_pod("reader", namespace="empty"), namespace="empty")
            url = _url(kubeconfig, server.create_pod("reader"))
            done = subprocess.run(
                [sys.executable, "-c", READER, url, empty, str(size)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(f"the reader failed: {done.stderr[-3000:]}")
            results.append(orjson.loads(done.stdout.splitlines()[-1]))
    return results


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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="discovery-sync-bench-kube-") as scratch:
        base = Path(scratch)
        if args.interop:
            result = {"backend": "kube (fake API server, same process)", "interop": bench_interop(base, args.events)}
            sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
            return
        if args.only is not None:
            sizes = [int(s) for s in args.sizes.split(",")]
            figure = bench_graceful_delete(base, args.rounds) if args.only == "graceful_delete" else None
            result = {
                "backend": "kube (fake API server, same process)",
                args.only: figure if figure is not None else bench_initial_sync(base, sizes),
            }
            sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
            return
        result = {
            "backend": "kube (fake API server, same process)",
            "initial_sync": bench_initial_sync(base, [int(s) for s in args.sizes.split(",")]),
            "delivery": [bench_delivery(base, args.events, background) for background in (0, 1000)],
            "graceful_delete": bench_graceful_delete(base, args.rounds),
        }
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
