"""What installing and importing discovery-sync costs, per extra, as JSON.

    .venv/bin/python -m benchmarks.footprint [--runs 15] [--extras none,etcd,kube,all]

Run from the repository root (it needs the network to reach the package index). Builds the wheel
from a copy of the checkout, then for each extra installs it into a new venv of this interpreter and
reports the size of everything installed (site-packages and the venv's scripts, pip and its
setuptools left out) and, in a new process each time, the median wall time of ``import
discovery_sync`` and of each backend the extra makes importable (the core already imported, so
the backend's own cost).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any

from testrigs.source_tree import checkout_copy

BACKENDS = {"none": ["file"], "etcd": ["file", "etcd"], "kube": ["file", "kube"], "all": ["file", "etcd", "kube"]}
NOT_COUNTED = ("pip", "setuptools", "_distutils_hack", "distutils-precedence.pth", "pkg_resources")

TIMER = """
import sys, time
start = time.perf_counter()
import discovery_sync
core = time.perf_counter()
if sys.argv[1]:
    __import__("discovery_sync.backends." + sys.argv[1])
end = time.perf_counter()
print((core - start) * 1000, (end - core) * 1000)
"""


def build_wheel(into: Path) -> Path:
    source = checkout_copy(into / "source")  # setuptools' build/ would keep modules removed since
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(into), str(source)],
        check=True,
        capture_output=True,
    )
    return next(into.glob("discovery_sync-*.whl"))


def installed_bytes(prefix: Path) -> int:
    site = next(prefix.glob("lib/python*/site-packages"))
    total = 0
    for entry in site.iterdir():
        if entry.name.startswith(NOT_COUNTED):
            continue
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def import_ms(python: Path, backend: str, runs: int) -> tuple[float, float]:
    core, own = [], []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for _ in range(runs):
        out = subprocess.run(
            [str(python), "-c", TIMER, backend], check=True, capture_output=True, text=True, cwd="/", env=env
        )
        first, second = out.stdout.split()
        core.append(float(first))
        own.append(float(second))
    return round(statistics.median(core), 1), round(statistics.median(own), 1)


def measure(wheel: Path, extra: str, runs: int, workdir: Path) -> dict[str, Any]:
    prefix = workdir / f"venv-{extra}"
    venv.create(prefix, with_pip=True)
    python = prefix / "bin" / "python"
    target = f"{wheel}[{extra}]" if extra != "none" else str(wheel)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", target], check=True, capture_output=True)
    result: dict[str, Any] = {"installed_mb": round(installed_bytes(prefix) / 1e6, 1)}
    result["import_discovery_sync_ms"], _ = import_ms(python, "", runs)
    for backend in BACKENDS[extra]:
        _, result[f"import_backend_{backend}_ms"] = import_ms(python, backend, runs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="new processes per import measured (median)")
    parser.add_argument("--extras", default="none,etcd,kube,all", help="comma list of none, etcd, kube, all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        wheel = build_wheel(workdir)
        report = {
            "python": sys.version.split()[0],
            "wheel": wheel.name,
            "extras": {extra: measure(wheel, extra, args.runs, workdir) for extra in args.extras.split(",")},
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
