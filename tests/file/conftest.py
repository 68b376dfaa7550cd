from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import LogCatcher


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def warnings() -> Iterator[LogCatcher]:
    catcher = LogCatcher()
    logger = logging.getLogger("discovery_sync.backends.file")
    logger.addHandler(catcher)
    try:
        yield catcher
    finally:
        logger.removeHandler(catcher)
