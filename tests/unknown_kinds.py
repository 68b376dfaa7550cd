"""What the tests of kinds of records this version does not know share (issue 38, point 11): a
newer runtime's record, and the lines a backend logs at INFO and above."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import orjson

from testrigs.helpers import LogCatcher, caught_logs


def velo_type() -> str:
    """A record type nobody knows, of one test alone (what is said once is said once per process)."""
    return f"VeloPeer{secrets.token_hex(4)}"


def velo_peer(type_name: str = "VeloPeer", instance_id: int = 7) -> dict[str, Any]:
    """A record of a kind this version does not know, shaped as a newer runtime's would be."""
    return {
        "type": type_name,
        "namespace": "ns",
        "component": "backend",
        "instance_id": instance_id,
        "peer_info": {"instance_id": "5f1c39a6-0d4e-4d8e-9a55-6c1f7d7c2b10", "worker_address": [1, 2, 3]},
    }


def velo_record(type_name: str, instance_id: int = 7) -> bytes:
    """:func:`velo_peer` as stored bytes."""
    return orjson.dumps(velo_peer(type_name, instance_id))


@contextlib.contextmanager
def backend_logs(logger_name: str) -> Iterator[LogCatcher]:
    """Every line of the logger ``logger_name`` at INFO and above while the block runs."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with caught_logs(logger_name, logging.INFO) as catcher:
            yield catcher
    finally:
        logger.setLevel(level)
