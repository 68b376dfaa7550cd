from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from discovery_sync.backends.file.backend import FileDiscovery
from discovery_sync.backends.file.directory import StoreDirectory

from discovery_sync.testing import ManualClock
from testrigs.helpers import LogCatcher, caught_logs
from tests.file.clocked import Steps
from tests.file.disks import disk  # noqa: F401  (a fixture of this package's tests)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def steps(tmp_path: Path) -> Steps:
    """A manual clock (``steps.clock``) that the test moves, step by step (:mod:`tests.file.clocked`)."""
    return Steps(ManualClock(), tmp_path / "clock-probe")


@pytest.fixture
def lock_dir(tmp_path: Path) -> Iterator[StoreDirectory]:
    """An open store lock directory (``.locks``) in a fresh directory."""
    directory = StoreDirectory(tmp_path, ".locks")
    directory.open(create=True)
    yield directory
    directory.close()


@pytest.fixture
def warnings() -> Iterator[LogCatcher]:
    with caught_logs("discovery_sync.backends.file") as catcher:
        yield catcher


@pytest.fixture
def deaf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every notification is lost: only rescans can see changes."""
    monkeypatch.setattr(FileDiscovery, "_notified", lambda self, kind, name: None)
