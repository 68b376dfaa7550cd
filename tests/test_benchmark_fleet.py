"""``python -m benchmarks.fleet`` at a small size: three writer processes, an idle stretch in which
nothing may happen, one writer killed with ``kill -9`` and its records removed at the watcher,
the others shut down. The report's shape and its verdict are checked, no timing is asserted."""

from __future__ import annotations

import json

from tests.benchmark_runs import run_benchmark

WRITERS, RECORDS = 3, 200


def test_a_small_fleet_idles_quietly_and_a_killed_writers_records_are_removed(tmp_path):
    options = ["--writers", str(WRITERS), "--records", str(RECORDS), "--idle", "3", "--ttl", "3"]
    done = run_benchmark("fleet", *options, "--store", str(tmp_path / "store"), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True, report
    assert set(report["idle"]) == {*(f"writer{i}" for i in range(WRITERS)), "watcher"}
    assert all(figures["percent_of_core"] >= 0 and figures["logged"] == [] for figures in report["idle"].values())
    kill = report["kill"]
    assert kill["removed"] == RECORDS and kill["removed_others"] == 0 and kill["removed_s"] > 0
    assert set(report["shutdown"]) == {*(f"writer{i}" for i in range(1, WRITERS)), "watcher"}
    assert all(done["shutdown_s"] >= 0 and done["states"] == [] for done in report["shutdown"].values())
    assert sorted(p.name for p in (tmp_path / "store" / "v1" / "instances").iterdir()) == []  # all shut down
