"""Records of kinds this version does not know, as readers meet them: skipped, said once.

Newer runtimes add kinds of records (Velo peers, for instance) beside the four this library
serves. Where one of them lands in a place a reader looks at — a record of an unknown ``type`` in
a bucket, under a key prefix or in a CR map this library knows — the reader skips it like any
record it cannot serve, but it is no fault of the store: it is not warned about. The first
record of each unknown type a backend meets in one place is said at INFO; every later one
(another record, the same one read again by a rescan, a list or a watch) at DEBUG. Buckets,
key prefixes and CR maps of unknown kinds are never looked at at all (docs/decisions.md).
"""

from __future__ import annotations

import logging
import threading

from .errors import UnknownRecordType

#: (logger, place, type) pairs said already; bounded: past it, everything is said at DEBUG
MAX_REMEMBERED = 1024

_said: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def skip_unknown(log: logging.Logger, place: str, key: str, exc: UnknownRecordType) -> None:
    """Note that the record ``key`` in ``place`` (a bucket, key prefix or CR map) is of the
    unknown type ``exc.type_name`` and is skipped: at INFO the first time this process's
    ``log`` meets that type in that place, at DEBUG after that. Never raises."""
    marker = (log.name, place, exc.type_name)
    with _lock:
        first = marker not in _said and len(_said) < MAX_REMEMBERED
        if first:
            _said.add(marker)
    if first:
        log.info(
            "skipping records of type %r in %s (first: %s): a kind of record this version of discovery-sync "
            "does not know (a newer runtime's); they are neither served nor reported again",
            exc.type_name,
            place,
            key,
        )
    else:
        log.debug("skipping %s in %s: a record of the unknown type %r", key, place, exc.type_name)
