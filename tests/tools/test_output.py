"""The CLI's output formats and helpers, in-process: tables, YAML, record rows, event lines, keys, options."""

from __future__ import annotations

import argparse
import io
import json
import types
from collections.abc import Callable

import pytest
import yaml
from discovery_sync.tools import output, store
from discovery_sync.tools.commands import _LiveTable, doctor_lines

import discovery_sync as ds

ENDPOINT = ds.Endpoint("ns", "backend", "generate", 0x2A, ds.Transport.tcp("10.0.0.7:9000/2a"))
MODEL = ds.Model("ns", "backend", "generate", 0x2A, {"display_name": "Qwen/Qwen3-0.6B", "model_type": "Chat"}, "lora-1")
CHANNEL = ds.EventChannel(ds.EventScope("ns", "backend"), "kv-events", 0xFF, ds.ZmqTransport("tcp://10.0.0.7:5557"))
SOURCE = ds.EventSource(ds.EventScope("ns"), "kv events", 7, {"zone": "a"})


def test_record_rows_show_kind_where_hex_id_and_transport():
    assert output.record_row(ENDPOINT) == ["endpoint", "ns/backend/generate", "2a", "tcp 10.0.0.7:9000/2a"]
    assert output.record_row(MODEL) == ["model", "ns/backend/generate (lora-1)", "2a", "-"]
    assert output.record_row(CHANNEL) == [
        "event-channel",
        "ns/backend topic=kv-events",
        "ff",
        "zmq tcp://10.0.0.7:5557",
    ]
    assert output.record_row(SOURCE) == ["event-source", "ns topic=kv events", "7", "-"]
    wide = output.record_row(MODEL, wide=True)
    assert wide[4:] == ["Qwen/Qwen3-0.6B [Chat]", "v1/mdc/ns/backend/generate/2a/lora-1"]
    assert output.record_row(SOURCE, wide=True)[5] == "v1/event_sources/namespace/ns/topic/kv%20events/7"


def test_store_keys_use_the_buckets_and_parse_back():
    for record in (ENDPOINT, MODEL, CHANNEL, SOURCE):
        key = output.store_key(record.id())
        assert key.startswith(record.kind.bucket + "/")
        assert store.parse_key(key) == record.id()
        assert store.parse_key("/" + key + "/") == record.id()
    assert store.parse_key("ns/backend/generate/2a", "endpoints") == ENDPOINT.id()
    assert store.parse_key("v1/instances/ns/backend/generate/2a", "endpoints") == ENDPOINT.id()


@pytest.mark.parametrize("key", ["bogus/x", "v1/instances/ns/backend/2a", "v1/instances/ns/b/e/XYZ", ""])
def test_bad_store_keys_are_validation_errors(key):
    with pytest.raises(ds.ValidationError):
        store.parse_key(key)


def test_tables_align_columns_and_fit_the_width():
    rows = [["endpoint", "ns/backend/generate", "2a"], ["model", "n/c/e", "1234567890abcdef"]]
    lines = output.table(["KIND", "WHERE", "ID"], rows)
    assert lines == [
        "KIND       WHERE                 ID",
        "endpoint   ns/backend/generate   2a",
        "model      n/c/e                 1234567890abcdef",
    ]
    narrow = output.table(["KIND", "WHERE", "ID"], rows, width=36, cut="~")
    assert all(len(line) <= 36 for line in narrow), narrow
    assert narrow[1].split()[1].endswith("~") or narrow[2].split()[2].endswith("~")
    starts = {line.index(line.split()[1]) for line in narrow}
    assert len(starts) == 1, narrow  # still aligned


@pytest.mark.parametrize(
    "data",
    [
        ENDPOINT.to_dict(),
        MODEL.to_dict(),
        CHANNEL.to_dict(),
        {"s": ["a", {"b": [1, 2.5, None, True]}, [], {}], "yes": "no", "": "x", "k: v": "#x\n\u2028é"},
        [[1, [2, 3]], {"a": {}}],
        "plain",
        {"problems": [], "null": None, "1": 1},
    ],
)
def test_yaml_reads_back_as_the_same_data(data):
    assert yaml.safe_load(output.to_yaml(data)) == data


