"""``python -m benchmarks.kube --only graceful_delete``: the time from a pod's graceful delete to
``Removed``, printed as JSON beside upstream's anchor; its shape is checked, no timing is asserted
(each round itself asserts the Added and the Removed it times)."""

from __future__ import annotations

import json

from tests.benchmark_runs import run_benchmark


def test_the_graceful_delete_figure_times_every_round():
    done = run_benchmark("kube", "--only", "graceful_delete", "--rounds", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    figure = json.loads(done.stdout)["graceful_delete"]
    assert figure["rounds"] == figure["count"] == 3 and figure["upstream_anchor_ms"] == 899
    assert 0 < figure["p50_ms"] <= figure["max_ms"]
