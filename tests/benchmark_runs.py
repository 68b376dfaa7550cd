"""Run a benchmark of ``benchmarks/`` as a user would: from the repository root, as a module."""

from __future__ import annotations

import os
import subprocess
import sys

from testrigs.source_tree import REPO


def run_benchmark(module: str, *options: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> *options``, finished: its exit code, stdout (the JSON report)
    and stderr (tables, errors) as text."""
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *options],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