def test_a_yaml_printer_separates_documents():
    class Stream(list):
        def write(self, text):
            self.append(text)

        def flush(self):
            pass

        def isatty(self):
            return False

    stream = Stream()
    printer = output.Printer("yaml", stream)  # type: ignore[arg-type]
    printer.records([ENDPOINT, MODEL])
    documents = list(yaml.safe_load_all("".join(stream)))
    assert documents == [{**record.to_dict(), "instance_id_hex": "2a"} for record in (ENDPOINT, MODEL)]
    assert "".join(stream).count("---") == 1


def test_event_lines_give_time_event_key_and_summary():
    now = 1_700_000_000.123
    added = output.event_line(ds.Added(ENDPOINT), now)
    assert added.endswith("ADDED    v1/instances/ns/backend/generate/2a  tcp 10.0.0.7:9000/2a")
    assert added[2] == ":" and added[8] == "." and added[9:12] == "123"
    assert "REMOVED  v1/mdc/ns/backend/generate/2a/lora-1" in output.event_line(ds.Removed(MODEL.id()), now)
    taints = output.event_line(ds.ModelTaintsUpdated(MODEL.id(), ("gpu=none",)), now)
    assert "TAINTS " in taints and taints.endswith("taints gpu=none")
    assert "RESYNC   2 records" in output.event_line(ds.Resync((ENDPOINT, MODEL)), now)
    assert "model Qwen/Qwen3-0.6B" in output.event_line(ds.Added(MODEL), now)


KUBE_TIMEOUTS = dict.fromkeys(
    ("connect_timeout", "request_timeout", "ready_timeout", "sync_timeout", "write_timeout"), 3.0
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("etcd://127.0.0.1:2379", {"connect_timeout": 3.0, "request_timeout": 3.0}),
        ("kube://", KUBE_TIMEOUTS),
        ("kubernetes://", KUBE_TIMEOUTS),
        ("file:///tmp/x", {}),
        ("memory://x", {}),
    ],
)
def test_timeout_options_per_backend(url, expected):
    assert store.timeout_options(url, 3.0) == expected


def test_timeout_options_without_a_url_follow_the_environment(monkeypatch):
    monkeypatch.setenv("DYN_DISCOVERY_BACKEND", "etcd")
    assert set(store.timeout_options(None, 1.0)) == {"connect_timeout", "request_timeout"}
    monkeypatch.setenv("DYN_DISCOVERY_BACKEND", "file")
    assert store.timeout_options(None, 1.0) == {}


def test_kinds_accept_aliases_and_refuse_others():
    assert store.kind_name("endpoint", allow_all=False) == "endpoints"
    assert store.kind_name("Event-Channels", allow_all=False) == "event_channels"
    assert store.kind_name("all", allow_all=True) == "all"
    with pytest.raises(argparse.ArgumentTypeError, match="choose endpoints, models"):
        store.kind_name("all", allow_all=False)


def namespace(**values: object) -> argparse.Namespace:
    defaults = dict.fromkeys(("namespace", "component", "endpoint", "scope", "topic"))
    return argparse.Namespace(**{**defaults, **values})


def test_list_all_queries_the_kinds_its_filters_apply_to():
    assert [q.kind_name for q in store.queries(namespace(kind="all"))] == list(store.KINDS)
    assert [q.kind_name for q in store.queries(namespace(kind="all", namespace="ns"))] == ["endpoints", "models"]
    assert [q.kind_name for q in store.queries(namespace(kind="all", topic="t"))] == ["event_channels", "event_sources"]
    with pytest.raises(ds.ValidationError, match="filters of one sort"):
        store.queries(namespace(kind="all", namespace="ns", topic="t"))


