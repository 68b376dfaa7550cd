"""``python -m benchmarks.delivery`` measures two checkouts side by side (an A/A run here): the
report's shape and the consistency of its numbers are checked, no timing is asserted."""

from __future__ import annotations

import json

from testrigs.source_tree import REPO
from tests.benchmark_runs import run_benchmark


def test_delivery_benchmark_measures_two_sources_with_ratios_to_the_first(tmp_path):
    options = ["--events", "200", "--watches", "2", "--runs", "1", "--source", str(REPO), "--source", "."]
    done = run_benchmark("delivery", *options)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    first, later = report["sources"]
    assert first["commit"] and first["commit"] == later["commit"]
    ratios = report["ratios_to_first"]["."]
    for figure in ("fan_out_us", "publish_us", "drain_us"):
        assert first["medians"][figure] > 0 and later["medians"][figure] > 0
        assert ratios[figure] == round(later["medians"][figure] / first["medians"][figure], 3)
    refused = run_benchmark("delivery", "--source", str(tmp_path), timeout=60)
    assert refused.returncode == 2 and "not a checkout of discovery-sync" in refused.stderr
