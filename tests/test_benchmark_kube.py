"""``python -m benchmarks.kube``: the time from a pod's graceful delete to ``Removed`` (``--only
graceful_delete``), printed as JSON beside upstream's anchor, and the initial sync of our reader beside
a reference-runtime reader's over the same fake server (``--only initial_sync --reference``). Their
shape and the consistency of their numbers are checked, no timing is asserted (each round asserts the
Added and the Removed it times; each reader asserts it saw every worker)."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark


def test_the_graceful_delete_figure_times_every_round() -> None:
    done = run_benchmark("kube", "--only", "graceful_delete", "--rounds", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    figure = json.loads(done.stdout)["graceful_delete"]
    assert figure["rounds"] == figure["count"] == 3 and figure["upstream_anchor_ms"] == 899
    assert 0 < figure["p50_ms"] <= figure["max_ms"]


def test_the_initial_sync_is_measured_beside_the_reference_readers_on_one_server() -> None:
    done = run_benchmark("kube", "--only", "initial_sync", "--sizes", "30", "--reference", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert "initial_sync" not in report and "graceful_delete" not in report
    figure = report["initial_sync_beside_reference"]
    assert figure["endpoint"] == "bench.background.generate"
    baseline = figure["baseline_rss_grown_kb"]
    (size,) = figure["sizes"]
    ours, theirs = size["ours"], size["reference"]
    assert size["workers"] == ours["workers"] == theirs["workers"] == theirs["known"] == 30
    assert 0 < theirs["runtime_ms"] < theirs["sync_ms"] and ours["sync_ms"] > 0
    assert theirs["rss_grown_at_sync_kb"] > 0 and theirs["rss_grown_kb"] > 0
    for side, figures in (("ours", ours), ("reference", theirs)):
        assert figures["rss_kb_per_worker"] == pytest.approx(figures["rss_grown_kb"] / 30, abs=0.06), side
        net = (figures["rss_grown_kb"] - baseline[side]) / 30
        assert figures["rss_kb_per_worker_net"] == pytest.approx(net, abs=0.06), side
    ratios = size["reference_over_ours"]
    assert ratios["sync"] == pytest.approx(theirs["sync_ms"] / ours["sync_ms"], abs=0.01)
    if ours["rss_kb_per_worker_net"] > 0:  # a few workers' growth can be lost in the allocator's noise
        expected = theirs["rss_kb_per_worker_net"] / ours["rss_kb_per_worker_net"]
        assert ratios["rss_per_worker_net"] == pytest.approx(expected, abs=0.01)
