"""``python -m benchmarks.scale`` runs end to end on a small store and prints what it promises.

Only the report's shape and the consistency of its numbers are checked: no timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from testrigs.source_tree import REPO


def test_scale_benchmark_prints_every_number_with_the_reference_beside_ours():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    options = ["--records", "200", "--runs", "2", "--window", "2", "--warmup", "2", "--watches", "1,20"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", *options],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    (size,) = report["sizes"]
    assert size["records"] == 200
    for read in ("cold_list", "warm_list", "initial_sync", "floor"):
        numbers = size[read]
        assert 0 < numbers["wall_min_ms"] <= numbers["wall_ms"] <= numbers["wall_max_ms"], read
    assert size["cold_over_floor"] == round(size["cold_list"]["wall_ms"] / size["floor"]["wall_ms"], 2)
    assert size["rss_bytes_per_record"] is not None
    for role in ("holder", "watcher", "reference"):
        idle = size["idle"][role]
        assert idle["cpu_s"] >= 0 and idle["window_s"] >= 2, role
        assert idle["percent_of_core"] == pytest.approx(100 * idle["cpu_s"] / idle["window_s"], abs=0.02), role
    assert size["idle"]["reference"]["cpu_s"] > 0  # a live runtime spends something in 2 s
    one = size["one_endpoint_sync"]
    assert one["ours_ms"] > 0 and one["reference_ms"] > 0
    assert one["reference_over_ours"] == pytest.approx(one["reference_ms"] / one["ours_ms"], rel=0.02)
    runs = report["etcd"]["runs"]
    assert [run["watches"] for run in runs] == [1, 20]
    for run in runs:
        assert run["watch_threads"] == 1  # one bucket watched: one shared stream
        assert run["distinct"]["count"] == min(run["watches"], 100)
        assert run["fanout"]["count"] == 5 * run["watches"]
    table = done.stderr.splitlines()
    assert table[0].startswith("records | cold ms")
    assert table[1].startswith("200 | ")
