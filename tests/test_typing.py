"""The library, and the test rigs beside it, type-check under ``mypy --strict`` (configured in
pyproject.toml's [tool.mypy]); so does the code users copy (the README's and docs' python
blocks) and what a user's type checker must infer (tests/typing_cases)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TYPING_CASES = REPO / "tests" / "typing_cases"
REJECTED = "rejected_typos.py"  # a typing case mypy must reject, on the lines its comments mark


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


def _python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown.read_text(encoding="utf-8"), re.DOTALL | re.MULTILINE)


def test_the_documented_examples_and_the_typing_cases_pass_mypy_strict(tmp_path):
    """One mypy run over every python block of README.md and docs/*.md (each a module of its
    own) and every file of tests/typing_cases: all pass, but for the lines of the rejected case
    that end with a "rejected:" comment, which fail with an error holding its text, and only those."""
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = 0
    for document in documents:
        for number, block in enumerate(_python_blocks(document), start=1):
            (tmp_path / f"{document.stem.lower()}_block{number}.py").write_text(block, encoding="utf-8")
            blocks += 1
    assert blocks >= 3  # the README's
    cases = sorted(TYPING_CASES.glob("*.py"))
    assert REJECTED in {case.name for case in cases}
    for case in cases:
        shutil.copy(case, tmp_path / case.name)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(tmp_path)],
        cwd=REPO,  # the library as checked out, and pyproject.toml's [tool.mypy]
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    errors = re.findall(r"^(.+?):(\d+): error: (.*)$", result.stdout, re.MULTILINE)
    assert errors, output  # at least the rejected case's
    assert {Path(path).name for path, _, _ in errors} == {REJECTED}, output
    rejected = (TYPING_CASES / REJECTED).read_text(encoding="utf-8").splitlines()
    expected = {
        number: marker.group(1)
        for number, line in enumerate(rejected, start=1)
        if (marker := re.search(r"# rejected: (.+)$", line))
    }
    assert len(expected) >= 2
    reported: dict[int, list[str]] = {}
    for _, line, message in errors:
        reported.setdefault(int(line), []).append(message)
    assert set(reported) == set(expected), output
    for number, wanted in expected.items():
        assert any(wanted in message for message in reported[number]), (number, wanted, output)
