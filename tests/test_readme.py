"""Every python block of README.md runs as written (issue 38): each is saved as a program of its own
and run in a process of its own, with the environment and inputs its comments name (a file store
in a fresh directory, the address in ``argv[1]``, a line on stdin to stop). What each prints and
how it ends is checked. tests/test_typing.py type-checks the same blocks."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.source_tree import REPO

TIMEOUT = 60.0  # seconds a block may take on a loaded machine (each takes about one)


def python_blocks() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", readme, re.DOTALL | re.MULTILINE)


def block(marker: str) -> str:
    """The one python block of README.md that holds ``marker``."""
    found = [text for text in python_blocks() if marker in text]
    assert len(found) == 1, f"{len(found)} README blocks hold {marker!r}"
    return found[0]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[object]:
    """Start a README block as a program (``env``: more environment; a file store in tmp_path)."""
    started: list[subprocess.Popen[str]] = []

    def start(text: str, *args: str, **env: str) -> subprocess.Popen[str]:
        program = tmp_path / f"block{len(started)}.py"
        program.write_text(text, encoding="utf-8")
        environment = {**os.environ, "PYTHONPATH": str(REPO), "DYN_DISCOVERY_BACKEND": "file"}
        environment["DYN_FILE_KV"] = str(tmp_path / "store")
        process = subprocess.Popen(
            [sys.executable, str(program), *args],
            env={**environment, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_every_python_block_is_checked_here():
    markers = ["tempfile.TemporaryDirectory", "client.live_view(", "failover_lock(", "add_state_listener("]
    assert len(python_blocks()) == len(markers)
    for marker in markers:
        block(marker)


def test_the_first_example_prints_what_its_comments_say(run):
    done = run(block("tempfile.TemporaryDirectory"))
    out, err = done.communicate(timeout=TIMEOUT)
    assert done.returncode == 0, err
    assert out.splitlines() == ["backend generate 127.0.0.1:9000", "True"]


def test_the_live_view_example_ends_by_itself_and_shows_its_own_worker(run):
    """Issue 38: it waited 30 s for two workers nobody started, then raised WatchTimeout."""
    done = run(block("client.live_view("))
    out, err = done.communicate(timeout=TIMEOUT)
    assert done.returncode == 0, err
    assert out.startswith("{'max_num_seqs': 8} ")


def test_the_failover_example_moves_the_worker_to_the_standby_when_the_primary_is_killed(run):
    cohort = {"DYN_DISCOVERY_LOGICAL_INSTANCE_KEY": "ns/pod-0/decode"}
    text = block("failover_lock(")
    primary = run(text, "10.0.0.1:9000", **cohort)
    assert primary.stdout is not None and primary.stdout.readline() == "serving\n"
    standby = run(text, "10.0.0.2:9000", **cohort)
    primary.send_signal(signal.SIGKILL)  # the kernel frees its lock at once
    assert standby.stdout is not None and standby.stdout.readline() == "serving\n"
    _, err = standby.communicate("\n", timeout=TIMEOUT)  # told to stop: it shuts down
    assert standby.returncode == 0, err


def test_the_state_listener_example_exits_once_a_successor_replaces_it(run, tmp_path):
    cohort = {"DYN_DISCOVERY_LOGICAL_INSTANCE_KEY": "ns/pod-0/decode"}
    text = block("add_state_listener(")
    with ds.connect(f"file://{tmp_path / 'store'}") as reader, reader.list_and_watch(ds.Query.endpoints()) as watch:
        assert watch.get(timeout=TIMEOUT) == ds.Resync(())
        first = run(text, "10.0.0.1:9000", **cohort)
        assert _address(watch.get(timeout=TIMEOUT)) == "10.0.0.1:9000"  # registered
        second = run(text, "10.0.0.2:9000", **cohort)  # the same logical id: it takes the record over
        assert _address(watch.get(timeout=TIMEOUT)) == "10.0.0.2:9000"
    _, err = first.communicate(timeout=TIMEOUT)
    assert first.returncode == 1, err
    assert "discovery: lost (replaced by" in err
    second.send_signal(signal.SIGTERM)


def _address(event: object) -> str:
    assert isinstance(event, ds.Added), event
    return str(event.instance.transport.value)


def _commands() -> set[str]:
    from discovery_sync.tools.cli import build_parser

    parser = build_parser()
    choices = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(choices)


def test_design_and_readme_name_every_command_of_the_cli():
    """Issue 38: docs/design.md §1 named seven of the ten commands (not get, top, manifests)."""
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    layout = design[design.index("## 1. Layout") : design.index("## 2.")]
    listed = re.search(r"the `discovery-sync` CLI \(([^)]*)\)", layout)
    assert listed is not None
    named = {word.strip().split()[0] for word in listed.group(1).replace("\n", " ").split(",")}
    assert named == _commands()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert all(f"`{command}" in readme for command in _commands())


def test_the_readme_states_the_rules_it_used_to_leave_to_docstrings():
    """Issue 38: a LoRA card beside its base model (the same source_path) was told only in a
    docstring; ids were said to be 16 hex digits where tables show them without leading zeros."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "`source_path`" in readme and "LoRA card" in readme
    assert "16 hex digits or" not in readme and "without leading zeros" in readme
