"""Shared mode on two sshfs mounts standing for two hosts: detection, doctor, soft locks across hosts.

Mount A has caches off; mount B keeps sshfs's default caches (listings and attributes up to 20 s).
flock is not shared between them; O_EXCL creation is.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest

import discovery_sync as ds
from testrigs.sshfs import SshfsRig
from tests.file.test_softlock import start_holder

REPO = Path(__file__).resolve().parents[2]
STALE = 2.0
ROUNDS = 50


@pytest.fixture
def stores(sshfs_rig: SshfsRig) -> tuple[Path, Path]:
    """One store directory, as host A and as host B see it."""
    name = f"store-{uuid.uuid4().hex[:12]}"
    (sshfs_rig.export_dir / name).mkdir()
    return sshfs_rig.mount_a / name, sshfs_rig.mount_b / name


def test_a_network_mount_gets_polling_and_soft_locks_and_says_why(stores, caplog):
    a, _ = stores
    with caplog.at_level(logging.INFO, logger="discovery_sync.backends.file"):
        client = ds.connect(f"file://{a}")
    try:
        assert (client.observer_kind, client.lock_mode) == ("polling", "soft")
        assert any("fuse.sshfs" in r.getMessage() and "inotify never sees" in r.getMessage() for r in caplog.records)
    finally:
        client.shutdown()
    with ds.connect(f"file://{a}?mode=local") as forced:
        assert (forced.observer_kind, forced.lock_mode) == ("inotify", "hard")


def test_doctor_reports_the_mounts_caches_and_what_they_mean_for_liveness(stores):
    a, b = stores
    ds.connect(f"file://{a}?ttl=10").shutdown()  # a writer lays out the store (doctor reads only)
    reports = {}
    for host, path in (("a", a), ("b", b)):
        result = subprocess.run(
            [sys.executable, "-m", "discovery_sync.tools", "--url", f"file://{path}?ttl=10", "doctor", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr  # 0: no problems
        reports[host] = orjson.loads(result.stdout)
    fs_a, fs_b = reports["a"]["filesystem"], reports["b"]["filesystem"]
    assert fs_a["type"] == fs_b["type"] == "fuse.sshfs"
    assert {"dir_cache=no", "attr_timeout=0", "entry_timeout=0"} <= set(fs_a["cache_options"])
    # B: sshfs keeps attributes and listings 20 s, the kernel what it got 1 s more
    assert fs_a["cache_window_s"] == 0 and fs_b["cache_window_s"] == 21
    assert (fs_a["dead_after_s"], fs_b["dead_after_s"]) == (10, 31)
    assert "21 s late" in fs_b["meaning"] and "dead after 31 s" in fs_b["meaning"]
    # reference workers sweep by mtime age on their wall clock: B's window would make them sweep live records
    assert "reference_workers" not in fs_a and "caches off" in fs_b["reference_workers"]
    assert reports["a"]["buckets"]["v1/instances"]["hidden_files"] == 0
    with ds.connect(f"file://{b}?ttl=10") as client:
        assert (client.cache_window, client.dead_after) == (21.0, 31.0)


def race_worker(url: str, name: str) -> subprocess.Popen:
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.netfs.race_worker", url, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert worker.stdout.readline().strip() == "ready"
    return worker


def test_two_hosts_racing_conflicting_models_have_exactly_one_winner(stores):
    a, b = stores
    workers = {
        "a": race_worker(f"file://{a}?mode=shared&lock_stale={STALE}", "a"),
        "b": race_worker(f"file://{b}?mode=shared&lock_stale={STALE}", "b"),
    }
    try:
        with ds.connect(f"file://{a}?mode=shared") as observer:
            for round_number in range(ROUNDS):
                for worker in workers.values():  # both start at once
                    worker.stdin.write(f"{round_number}\n")
                    worker.stdin.flush()
                answers = {host: w.stdout.readline().split() for host, w in workers.items()}
                assert all(answer[1] == str(round_number) for answer in answers.values()), answers
                winners = [host for host, answer in answers.items() if answer[0] == "won"]
                assert len(winners) == 1, f"round {round_number}: {answers}"
                stored = observer.list(ds.Query.models("race", "models", f"r{round_number}"))
                assert [m.card_json["display_name"] for m in stored] == [f"model-{winners[0]}"]
    finally:
        for worker in workers.values():
            worker.kill()
            worker.wait()


@pytest.mark.parametrize(("holder_host", "writer_host"), [("b", "a"), ("a", "b")])
def test_a_live_soft_lock_holder_on_one_host_is_respected_by_the_other(stores, holder_host, writer_host):
    paths = dict(zip("ab", stores, strict=True))
    with ds.connect(f"file://{paths['a']}?mode=shared"):
        pass  # lays out the store
    holder = start_holder(paths[holder_host] / ".locks" / "v1%2Fmdc.lock", stale=STALE, cwd=REPO)
    try:
        url = f"file://{paths[writer_host]}?mode=shared&lock_stale={STALE}&lock_timeout={3 * STALE}"
        with ds.connect(url) as writer:
            with pytest.raises(ds.LockTimeout, match=f"pid {holder.pid}"):  # three stale bounds: refreshed
                writer.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
            holder.stdin.write("release\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "released"
            writer.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_soft_lock_holder_on_b_frees_as_next_write_after_the_stale_bound_never_before(stores):
    a, b = stores
    with ds.connect(f"file://{a}?mode=shared&lock_stale={STALE}") as writer:
        holder = start_holder(b / ".locks" / "v1%2Fmdc.lock", stale=STALE, cwd=REPO)
        holder.kill()
        holder.wait()
        killed = time.monotonic()
        model = writer.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
        waited = time.monotonic() - killed
        assert STALE <= waited < STALE + 5
        assert writer.list(ds.Query.models()) == [model]
        assert sorted(p.name for p in (a / ".locks").iterdir()) == []
