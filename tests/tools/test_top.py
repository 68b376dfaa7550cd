"""``discovery-sync top``: a watching client's metrics, redrawn on a terminal, a table per round
when piped, the metrics mapping with -o json; --count ends it, Ctrl-C exits 130 (issue 29)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import discovery_sync as ds
from tests.tools.terminal import Terminal, piped


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?ttl=3&rescan_interval=0.2"


@pytest.fixture
def client(url: str):
    with ds.connect(url) as client:
        client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:9000")))
        yield client


def test_top_piped_prints_a_table_per_round_and_stops_after_count(url, client):
    result = piped("top", "--url", url, "--count", "2", "--interval", "0.3")
    assert result.returncode == 0, result.stderr
    rounds = ["metrics of" + block for block in result.stdout.split("metrics of") if block]
    assert len(rounds) == 2, result.stdout
    assert "\x1b" not in result.stdout  # piped: no screen control
    for block in rounds:
        heading, blank, header, *rows = block.strip("\n").splitlines()
        assert heading.startswith(f"metrics of a client watching endpoints in {url} (file backend, worker_id ")
        assert (blank, header.split()) == ("", ["METRIC", "VALUE"])
        values = {row[:24].strip(): row[24:] for row in rows}
        assert values["events delivered"] == "added=1, removed=0, model_taints_updated=0, resync=1"
        assert (values["watches open"], values["records owned"], values["state"]) == ("1", "0", "connected")
        assert values["heartbeat"] == "-"  # a read-only client beats for nothing


def test_top_json_prints_the_metrics_mapping_per_round(url, client):
    result = piped("top", "--url", url, "--count", "1", "-o", "json")
    assert result.returncode == 0, result.stderr
    (figures,) = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert figures["backend"] == "file" and figures["watches_open"] == 1
    assert figures["events_delivered"] == {"added": 1, "removed": 0, "model_taints_updated": 0, "resync": 1}
    assert list(figures["rescans"]["deep"]["buckets"])[-1] == "+Inf"


def test_top_follows_the_chosen_records_only(url, client):
    result = piped("top", "--url", url, "--count", "1", "-o", "json", "--kind", "models")
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["events_delivered"]["added"] == 0


def test_top_on_a_terminal_redraws_and_ctrl_c_exits_130_quietly(url, client):
    terminal = Terminal("top", "--url", url, "--interval", "0.2")
    try:
        terminal.expect("(Ctrl-C to stop)")
        client.register(ds.EndpointSpec("ns", "backend", "other", ds.Transport.tcp("127.0.0.1:9001")))
        terminal.expect("added=2")
        terminal.ctrl_c()
        status, shown = terminal.finish()
    finally:
        terminal.close()
    assert status == 130, shown
    assert shown.count("\x1b[H\x1b[2J") >= 2
    assert "Traceback" not in shown and "discovery-sync: interrupted" in shown


def test_top_refuses_a_bad_interval_in_one_line():
    result = piped("top", "--url", "memory://", "--interval", "0")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--interval" in result.stderr
