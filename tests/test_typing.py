"""The library, and the test rigs beside it, type-check under ``mypy --strict`` (configured in
pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_library_its_backends_and_its_cli_pass_mypy_strict():
    # backends/ and tools/ are installed as discovery_sync.backends and .tools; mypy checks them as
    # the packages it finds on disk; testrigs/ (not installed) is checked in the same run
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "discovery_sync", "backends", "tools", "testrigs"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
