"""The library type-checks under ``mypy --strict`` (configured in pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_library_and_its_backends_pass_mypy_strict():
    # backends/ is installed as discovery_sync.backends; mypy checks it as the package it finds on disk
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "discovery_sync", "backends"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
