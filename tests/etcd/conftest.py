"""Fixtures of the etcd backend tests (the etcd server itself is the session's, in tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own, named after its module, so tests share one etcd safely."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_etcd_")
    return f"{module}-{uuid.uuid4().hex}"
