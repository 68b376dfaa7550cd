"""The command line on a file store holding records that register() refuses (issue 25, case 5):
it prints the other records, in every format, and warns of each skipped file once."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import discovery_sync as ds
from discovery_sync.jsonsafe import MAX_DEPTH
from tests.tools.test_cli import cli, lines
from tests.unstorable import ORJSON_MAX_DEPTH, deep_model, model_file_name

DEEP = {0xA: MAX_DEPTH + 1, 0xB: ORJSON_MAX_DEPTH}  # instance id -> depth of its record
WARNING = "discovery-sync: warning: "
DEEP_FILES = [model_file_name(instance_id=instance_id) for instance_id in DEEP]


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, dict]:
    """A store with one valid model card (the deepest register() stores) and the DEEP ones; its
    URL (records live an hour, rescans every 0.2 s) and the valid card's JSON."""
    url = f"file://{tmp_path / 'store'}?ttl=3600&rescan_interval=0.2"
    ds.connect(url).shutdown()  # creates the buckets
    bucket = tmp_path / "store" / "v1" / "mdc"
    valid = deep_model(MAX_DEPTH, instance_id=0xC)
    (bucket / model_file_name(instance_id=0xC)).write_bytes(valid)
    for instance_id, depth in DEEP.items():
        (bucket / model_file_name(instance_id=instance_id)).write_bytes(deep_model(depth, instance_id=instance_id))
    return url, orjson.loads(valid)


def warnings_about(stderr: str) -> dict[str, int]:
    """How many warning lines name each deep record's file."""
    warned = [line for line in stderr.splitlines() if line.startswith(WARNING)]
    assert all(f"more than {MAX_DEPTH} levels deep" in line for line in warned), warned
    return {name: sum(name in line for line in warned) for name in DEEP_FILES}


def test_list_prints_the_other_records_in_every_format(store):
    url, valid = store
    result = cli("-v", "list", "--kind", "models", "-o", "json", url=url)
    assert result.returncode == 0, result.stderr
    assert lines(result.stdout) == [{**valid, "instance_id_hex": "c"}]  # the id as the table shows it, too
    result = cli("-v", "list", "--kind", "models", "-o", "yaml", url=url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('type: "Model"\n') and result.stdout.count("instance_id: ") == 1
    assert f"instance_id: {0xC}\n" in result.stdout
    for table in ("table", "wide"):
        result = cli("-v", "list", "--kind", "models", "-o", table, url=url)
        assert result.returncode == 0, result.stderr
        assert [row.split()[2] for row in result.stdout.splitlines()[1:]] == ["c"]


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_watch_prints_the_other_records_and_warns_of_each_skipped_file_once(store, fmt):
    url, valid = store
    result = cli("-v", "watch", "--kind", "models", "-o", fmt, "--idle-timeout", "3", url=url)
    assert result.returncode == 0, result.stderr
    if fmt == "json":
        shown = {**valid, "instance_id_hex": "c"}
        assert lines(result.stdout) == [
            {"event": "Added", "instance": shown},
            {"event": "Resync", "instances": [shown]},
        ]
    else:
        assert result.stdout.count("instance_id: ") == 2 and f"instance_id: {0xC}\n" in result.stdout
    assert warnings_about(result.stderr) == dict.fromkeys(DEEP_FILES, 1)


def test_get_finds_no_record_and_says_why(store):
    url, _ = store
    for instance_id in DEEP:
        result = cli("-v", "get", f"v1/mdc/ns/backend/generate/{instance_id:x}", "-o", "json", url=url)
        assert result.returncode == 1 and result.stdout == ""
        warned = [line for line in result.stderr.splitlines() if line.startswith(WARNING)]
        assert len(warned) == 1 and "unusable" in warned[0] and f"more than {MAX_DEPTH} levels deep" in warned[0]
