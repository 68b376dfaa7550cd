"""A command line a newcomer can trust (issue 28, points 8-11): ``get`` takes the ID a table shows;
piped output is the same table; ``manifests -o json``; every command names the store the
environment chose; ``register`` exits 130 on Ctrl-C; README's watch example stops."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml
from discovery_sync.tools import cli, lookup, store
from discovery_sync.tools.manifests import MANIFESTS, manifest_texts, read_documents

import discovery_sync as ds
from testrigs.net import free_port
from tests.tools.terminal import command, environment, run_in_terminal
from tests.tools.test_terminal_injection import PROGRESS

REPO = Path(__file__).resolve().parents[2]
NO_STORE_VARIABLES = {"DYN_DISCOVERY_BACKEND": "", "ETCD_ENDPOINTS": "", "DYN_FILE_KV": ""}  # blank is unset


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'store'}?ttl=3600&rescan_interval=0.2"


@pytest.fixture
def worker(url: str):
    """A worker with an endpoint and two model cards (one with a suffix), all under its id; and
    two event sources of ids 0x1234 and 0x1299 (publishers: their own ids)."""
    with ds.connect(url, instance_id=0x00AB_CDEF_0123_4567) as client:
        client.register(ds.EndpointSpec("ns", "backend", "generate", ds.Transport.tcp("127.0.0.1:9000")))
        client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "Qwen/Qwen3-0.6B"}))
        client.register(ds.ModelSpec("ns", "backend", "generate", {"display_name": "Qwen/Qwen3-0.6B"}, "my-lora"))
        client.register(ds.EventSourceSpec(ds.EventScope("ns"), "kv", 0x1234))
        client.register(ds.EventSourceSpec(ds.EventScope("ns"), "kv", 0x1299))
        yield client


def get(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, list[dict], str]:
    """``get`` in-process with -o json: its exit status, the records printed, stderr."""
    try:
        status = cli.main(["--url", url, "get", *args, "-o", "json"])
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, [orjson.loads(line) for line in out.splitlines()], err


# -- 8. get takes the id a table shows ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "kind", "expected"),
    [
        ("abcdef01234567", "endpoints", "Endpoint"),  # the ID column (leading zeros are not shown)
        ("00abcdef01234567", "endpoints", "Endpoint"),  # the 16-hex instance id
        ("abcd", "endpoints", "Endpoint"),  # a unique prefix
        ("ABCDEF", "models", None),  # two model cards share it: see the ambiguity test
        ("ns/backend/generate/abcdef01234567", "endpoints", "Endpoint"),
        ("ns/backend/generate/abc/my-lora", None, "Model"),  # an id path of a suffixed card, id prefix
        ("1234", None, "EventSource"),
        ("namespace/ns/topic/kv/1299", None, "EventSource"),
        ("v1/instances/ns/backend/generate/abcdef01234567", None, "Endpoint"),  # the store key: exact
    ],
)
def test_get_takes_the_id_a_table_shows(capsys, url, worker, key, kind, expected):
    status, records, err = get(capsys, url, key, *(["--kind", kind] if kind else []))
    if expected is None:
        assert status == 2 and records == [], err
        return
    assert status == 0, err
    (record,) = records
    assert record["type"] == expected
    assert record.get("instance_id", record.get("publisher_id")) in (worker.instance_id, 0x1234, 0x1299)


def test_an_ambiguous_id_is_an_error_listing_the_candidates(capsys, url, worker):
    status, records, err = get(capsys, url, "abcdef01234567")  # endpoint and both cards share it
    assert status == 2 and records == []
    (line,) = err.splitlines()
    assert line.startswith("discovery-sync: error: 'abcdef01234567' matches 3 records: ")
    for key in (
        "v1/instances/ns/backend/generate/abcdef01234567",
        "v1/mdc/ns/backend/generate/abcdef01234567",
        "v1/mdc/ns/backend/generate/abcdef01234567/my-lora",
    ):
        assert key in line
    assert "give one of these store keys, or --kind endpoints or --kind models" in line
    status, _, err = get(capsys, url, "12", "--kind", "event_sources")  # two ids start with 12
    assert status == 2 and "matches 2 records" in err and "give more of the id" in err


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("ffff", "no record has an instance id starting with ffff among the endpoints, models, event channels"),
        ("ns/backend/other/abcd", "no record matches the id path ns/backend/other/abcd among the endpoints and models"),
        ("v1/mdc/ns/backend/generate/abcd", "no record v1/mdc/ns/backend/generate/abcd in file://"),
    ],
)
def test_a_miss_says_what_was_looked_for(capsys, url, worker, key, said):
    status, records, err = get(capsys, url, key)
    assert status == 1 and records == []
    (line,) = err.splitlines()
    assert said in line and "'discovery-sync list" in line, line


@pytest.mark.parametrize("key", ["bogus", "12345678901234567", "a/b", "v2/x", ""])
def test_a_key_of_no_form_is_a_usage_error_naming_the_forms(key):
    with pytest.raises(ds.ValidationError, match="ns/component/endpoint/ID, or a store key"):
        lookup.wanted(key, None)


# -- 9. piped output keeps the table; manifests -o json --------------------------------------------------
def test_piped_output_is_the_whole_table(url, worker):
    long = "127.0.0.1:9000/" + "x" * 150
    worker.register(ds.EndpointSpec("ns", "backend", "long", ds.Transport.tcp(long)))
    result = subprocess.run(
        command("list", "--url", url, "--kind", "endpoints"),
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["KIND", "WHERE", "ID", "TRANSPORT"]
    assert any(row.endswith(long) for row in rows)  # never cut to a width when piped


def test_manifests_as_json_lines_are_the_yaml_documents():
    result = subprocess.run(command("manifests", "-o", "json"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    documents = [orjson.loads(line) for line in result.stdout.splitlines()]
    texts = manifest_texts(list(MANIFESTS))
    assert documents == [doc for text in texts for doc in yaml.safe_load_all(text) if doc is not None]
    assert [doc["kind"] for doc in documents] == ["CustomResourceDefinition", "Role", "RoleBinding"]


@pytest.mark.parametrize("name", list(MANIFESTS))
def test_the_manifest_reader_reads_each_shipped_manifest_as_pyyaml_does(name):
    (text,) = manifest_texts([name])
    assert read_documents(text) == [doc for doc in yaml.safe_load_all(text) if doc is not None]


def test_the_manifest_reader_refuses_what_it_does_not_know():
    with pytest.raises(ds.ValidationError, match="does not take"):
        read_documents("a: &anchor 1\nb: *anchor\n")


# -- 10. the store the environment chose -------------------------------------------------------------------
def test_a_terminal_is_told_which_store_the_environment_chose(tmp_path, url, worker):
    root = tmp_path / "store"
    env = {**NO_STORE_VARIABLES, "DYN_FILE_KV": str(root)}
    status, shown = run_in_terminal("list", "--kind", "endpoints", env=env)
    assert status == 0, shown
    assert shown.splitlines()[0] == f"store: file://{root} (from DYN_FILE_KV)"
    status, shown = run_in_terminal("doctor", env=env)
    assert status == 0, shown
    assert shown.splitlines()[0] == f"store    file://{root} (file backend, from DYN_FILE_KV)"
    piped = subprocess.run(command("list"), capture_output=True, text=True, timeout=60, env=environment(**env))
    assert piped.returncode == 0 and piped.stderr == ""  # stdout stays clean: the header goes to a terminal only
    assert piped.stdout.startswith("KIND ")


def test_an_etcd_store_from_the_environment_is_named_with_its_endpoints():
    port = free_port()  # nothing listens there
    env = {**NO_STORE_VARIABLES, "ETCD_ENDPOINTS": f"127.0.0.1:{port}"}
    status, shown = run_in_terminal("list", "--timeout", "1", env=env)
    assert status == 1, shown
    lines = [line for line in PROGRESS.sub("", shown).splitlines() if line.strip()]
    assert lines[0] == f"store: etcd://127.0.0.1:{port} (from ETCD_ENDPOINTS)"
    assert lines[-1].startswith("discovery-sync: error: ") and "Traceback" not in shown
    status, shown = run_in_terminal("doctor", "--timeout", "1", env=env)
    assert status == 1, shown
    assert PROGRESS.sub("", shown).splitlines()[0] == f"store    etcd://127.0.0.1:{port} (from ETCD_ENDPOINTS)"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"DYN_FILE_KV": "/srv/kv"}, ("file:///srv/kv", "from DYN_FILE_KV")),
        (
            {"DYN_DISCOVERY_BACKEND": "file", "DYN_FILE_KV": "/srv/kv"},
            ("file:///srv/kv", "from DYN_DISCOVERY_BACKEND=file and DYN_FILE_KV"),
        ),
        ({"ETCD_ENDPOINTS": "a:1, http://b:2"}, ("etcd://a:1,b:2", "from ETCD_ENDPOINTS")),
        ({"ETCD_ENDPOINTS": "https://a:1"}, ("etcd at https://a:1", "from ETCD_ENDPOINTS")),
        (
            {"DYN_DISCOVERY_BACKEND": "etcd"},
            ("etcd://localhost:2379", "from DYN_DISCOVERY_BACKEND=etcd; ETCD_ENDPOINTS is not set: the default"),
        ),
        ({"DYN_DISCOVERY_BACKEND": "kubernetes"}, ("kube://", "from DYN_DISCOVERY_BACKEND=kubernetes")),
        ({"DYN_DISCOVERY_BACKEND": "zookeeper"}, ("no store", "DYN_DISCOVERY_BACKEND='zookeeper' names no backend")),
    ],
)
def test_the_store_of_the_environment(monkeypatch, variables, expected):
    for name, value in {**NO_STORE_VARIABLES, **variables}.items():
        monkeypatch.setenv(name, value)
    assert store.environment_store() == expected


def test_without_variables_the_default_file_root_is_named(monkeypatch, tmp_path):
    for name in NO_STORE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    where, source = store.environment_store()
    assert where == f"file://{tmp_path}/dynamo_store_kv" and source == "DYN_FILE_KV is not set: the default"


def test_the_default_etcd_endpoints_are_the_backends():
    from discovery_sync.backends.etcd.options import DEFAULT_ENDPOINTS

    assert store.DEFAULT_ETCD_ENDPOINTS == DEFAULT_ENDPOINTS


# -- 11. README's watch example stops ----------------------------------------------------------------------
def test_the_readmes_watch_example_stops_by_itself():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in readme.splitlines() if re.match(r"\$ discovery-sync .*\bwatch\b", line)]
    argv = shlex.split(line.removeprefix("$ "), comments=True)[1:]
    args = cli.build_parser().parse_args(argv)
    assert args.command == "watch" and (args.idle_timeout is not None or args.count is not None), line