def test_doctor_lines_say_ok_or_problem_per_check():
    healthy = {
        "backend": "file",
        "instance_id": "2a",
        "problems": [],
        "ttl": 10.0,
        "buckets": {"v1/mdc": {"records": 1}},
    }
    lines = doctor_lines(healthy, "file:///s")
    assert lines[0].startswith("store    file:///s (file backend)")
    assert "ok       the store answers" in lines and "ok       v1/mdc: 1 record" in lines
    assert lines[-1] == "no problems found"
    failing = {"backend": "etcd", "instance_id": "2a", "problems": ["etcd at 127.0.0.1:1 is unreachable: refused"]}
    lines = doctor_lines(failing, "etcd://127.0.0.1:1")
    assert "PROBLEM  the store cannot be used (see below)" in lines
    assert "PROBLEM  etcd at 127.0.0.1:1 is unreachable: refused" in lines
    assert lines[-1].startswith("1 problem: ")


# -- ids that survive readers of doubles (issue 38, point 9) -------------------------------------------
BIG = 2**60 + 1  # above 2**53: a double cannot hold it
BIG_RECORDS = [
    ds.Endpoint("ns", "backend", "generate", BIG, ds.Transport.tcp("10.0.0.7:9000")),
    ds.Model("ns", "backend", "generate", BIG, {"display_name": "m"}),
    ds.EventChannel(ds.EventScope("ns"), "kv", BIG, ds.ZmqTransport("tcp://10.0.0.7:5557")),
    ds.EventSource(ds.EventScope("ns"), "kv", BIG, {}),
]


def as_jq_1_6_reads_it(line: str) -> dict:
    """A JSON line read as jq 1.6 and JavaScript read it: every number a double."""
    return json.loads(line, parse_int=float)


def json_lines(write: Callable[[output.Printer], None]) -> list[str]:
    stream = io.StringIO()
    write(output.Printer("json", stream))
    return stream.getvalue().splitlines()


@pytest.mark.parametrize("record", BIG_RECORDS, ids=lambda record: type(record).__name__)
def test_a_json_record_gives_its_id_as_the_table_shows_it_beside_the_number(record):
    (line,) = json_lines(lambda printer: printer.records([record]))
    field = "publisher_id" if isinstance(record, ds.EventSource) else "instance_id"
    exact, doubled = json.loads(line), as_jq_1_6_reads_it(line)
    assert exact[field] == BIG  # the number stays, for compatibility
    assert doubled[field] != BIG  # what jq 1.6 makes of it
    assert doubled[field + "_hex"] == "1000000000000001" == output.record_row(record)[2]
    assert int(doubled[field + "_hex"], 16) == BIG
    keys = list(record.to_dict())
    at = keys.index(field) + 1
    assert list(exact) == [*keys[:at], field + "_hex", *keys[at:]]  # right after the number


def _live_table(printer: output.Printer, *records: ds.DiscoveryInstance) -> _LiveTable:
    """What ``watch --live`` draws, over a view holding ``records`` at version 3."""
    table = _LiveTable(printer, redraw=False, title="t")
    table.view = types.SimpleNamespace(version=3, snapshot=lambda: {r.id(): r for r in records})  # type: ignore[assignment]
    return table


def test_watch_documents_give_the_ids_as_text_too():
    endpoint, model = BIG_RECORDS[:2]
    events = [ds.Added(endpoint), ds.Resync((endpoint, model)), ds.Removed(endpoint.id())]
    added, resync, removed = (as_jq_1_6_reads_it(line) for line in json_lines(lambda p: [p.event(e) for e in events]))
    assert added["instance"]["instance_id_hex"] == "1000000000000001"
    assert [i["instance_id_hex"] for i in resync["instances"]] == ["1000000000000001"] * 2
    assert removed == {"event": "Removed", "id": {"kind": "endpoint", "path": "ns/backend/generate/1000000000000001"}}
    (live,) = json_lines(lambda p: _live_table(p, endpoint).draw())
    assert as_jq_1_6_reads_it(live)["instances"][0]["instance_id_hex"] == "1000000000000001"


def test_yaml_documents_give_the_id_as_text_too():
    stream = io.StringIO()
    output.Printer("yaml", stream).records(BIG_RECORDS[:1])
    document = yaml.safe_load(stream.getvalue())
    assert document["instance_id"] == BIG
    assert document["instance_id_hex"] == "1000000000000001"
