"""``python -m benchmarks.scale`` runs end to end on a small store and prints what it promises.

Only the report's shape and the consistency of its numbers are checked: no timing is asserted.
"""

from __future__ import annotations

import json

import pytest

from testrigs.source_tree import REPO
from tests.benchmark_runs import run_benchmark


def test_scale_benchmark_prints_every_number_with_the_reference_beside_ours():
    options = ["--records", "200", "--runs", "2", "--window", "2", "--warmup", "2", "--watches", "1,20"]
    done = run_benchmark("scale", *options, "--etcd-records", "300", timeout=300)
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
    (etcd,) = report["etcd_scale"]["sizes"]  # --reference-max-records is not below 300: one size
    assert etcd["records"] == 300 and etcd["ours"]["watcher"]["seen"] == 300
    assert etcd["ours"]["initial_sync"]["wall_ms"] > 0 and etcd["ours"]["idle"]["watcher"]["window_s"] >= 2
    assert etcd["reference"]["known"] == 300 and etcd["reference"]["initial_sync_ms"] > 0
    assert etcd["ratios"]["initial_sync"] > 0
    table = done.stderr.splitlines()
    assert table[0].startswith("records | cold ms")
    assert table[1].startswith("200 | ")
    assert table[-2].startswith("etcd records | write s")
    assert table[-1].startswith("300 | ")


FIGURES = (
    "cold_list_wall_ms",
    "warm_list_wall_ms",
    "initial_sync_wall_ms",
    "rss_bytes_per_record",
    "idle_holder_percent",
    "idle_watcher_percent",
    "one_endpoint_sync_ours_ms",
)


def test_scale_benchmark_measures_two_sources_side_by_side_with_ratios_to_the_first():
    # the same checkout twice (an A/A run): no second worktree needed, and the shape is the same
    options = ["--records", "200", "--runs", "1", "--window", "1", "--warmup", "0", "--no-etcd", "--no-reference"]
    done = run_benchmark("scale", *options, "--source", str(REPO), "--source", ".")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    first, later = report["sources"]
    assert first["source"] == later["source"] == str(REPO)
    assert first["commit"] and first["commit"] == later["commit"]
    for source in (first, later):
        (size,) = source["sizes"]
        assert size["records"] == 200
        assert size["cold_list"]["wall_ms"] > 0
        assert size["one_endpoint_sync"]["ours_ms"] > 0
        assert set(size["idle"]) == {"holder", "watcher"}  # --no-reference
    ((size_ratios,),) = [size["ratios_to_first"] for size in report["sizes"]]
    assert report["sizes"][0]["records"] == 200
    assert size_ratios["source"] == str(REPO)
    for figure in FIGURES:  # None only where the first's figure is 0 (idle CPU or RSS growth of a tiny store)
        assert size_ratios[figure] is None or isinstance(size_ratios[figure], float), figure
    for figure in ("cold_list_wall_ms", "warm_list_wall_ms", "initial_sync_wall_ms", "one_endpoint_sync_ours_ms"):
        assert size_ratios[figure] > 0, figure
    cold = [source["sizes"][0]["cold_list"]["wall_ms"] for source in (first, later)]
    assert size_ratios["cold_list_wall_ms"] == round(cold[1] / cold[0], 3)
    table = done.stderr.splitlines()
    assert table[0].startswith("records | source | cold ms")
    assert all(line.startswith(f"200 | {first['commit']}") for line in table[1:3])  # one line per source
    assert table[3].startswith("ratios to the first source")
    assert table[4].startswith("200 | ")


def test_scale_benchmark_refuses_a_source_that_is_not_a_checkout_of_the_library(tmp_path):
    done = run_benchmark("scale", "--source", str(REPO), "--source", str(tmp_path), timeout=60)
    assert done.returncode == 2
    assert f"--source {tmp_path}: not a checkout of discovery-sync" in done.stderr
    assert done.stdout == ""
