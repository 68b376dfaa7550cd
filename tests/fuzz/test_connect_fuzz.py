"""``connect()`` on generated URLs and options of every scheme raises nothing but DiscoveryError.

Nothing leaves loopback: etcd URLs point at a closed port with a connect_timeout of a few
hundredths of a second, kube clients get a kubeconfig for a closed port, the same connect_timeout
and a short ready timeout, and file stores live in a temporary directory of this module.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from discovery_sync.backends.etcd.options import OPTIONS as ETCD_OPTIONS
from discovery_sync.backends.file.options import OPTIONS as FILE_OPTIONS
from discovery_sync.backends.kube.options import OPTIONS as KUBE_OPTIONS
from discovery_sync.backends.memory import OPTIONS as MEMORY_OPTIONS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import discovery_sync as ds
from testrigs.kubeconfig import write_kubeconfig
from tests.fuzz.strategies import number_text

CLOSED_PORT = 1  # nothing listens on tcpmux on a test machine
SHORT = "0.02"  # connect_timeout: two tries at most, of a refused connection each
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# values that break naive parsers: junk text, specials, huge and negative numbers, NULs
junk = st.one_of(
    st.sampled_from(["", "nan", "inf", "-inf", "1e300", "-1", "0", "0x", "true", "maybe", "\0", "%00", "[::1"]),
    st.sampled_from(["0x2a", "$(", "$(HOME)", "$(UNSET_VARIABLE)", "٤٢"]),  # logical ids and keys
    number_text,  # Unicode digits, whitespace, signs, underscores, exponents, 5000 digits
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="discovery-sync-fuzz-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def kubeconfig(sandbox: Path) -> Path:
    return write_kubeconfig(sandbox / "kubeconfig", f"http://127.0.0.1:{CLOSED_PORT}", token="t")


def options_of(names: list[str]) -> st.SearchStrategy[dict[str, str]]:
    """Some of ``names`` (and now and then an unknown one) with junk values."""
    return st.dictionaries(st.sampled_from([*names, "colour", ""]), junk, max_size=4)


def try_connect(url: str, **options: Any) -> None:
    try:
        client = ds.connect(url, **options)
    except ds.DiscoveryError:
        return
    client.shutdown()


@FUZZ
@given(suffix=st.text(max_size=20), query=options_of(FILE_OPTIONS.names()))
def test_file_urls(sandbox: Path, suffix: str, query: dict[str, str]) -> None:
    path = urllib.parse.quote(str(sandbox / "stores"), safe="/") + "/" + suffix
    try_connect(f"file://{path}?{urllib.parse.urlencode(query)}")


@FUZZ
@given(netloc=st.text(max_size=20), prefix=st.text(max_size=10), query=options_of(ETCD_OPTIONS.names()))
def test_etcd_urls(netloc: str, prefix: str, query: dict[str, str]) -> None:
    # every endpoint that parses is made to point at the closed port of loopback
    hosts = ",".join(f"127.0.0.1:{CLOSED_PORT}" if part.strip() else part for part in netloc.split(","))
    if not hosts.strip(", "):  # no host at all would mean ETCD_ENDPOINTS or localhost:2379
        hosts = f"127.0.0.1:{CLOSED_PORT},"
    query["connect_timeout"] = SHORT
    try_connect(f"etcd://{hosts}/{urllib.parse.quote(prefix)}?{urllib.parse.urlencode(query)}")


@FUZZ
@given(raw=st.text(max_size=40))
def test_raw_etcd_text(raw: str) -> None:
    try:
        parsed = urllib.parse.urlsplit(f"etcd://{raw}")
        parsed.port  # noqa: B018
        host = parsed.hostname
    except ValueError:
        host = None
    if host not in (None, "127.0.0.1") or not raw.strip(" ,"):  # only URLs that reach no server
        return
    try_connect(f"etcd://{raw}", connect_timeout=SHORT)


@FUZZ
@given(query=options_of(KUBE_OPTIONS.names()))
def test_kube_urls(kubeconfig: Path, query: dict[str, str]) -> None:
    query.update(kubeconfig=str(kubeconfig), ready_timeout="0.2", pod_name="p", pod_uid="u", connect_timeout=SHORT)
    try_connect(f"kube://?{urllib.parse.urlencode(query)}")


@FUZZ
@given(name=st.text(max_size=10), query=options_of(MEMORY_OPTIONS.names()))
def test_memory_urls(name: str, query: dict[str, str]) -> None:
    try_connect(f"memory://{urllib.parse.quote(name)}?{urllib.parse.urlencode(query)}")


@FUZZ
@given(
    url=st.one_of(st.text(max_size=30), st.sampled_from(["file://", "memory://", "kube://", "etcd://", "x://"])),
    keywords=st.dictionaries(
        st.sampled_from(["ttl", "instance_id", "observer", "logical_instance_id", "logical_instance_key"]),
        st.one_of(junk, st.none(), st.integers(min_value=-1, max_value=2**64)),
    ),
)
def test_arbitrary_text_and_keywords(sandbox: Path, url: str, keywords: dict[str, Any]) -> None:
    try:
        scheme = urllib.parse.urlsplit(url).scheme
    except ValueError:
        scheme = ""
    if scheme in ("etcd", "kube", "kubernetes"):
        return  # the schemes that reach a server have their own tests above
    if scheme == "file":
        url = f"file://{sandbox}/kw"
    try_connect(url, **keywords)
