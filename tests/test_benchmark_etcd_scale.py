"""``python -m benchmarks.etcd_scale`` runs end to end on two small etcd stores (the smaller one first,
as the reference's comparison size) and prints what it promises, ours beside the reference runtime's.

Only the report's shape and the consistency of its numbers are checked: no timing is asserted.
"""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark

SIZES = (200, 400)


def _consistent(numbers: dict[str, float], what: str) -> None:
    assert 0 < numbers["wall_min_ms"] <= numbers["wall_ms"] <= numbers["wall_max_ms"], what
    assert numbers["cpu_ms"] > 0, what


def test_etcd_scale_benchmark_prints_our_figures_and_the_references_beside_them():
    options = ["--records", "400", "--reference-records", "200", "--runs", "2", "--window", "1", "--warmup", "0.5"]
    done = run_benchmark("etcd_scale", *options, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert [size["records"] for size in report["sizes"]] == list(SIZES)
    assert report["reference_timeout_s"] > 0
    for size in report["sizes"]:
        records, ours, theirs = size["records"], size["ours"], size["reference"]
        assert size["write"]["records_per_second"] > 0
        for read in ("cold_list", "initial_sync", "floor"):
            _consistent(ours[read], f"{records} {read}")
        assert ours["cold_over_floor"] == round(ours["cold_list"]["wall_ms"] / ours["floor"]["wall_ms"], 2)
        assert ours["watcher"]["seen"] == records
        assert ours["watcher"]["initial_sync_ms"] > 0
        assert ours["watcher"]["rss_bytes_per_record"] > 0
        for role, idle in [*ours["idle"].items(), ("reference", theirs["idle"])]:
            assert idle["cpu_s"] >= 0 and idle["window_s"] >= 1, (records, role)
            assert idle["percent_of_core"] == pytest.approx(100 * idle["cpu_s"] / idle["window_s"], abs=0.01)
        assert ours["idle"]["holder"]["cpu_s"] + ours["idle"]["watcher"]["cpu_s"] > 0
        assert theirs["error"] is None and theirs["known"] == records  # the reference read every record
        assert theirs["initial_sync_ms"] > 0 and theirs["rss_bytes_per_record"] is not None
        ratios = size["ratios"]
        assert ratios["initial_sync"] == pytest.approx(
            theirs["initial_sync_ms"] / ours["initial_sync"]["wall_ms"], rel=0.02
        )
        assert ratios["idle_watcher"] is not None and ratios["idle_watcher"] >= 0
    table = done.stderr.splitlines()
    assert table[0].startswith("etcd records | write s")
    assert [line.split(" | ")[0] for line in table[1:]] == ["200", "400"]


def test_etcd_scale_benchmark_without_the_reference_measures_ours_alone():
    options = ["--records", "150", "--runs", "1", "--window", "1", "--warmup", "0", "--no-reference"]
    done = run_benchmark("etcd_scale", *options, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    (size,) = report["sizes"]  # --reference-records (10,000 by default) is not below --records: one size
    assert size["records"] == 150 and size["ours"]["watcher"]["seen"] == 150
    assert "reference" not in size and "ratios" not in size
    assert report["reference_timeout_s"] is None
