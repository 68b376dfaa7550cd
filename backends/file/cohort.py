"""Claims of failover cohorts in a file store (docs/design.md §4.1).

The member of a cohort (clients sharing one logical instance id) that writes last is its current
writer; it says so in ``root/.locks/cohort.{id:x}.claim``, a small JSON file naming a token of
its own (and, for people, its host and pid), written under the lock of the bucket it is about to
write and never in a bucket. Every later write, refresh or delete of a member checks the claim
under the same lock: a claim of another member means a successor took over, and the member is
fenced (:class:`~discovery_sync.cohort.CohortMembership`).

Only a regular file of this user holding a well-formed claim counts: anything else in its place
(another user's file, junk, a FIFO, a symlink) is no cohort member's claim; the current writer
writes its claim again over it. A claim outlives its writer on purpose: after a successor's
shutdown, its predecessor must still see that it was replaced.
"""

from __future__ import annotations

import os
import socket
import time

import orjson

from .wire import RecordTooLarge, read_regular, write_record

CLAIM_LIMIT = 4096  # bytes; a claim is about 100


def claim_name(logical_instance_id: int) -> str:
    return f"cohort.{logical_instance_id:x}.claim"


def claim_bytes(token: str) -> bytes:
    return orjson.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()})


class Claim:
    """A cohort member's claim as stored: its token and who wrote it."""

    def __init__(self, token: str, host: str, pid: int) -> None:
        self.token = token
        self.host = host
        self.pid = pid

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}"


def read_claim(dir_fd: int, name: str) -> Claim | None:
    """The cohort member's claim stored as ``name`` in the lock directory ``dir_fd``, or None
    when there is none (absent, not a regular file, another user's, or not a claim).
    Errors reading it (EACCES, EIO) are raised."""
    try:
        found = read_regular(dir_fd, name, CLAIM_LIMIT)
    except RecordTooLarge:
        return None
    if found is None:
        return None
    st, data = found
    if st.st_uid != os.geteuid():
        return None
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(fields, dict):
        return None
    token, host, pid = fields.get("token"), fields.get("host"), fields.get("pid")
    if not isinstance(token, str) or not token or not isinstance(host, str) or type(pid) is not int:
        return None
    return Claim(token, host, pid)


def write_claim(dir_fd: int, name: str, token: str) -> None:
    """Store this member's claim (atomically: a temp file renamed over the name)."""
    write_record(dir_fd, name, claim_bytes(token), create_only=False)
