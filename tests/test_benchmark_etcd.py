"""``python -m benchmarks.etcd --only cluster``: a writer's keep-alive leaving a hung member of a
three-member cluster, one short trial; the report's shape and the consistency of its counts are
checked, no timing is asserted."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_the_cluster_case_accounts_for_every_trial():
    done = run_benchmark("etcd", "--only", "cluster", "--trials", "1", "--ttls", "5", "--trial-timeout", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    cluster = report["cluster"]
    assert (cluster["members"], cluster["trials"], cluster["trial_timeout_s"]) == (3, 1, 4.0)
    figures = cluster["ttl_5"]
    elsewhere = figures["first_keepalive_elsewhere"]
    assert isinstance(elsewhere, dict), elsewhere  # status() names the member of the last keep-alive
    assert elsewhere["count"] + sum(figures["failed_trials"].values()) == 1
    assert figures["lease_lost_after_stop"]["count"] == figures["failed_trials"].get("lease lost", 0)
    assert "floor_raw_put" not in report  # --only cluster: the single-member figures are not taken
