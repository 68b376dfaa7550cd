"""The CLI as a person meets it: in a pseudo-terminal (tables, progress, Ctrl-C) and piped (JSON lines);
read-only commands that write nothing; failing fast with --timeout. Every store is on tmp_path or loopback."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import orjson
import pytest
from discovery_sync.tools.output import record_document

import discovery_sync as ds
from testrigs.net import free_port
from tests.tools import SPEC
from tests.tools.terminal import Terminal, command, environment, piped, run_in_terminal


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?ttl=1&rescan_interval=0.2&uniform_ttl=true"  # one TTL: gc judges after it


@pytest.fixture
def client(url: str):
    with ds.connect(url) as client:
        client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:9000/generate")))
        client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "Qwen/Qwen3-0.6B"}))
        yield client


def columns_of(header: str) -> list[int]:
    """Where each column of a table starts, from its header."""
    return [match.start() for match in re.finditer(r"\S+", header)]


def test_list_on_a_terminal_is_an_aligned_table_with_hex_ids(url, client):
    status, shown = run_in_terminal("list", "--url", url)
    assert status == 0, shown
    lines = [line for line in shown.splitlines() if line.strip()]
    header, *rows = lines
    assert header.split() == ["KIND", "WHERE", "ID", "TRANSPORT"]
    starts = columns_of(header)
    assert len(rows) == 2
    for row in rows:
        for start in starts:
            assert row[start] != " " and (start == 0 or row[start - 1] == " "), (row, starts)
    hex_id = f"{client.instance_id:x}"
    assert [row.split()[0] for row in rows] == ["endpoint", "model"]
    assert all(row.split()[2] == hex_id for row in rows)
    assert str(client.instance_id) not in shown  # no decimal ids on a terminal


def test_a_narrow_terminal_cuts_the_table_to_its_width(url, client):
    status, shown = run_in_terminal("list", "--url", url, columns=50)
    assert status == 0, shown
    lines = [line for line in shown.splitlines() if line.strip()]
    assert all(len(line) <= 50 for line in lines), lines
    status, wide = run_in_terminal("list", "--url", url, "-o", "wide", columns=50)
    assert f"v1/instances/ns/backend/generate/{client.instance_id:x}" in wide  # wide is never cut


def test_list_piped_prints_the_same_table_and_json_lines_when_asked(url, client):
    """As kubectl and etcdctl do: piped output is the table (never cut to a width), -o json is for scripts."""
    status, shown = run_in_terminal("list", "--url", url)
    result = piped("list", "--url", url)
    assert status == result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == shown
    result = piped("list", "--url", url, "-o", "json")
    assert result.returncode == 0, result.stderr
    records = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert records == [record_document(i) for i in client.owned()]
    assert result.stderr == ""


def test_get_prints_one_record_and_exits_1_when_it_is_absent(url, client):
    (endpoint,) = [i for i in client.owned() if isinstance(i, ds.Endpoint)]
    key = f"v1/instances/ns/backend/generate/{client.instance_id:x}"
    result = piped("get", key, "--url", url, "-o", "json")
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == record_document(endpoint)
    by_path = piped("get", "--kind", "endpoint", key.removeprefix("v1/instances/"), "--url", url, "-o", "json")
    assert orjson.loads(by_path.stdout) == record_document(endpoint)
    absent = piped("get", "v1/instances/ns/backend/generate/1", "--url", url)
    assert absent.returncode == 1 and absent.stdout == ""
    assert len(absent.stderr.splitlines()) == 1 and "no record v1/instances/ns/backend/generate/1" in absent.stderr


def test_watch_on_a_terminal_prints_a_line_per_event_and_ctrl_c_exits_130(url, client):
    terminal = Terminal("watch", "--url", url)
    try:
        shown = terminal.expect("RESYNC")
        assert re.search(r"\d\d:\d\d:\d\d\.\d{3}  ADDED    v1/instances/ns/backend/generate/[0-9a-f]+  tcp 127", shown)
        client.register(ds.EndpointSpec("ns", "backend", "other", ds.Transport.tcp("127.0.0.1:9001")))
        terminal.expect("v1/instances/ns/backend/other/")
        terminal.ctrl_c()
        status, shown = terminal.finish()
    finally:
        terminal.close()
    assert status == 130, shown
    assert "Traceback" not in shown and "discovery-sync: interrupted" in shown


def test_watch_live_piped_prints_a_snapshot_per_change(url, client):
    result = piped("watch", "--live", "--count", "1", "--url", url, "-o", "json")
    assert result.returncode == 0, result.stderr
    (snapshot,) = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert snapshot["version"] == 0
    assert [i["type"] for i in snapshot["instances"]] == ["Endpoint"]


def test_watch_live_on_a_terminal_redraws_a_table(url, client):
    terminal = Terminal("watch", "--live", "--url", url, "--count", "2")
    try:
        terminal.expect("1 record (Ctrl-C to stop)")
        client.register(ds.EndpointSpec("ns", "backend", "other", ds.Transport.tcp("127.0.0.1:9001")))
        status, shown = terminal.finish()
    finally:
        terminal.close()
    assert status == 0, shown
    assert shown.count("\x1b[H\x1b[2J") == 2 and "2 records (Ctrl-C to stop)" in shown
    assert "ns/backend/other" in shown.split("\x1b[2J")[-1]


def test_doctor_on_a_terminal_is_a_short_report(url, client):
    status, shown = run_in_terminal("doctor", "--url", url)
    assert status == 0, shown
    assert "ok       the store answers" in shown and "no problems found" in shown
    result = piped("doctor", "--url", url, "-o", "json")
    assert orjson.loads(result.stdout)["problems"] == []


def orphan(url: str, tmp_path: Path) -> str:
    """A record of a worker that died (id 5), left in the store; its store key. (No live client
    shares the store: its own sweep would remove the record before gc does.)"""
    record = ds.Endpoint("ns", "backend", "orphan", 5, ds.Transport.tcp("x"))
    (tmp_path / "store" / "v1" / "instances").mkdir(parents=True, exist_ok=True)
    (tmp_path / "store" / "v1" / "instances" / "ns%2Fbackend%2Forphan%2F5").write_bytes(ds.instance_to_json(record))
    return "v1/instances/ns/backend/orphan/5"


def test_gc_shows_progress_on_a_terminal_and_removes_the_dead(url, tmp_path):
    key = orphan(url, tmp_path)
    status, shown = run_in_terminal("gc", "--url", url)
    assert status == 0, shown
    assert re.search(r"\r\x1b\[Kwaiting for .*\[#*\.*\] +\d+\.\d/\d+\.\d s", shown), shown
    assert re.search(rf"removed +{key}", shown)


def test_gc_piped_shows_no_progress_and_dry_run_removes_nothing(url, tmp_path):
    key = orphan(url, tmp_path)
    dry = piped("gc", "--dry-run", "--url", url, "-o", "json")
    assert dry.returncode == 0, dry.stderr
    assert [orjson.loads(line) for line in dry.stdout.splitlines()] == [{"would_remove": key}]
    assert dry.stderr == ""
    assert (tmp_path / "store" / "v1" / "instances" / "ns%2Fbackend%2Forphan%2F5").exists()
    real = piped("gc", "--url", url, "-o", "json")
    assert [orjson.loads(line) for line in real.stdout.splitlines()] == [{"removed": key}]
    assert real.stderr == ""


def test_register_on_a_terminal_shows_a_table_and_ctrl_c_removes_the_record(url, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_bytes(orjson.dumps(SPEC))
    terminal = Terminal("register", str(spec), "--url", url)
    try:
        shown = terminal.expect("press Ctrl-C to remove it")
        header = next(line for line in shown.splitlines() if line.startswith("KIND"))
        assert header.split() == ["KIND", "WHERE", "ID", "TRANSPORT"]
        assert re.search(r"endpoint +ns/backend/generate +[0-9a-f]+ +tcp x", shown)
        terminal.ctrl_c()
        status, shown = terminal.finish()
    finally:
        terminal.close()
    assert status == 130, shown  # README: 130 for Ctrl-C; the records are removed all the same
    assert "Traceback" not in shown and shown.rstrip().endswith("discovery-sync: interrupted")
    with ds.connect(url) as reader:
        assert reader.list(ds.Query.endpoints()) == []


@pytest.mark.parametrize(
    "args", [["list"], ["get", "v1/mdc/a/b/c/1"], ["watch", "--count", "1"], ["doctor"], ["gc", "--dry-run"]]
)
def test_read_only_commands_create_no_store_directory(tmp_path, args):
    missing = tmp_path / "missing" / "store"
    result = piped(*args, "--url", f"file://{missing}")
    assert result.returncode in (0, 1), result.stderr  # get: absent; doctor: may report the missing store
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "missing").exists()


def test_timeout_bounds_a_store_that_does_not_answer():
    port = free_port()  # closed: nothing listens on it
    started = time.monotonic()
    result = piped("list", "--url", f"etcd://127.0.0.1:{port}", "--timeout", "1")
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 2.0, f"took {elapsed:.1f} s"
    (line,) = result.stderr.splitlines()
    assert line.startswith("discovery-sync: error: ") and f"127.0.0.1:{port}" in line
    assert "urllib3" not in line and "object at 0x" not in line


def etcd_url(server, prefix: str) -> str:
    """The session's etcd, keys under this test's own prefix: no other test's records are seen (the
    watch's first event is the Resync of an empty view, whatever other tests left behind)."""
    return f"etcd://127.0.0.1:{server.client_port}/{prefix}"


def leases(server) -> set[str]:
    import requests

    response = requests.post(f"{server.url}/v3/lease/leases", json={}, timeout=5)
    response.raise_for_status()
    return {lease["ID"] for lease in response.json().get("leases", [])}


@pytest.mark.parametrize("args", [["list"], ["get", "v1/instances/a/b/c/1"], ["doctor"]])
def test_read_only_commands_grant_no_etcd_lease(etcd_server, etcd_prefix, args):
    """(A lease granted and revoked at exit would not show here: the watch below is checked while it runs.)"""
    before = leases(etcd_server)
    result = piped(*args, "--url", etcd_url(etcd_server, etcd_prefix))
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    assert leases(etcd_server) <= before


def test_a_running_etcd_watch_holds_no_lease(etcd_server, etcd_prefix):
    before = leases(etcd_server)
    watch = subprocess.Popen(
        command("watch", "--url", etcd_url(etcd_server, etcd_prefix), "-o", "json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    try:
        assert orjson.loads(watch.stdout.readline())["event"] == "Resync"  # connected and watching
        assert leases(etcd_server) <= before
    finally:
        watch.kill()
        watch.communicate(timeout=30)
