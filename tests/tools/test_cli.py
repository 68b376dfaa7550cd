"""The discovery-sync command, run as a real subprocess against a real file store."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import discovery_sync as ds
from tests.tools import SPEC


def cli(*args: str, url: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    prefix = ["--url", url] if url else []
    command = [sys.executable, "-m", "discovery_sync.tools", *prefix, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, **kwargs)


def lines(output: str) -> list[dict]:
    return [orjson.loads(line) for line in output.splitlines() if line.strip()]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?ttl=2&rescan_interval=0.2&uniform_ttl=true"  # one TTL: gc judges after it


def test_demo_runs_and_exits_zero(tmp_path):
    result = cli("demo", url=f"file://{tmp_path / 'demo'}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ModelTaintsUpdated" in result.stdout
    assert "demo finished" in result.stdout


def test_bench_measures_the_file_backend(tmp_path):
    result = cli("bench", "--events", "20", "--records", "50", "--sizes", "10,20", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    (numbers,) = lines(result.stdout)
    assert numbers["backend"] == "file"
    assert numbers["delivery"]["count"] == 20
    assert numbers["delivery"]["p50_ms"] <= numbers["delivery"]["p99_ms"] <= numbers["delivery"]["max_ms"]
    assert numbers["store"]["records"] == 50
    assert [entry["records"] for entry in numbers["initial_sync"]] == [10, 20]


@pytest.mark.parametrize(("option", "module"), [("--etcd", "benchmarks.etcd"), ("--interop", "benchmarks.interop")])
def test_bench_options_that_need_test_rigs_name_the_benchmark_to_run_in_one_line(option, module, tmp_path):
    result = cli("bench", option, cwd=tmp_path)  # away from the checkout: what an installed CLI does
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("discovery-sync: error: bench " + option)
    assert f"python -m {module}" in line


def test_list_prints_json_lines_of_records(url):
    with ds.connect(url) as client:
        endpoint = client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1")))
        client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "m"}))
        result = cli("list", "--kind", "endpoints", "--namespace", "ns", "-o", "json", url=url)
        assert result.returncode == 0, result.stderr
        assert lines(result.stdout) == [{**endpoint.to_dict(), "instance_id_hex": f"{endpoint.instance_id:x}"}]
        everything = lines(cli("list", "-o", "json", url=url).stdout)  # --kind all: endpoints first, then models
        assert [record["type"] for record in everything] == ["Endpoint", "Model"]
        models = lines(cli("list", "--kind", "models", "-o", "json", url=url).stdout)
        assert [m["card_json"] for m in models] == [{"display_name": "m"}]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_list_json_ids_survive_jq(tmp_path):
    """jq 1.6 reads numbers as doubles: ``.instance_id`` of an id above 2**53 comes out rounded,
    ``.instance_id_hex`` as the table shows it (issue 38, point 9)."""
    url = f"file://{tmp_path / 'store'}"
    with ds.connect(url, instance_id=2**60 + 1) as client:
        client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:1")))
        listed = cli("list", "-o", "json", url=url)
        table = cli("list", url=url)
    assert listed.returncode == table.returncode == 0, listed.stderr + table.stderr
    jq = ["jq", "-r", ".instance_id, .instance_id_hex"]
    number, text = subprocess.run(jq, input=listed.stdout, capture_output=True, text=True, check=True).stdout.split()
    if jq_reads_doubles():
        assert int(float(number)) != 2**60 + 1
    assert text == "1000000000000001"
    assert text in table.stdout.splitlines()[1].split()


def jq_reads_doubles() -> bool:
    """Whether this jq rounds integers above 2**53 (1.6 does; 1.7 keeps the literal when unchanged)."""
    probe = subprocess.run(["jq", "."], input="1152921504606846977", capture_output=True, text=True, check=True)
    return probe.stdout.strip() != "1152921504606846977"


def test_register_holds_until_interrupted_and_watch_sees_it_come_and_go(url, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_bytes(orjson.dumps(SPEC))
    command = [sys.executable, "-m", "discovery_sync.tools", "--url", url, "register", str(spec), "-o", "json"]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        registered = orjson.loads(holder.stdout.readline())
        assert registered["namespace"] == "ns" and isinstance(registered["instance_id"], int)
        watch = cli("watch", "--count", "2", "-o", "json", url=url)  # the Added of the initial state and the Resync
        events = lines(watch.stdout)
        assert [e["event"] for e in events] == ["Added", "Resync"]
        assert events[0]["instance"] == registered
        holder.send_signal(signal.SIGINT)
        assert holder.wait(30) == 130  # Ctrl-C: the records are removed, and the exit status says so
    finally:
        if holder.poll() is None:
            holder.kill()
    assert lines(cli("list", "-o", "json", url=url).stdout) == []


def test_register_refuses_bad_specs_with_a_clear_message(url, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"type": "Endpoint", "namespace": "", "component": "c", "endpoint": "e", "transport": {"tcp": "x"}}'
    )
    result = cli("register", "--no-hold", str(bad), url=url)
    assert result.returncode == 2
    assert "namespace must not be empty" in result.stderr
    result = cli("register", "--no-hold", "-", url=url, input="not json")
    assert result.returncode == 2 and "not valid JSON" in result.stderr
    assert lines(cli("list", "-o", "json", url=url).stdout) == []


def test_watch_with_an_idle_timeout_ends_by_itself(url):
    ds.connect(url).shutdown()  # a writer creates the store: a watch of a store that does not exist fails
    result = cli("watch", "--kind", "event_sources", "--idle-timeout", "0.5", "-o", "json", url=url)
    assert result.returncode == 0
    assert lines(result.stdout) == [{"event": "Resync", "instances": []}]


def test_doctor_reports_a_healthy_store_and_then_a_corrupt_record(url, tmp_path):
    missing = cli("doctor", "-o", "json", url=url)  # read-only: it creates nothing, and says the store is not there
    assert missing.returncode == 1 and "does not exist yet" in missing.stderr
    assert not (tmp_path / "store").exists()
    ds.connect(url).shutdown()  # a writer creates the store
    healthy = cli("doctor", "-o", "json", url=url)
    assert healthy.returncode == 0, healthy.stderr
    report = orjson.loads(healthy.stdout)
    assert report["backend"] == "file" and report["problems"] == []
    assert report["filesystem"]["type"] != "unknown"
    (tmp_path / "store" / "v1" / "instances" / "ns%2Fb%2Fe%2F1").write_text("{broken")
    broken = cli("doctor", "-o", "json", url=url)
    assert broken.returncode == 1
    assert "unusable record" in broken.stderr
    assert orjson.loads(broken.stdout)["buckets"]["v1/instances"]["unreadable"] == 1


def test_gc_removes_records_of_dead_owners_only(url, tmp_path):
    bucket = tmp_path / "store" / "v1" / "instances"
    with ds.connect(url) as live:
        live.register(ds.EndpointSpec("ns", "backend", "live", ds.Transport.tcp("x")))
        orphan = ds.Endpoint("ns", "backend", "orphan", 5, ds.Transport.tcp("x"))
        (bucket / "ns%2Fbackend%2Forphan%2F5").write_bytes(ds.instance_to_json(orphan))
        result = cli("gc", "-o", "json", url=url)
        assert result.returncode == 0, result.stderr
        assert lines(result.stdout) == [{"removed": "v1/instances/ns/backend/orphan/5"}]
        assert [e.endpoint for e in live.list(ds.Query.endpoints())] == ["live"]


def test_bad_urls_and_environment_fail_clearly(tmp_path):
    result = cli("list", url="nosuch://x")
    assert result.returncode == 2 and "scheme must be one of" in result.stderr
    env = {**os.environ, "DYN_DISCOVERY_BACKEND": "zookeeper"}
    result = cli("list", env=env)
    assert result.returncode == 2 and "DYN_DISCOVERY_BACKEND" in result.stderr
