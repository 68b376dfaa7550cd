"""Fixtures of the etcd backend tests (the etcd server itself is the session's, in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def prefix(etcd_prefix: str) -> str:
    """A key prefix of this test's own (tests/conftest.py's ``etcd_prefix``), so tests share one etcd safely."""
    return etcd_prefix
