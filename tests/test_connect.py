"""connect(): URLs, the reference runtime's environment variables, lazy backend imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

import discovery_sync as ds


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("DYN_DISCOVERY_BACKEND", "ETCD_ENDPOINTS", "DYN_FILE_KV", "DYN_FILE_KV_TTL_SECS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_without_a_url_the_file_store_in_dyn_file_kv_is_used(clean_env, tmp_path):
    clean_env.setenv("DYN_FILE_KV", str(tmp_path / "kv"))
    clean_env.setenv("DYN_FILE_KV_TTL_SECS", "7")
    with ds.connect() as client:
        assert client.backend_name == "file"
        assert client.root == tmp_path / "kv"
        assert client.ttl == 7.0
        client.register(ds.EndpointSpec("ns", "c", "e", ds.Transport.tcp("x")))
        assert len(list((tmp_path / "kv" / "v1" / "instances").iterdir())) == 1


def test_dyn_discovery_backend_selects_the_backend(clean_env, tmp_path):
    clean_env.setenv("DYN_DISCOVERY_BACKEND", "mem")
    with ds.connect() as client:
        assert client.backend_name == "memory"
    clean_env.setenv("DYN_DISCOVERY_BACKEND", "file")
    clean_env.setenv("DYN_FILE_KV", str(tmp_path))
    with ds.connect() as client:
        assert client.backend_name == "file"
    clean_env.setenv("DYN_DISCOVERY_BACKEND", "consul")
    with pytest.raises(ds.ValidationError, match="file, etcd, kubernetes, mem"):
        ds.connect()


def test_etcd_endpoints_selects_etcd_when_no_backend_is_named(clean_env):
    clean_env.setenv("ETCD_ENDPOINTS", "http://127.0.0.1:2379")
    assert ds.default_url() == "etcd://"


def test_file_url_options(clean_env, tmp_path):
    with ds.connect(f"file://{tmp_path}?mode=shared&ttl=4") as client:
        assert (client.observer_kind, client.lock_mode, client.ttl) == ("polling", "soft", 4.0)
        assert (client.cache_window, client.dead_after) == (0.0, 4.0)  # a local filesystem has no cache window
    with ds.connect(f"file://{tmp_path}?ttl=4&cache_window=2.5") as client:
        assert (client.cache_window, client.dead_after) == (2.5, 6.5)
    bad_options = ("ttl=abc", "observer=fanotify", "lock=maybe", "mode=cluster", "colour=blue", "ttl=0")
    for bad in (*bad_options, "cache_window=-1", "cache_window=soon"):
        with pytest.raises(ds.ValidationError):
            ds.connect(f"file://{tmp_path}?{bad}")
    with pytest.raises(ds.ValidationError, match="not a host"):
        ds.connect("file://remotehost/path")
    with pytest.raises(ds.ValidationError):
        ds.connect(42)


def test_memory_clients_share_a_named_registry():
    a, b, c = ds.connect("memory://shared-test"), ds.connect("memory://shared-test"), ds.connect("memory://elsewhere")
    endpoint = a.register(ds.EndpointSpec("ns", "c", "e", ds.Transport.tcp("x")))
    assert b.list(ds.Query.endpoints()) == [endpoint]
    assert c.list(ds.Query.endpoints()) == []
    a.shutdown()
    assert b.list(ds.Query.endpoints()) == []


def test_importing_the_package_pulls_in_no_backend_library():
    heavy = "('requests', 'kubernetes', 'watchdog')"
    code = f"import sys, discovery_sync; print(sorted(m for m in {heavy} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


BAD_URLS = [
    "file:///x%00y",
    "file://{store}?instance_id=abc",
    "file://{store}?instance_id=",
    "file://{store}?instance_id=-1",
    f"file://{{store}}?instance_id={2**70}",
    "file://{store}#fragment",
    "etcd://127.0.0.1:1?ttl=abc",
    "etcd://127.0.0.1:1?watch_read_timeout=x",
    "etcd://127.0.0.1:1?watch_read_timeout=0",
    "etcd://[::1",
    "etcd://127.0.0.1:99999",
    "etcd://127.0.0.1:1?colour=blue",
    "memory://?colour=blue",
    "memory://?instance_id=-1",
    "kube://?ready_timeout=nan",
    "kube://?consistent_reads=maybe",
    *(
        f"file://{{store}}?{option}={value}"
        for option in ("rescan_interval", "poll_interval")
        for value in ("nan", "0", "-1", "inf", "1e300")
    ),
    "file://{store}?lock_timeout=nan",
    "file://{store}?lock_stale=inf",
    "file://{store}?max_record_bytes=1.5",
    "file://{store}?clock=manual",  # a clock is an object, given as a keyword
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_every_bad_url_is_a_validation_error_naming_what_is_wrong(url, clean_env, tmp_path):
    store = tmp_path / "store"
    with pytest.raises(ds.ValidationError) as caught:
        ds.connect(url.replace("{store}", str(store)))
    message = str(caught.value)
    assert "not valid" in message or "unknown" in message or "cannot be parsed" in message or "fragment" in message
    assert not store.exists()  # refused before anything is created


def test_unknown_options_list_the_valid_ones(clean_env, tmp_path):
    with pytest.raises(ds.ValidationError, match="watch_read_timeout"):
        ds.connect("etcd://127.0.0.1:1?colour=blue")
    with pytest.raises(ds.ValidationError, match="the valid ones are cache_window, clock, instance_id, lock,"):
        ds.connect(f"file://{tmp_path}", colour="blue")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ETCD_STARTUP_CONNECT_TIMEOUT_SECONDS", "abc"),
        ("ETCD_LEASE_TTL", "abc"),
        ("ETCD_LEASE_TTL", "-3"),
        ("ETCD_ENDPOINTS", "http://[::1"),
        ("ETCD_ENDPOINTS", ","),
    ],
)
def test_bad_etcd_environment_is_a_validation_error_naming_the_variable(variable, value, clean_env):
    clean_env.setenv(variable, value)
    with pytest.raises(ds.ValidationError, match=variable):
        ds.connect("etcd://" if variable == "ETCD_ENDPOINTS" else "etcd://127.0.0.1:1")


def test_bad_file_environment_is_a_validation_error_naming_the_variable(clean_env, tmp_path):
    for variable, value in (
        ("DYN_FILE_KV_TTL_SECS", "nan"),
        ("DYN_FILE_KV_TTL_SECS", "0"),
        ("DYN_FILE_KV_TTL_SECS", "x"),
    ):
        with clean_env.context() as env:
            env.setenv("DYN_FILE_KV", str(tmp_path))
            env.setenv(variable, value)
            with pytest.raises(ds.ValidationError, match=variable):
                ds.connect("file://")


def test_keyword_arguments_and_constructors_get_the_same_checks(tmp_path):
    from discovery_sync.backends.file import FileDiscovery
    from discovery_sync.backends.memory import MemoryDiscovery

    for bad in ({"rescan_interval": float("nan")}, {"ttl": 0}, {"poll_interval": float("inf")}, {"lock": "maybe"}):
        with pytest.raises(ds.ValidationError, match="not valid"):
            ds.connect(f"file://{tmp_path}", **bad)
        with pytest.raises(ds.ValidationError, match="not valid"):
            FileDiscovery(tmp_path, **bad)
    with pytest.raises(ds.ValidationError, match="instance_id"):
        MemoryDiscovery(instance_id=2**64)
    with ds.connect(f"file://{tmp_path}", instance_id="0x10", rescan_interval="0.5") as client:
        assert (client.instance_id, client.rescan_interval) == (16, 0.5)
