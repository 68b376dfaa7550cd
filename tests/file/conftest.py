from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


class LogCatcher(logging.Handler):
    """Collects warnings of the file backend; ``wait_for`` blocks until a matching one arrives."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._changed:
            self.messages.append(record.getMessage())
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 10.0) -> list[str]:
        with self._changed:
            self._changed.wait_for(lambda: any(text in m for m in self.messages), timeout)
            return [m for m in self.messages if text in m]

    def count(self, text: str, at_least: int, timeout: float = 10.0) -> int:
        """How many warnings hold ``text``, once at least ``at_least`` do (or at the timeout)."""
        with self._changed:
            self._changed.wait_for(lambda: sum(text in m for m in self.messages) >= at_least, timeout)
            return sum(text in m for m in self.messages)

    def matching(self, text: str) -> list[str]:
        with self._changed:
            return [m for m in self.messages if text in m]


@pytest.fixture
def warnings() -> Iterator[LogCatcher]:
    catcher = LogCatcher()
    logger = logging.getLogger("discovery_sync.backends.file")
    logger.addHandler(catcher)
    try:
        yield catcher
    finally:
        logger.removeHandler(catcher)
