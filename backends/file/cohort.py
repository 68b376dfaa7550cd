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

import logging
import os
import socket
from collections.abc import Callable

import orjson

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.cohort import CohortMembership
from discovery_sync.errors import ConflictError, ValidationError
from discovery_sync.identity import DiscoveryInstanceId

from .directory import StoreDirectory
from .names import record_from
from .oserrors import storage_error
from .own import OwnFiles
from .wire import RecordTooLarge, read_file, read_regular, stat_entry, write_record

log = logging.getLogger("discovery_sync.backends.file")

CLAIM_LIMIT = 4096  # bytes; a claim is about 100


def claim_name(logical_instance_id: int) -> str:
    return f"cohort.{logical_instance_id:x}.claim"


def claim_bytes(token: str, clock: Clock = SYSTEM) -> bytes:
    return orjson.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(), "since": clock.time()})


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


def write_claim(dir_fd: int, name: str, token: str, clock: Clock = SYSTEM) -> None:
    """Store this member's claim (atomically: a temp file renamed over the name)."""
    write_record(dir_fd, name, claim_bytes(token, clock), create_only=False)


class CohortFence:
    """What a cohort member checks before it writes, refreshes or deletes a record of its logical
    id (docs/design.md §4.1): whether it still is the cohort's current writer. ``fence(by, seen)``
    is the client's: it marks the member replaced (and tells the worker)."""

    def __init__(
        self,
        cohort: CohortMembership,
        lock_dir: StoreDirectory,
        own: OwnFiles,
        fence: Callable[[str, str], None],
        clock: Clock = SYSTEM,
    ) -> None:
        self.cohort = cohort
        self._clock = clock
        self._lock_dir = lock_dir
        self._own = own
        self._fence = fence
        self._name = claim_name(cohort.logical_instance_id)

    def claim(self) -> None:
        """Claim the logical id for this member (under the store lock, before it takes over): a
        claim of another member, once this one has claimed, fences it (InstanceReplaced)."""
        cohort = self.cohort
        path = self._lock_dir.path / self._name
        try:
            with self._lock_dir.use() as dir_fd:
                claim = read_claim(dir_fd, self._name)
                if claim is not None and claim.token == cohort.token:
                    return
                if claim is not None and cohort.claimed:
                    self._fence(claim.describe(), f"its claim {path}")
                    cohort.check()
                if claim is None and cohort.claimed:
                    log.warning("the cohort claim %s of this client is gone or unreadable; writing it again", path)
                write_claim(dir_fd, self._name, cohort.token, self._clock)
        except OSError as exc:
            raise storage_error(exc, f"cannot write the cohort claim {path}") from exc

    def still_claimed(self) -> bool:
        """Whether this member still is its logical id's current writer: no claim of another member
        stands in the store (a member that has written nothing yet is no writer to fence). A claim
        of another fences this client."""
        cohort = self.cohort
        if cohort.replaced is not None:
            return False
        if not cohort.claimed:
            return True
        with self._lock_dir.use() as dir_fd:
            claim = read_claim(dir_fd, self._name)
        if claim is not None and claim.token != cohort.token:
            self._fence(claim.describe(), f"its claim {self._lock_dir.path / self._name}")
            return False
        return True

    def still_current(self, instance_id: DiscoveryInstanceId) -> bool:
        """Under the store lock: whether this member may still write, refresh or delete
        ``instance_id``: it is still claimed, and the file under the name is the one this client
        wrote, or no successor's (another user's file, junk: a stranger's, repaired as ever). A
        valid record of this user written by another process is a successor's (a member that
        writes no claim, as the reference's): it fences this client."""
        if not self.still_claimed():
            return False
        own = self._own
        name = own.names(instance_id)
        directory = own.buckets[instance_id.kind]
        with directory.use() as dir_fd:
            st = stat_entry(dir_fd, name)
            if st is None or st.st_ino == own.written.get(instance_id) or st.st_uid != os.geteuid():
                return True
            try:
                raw = read_file(dir_fd, name, own.max_record_bytes)
                record_from(raw or b"", instance_id.kind, name)
            except (OSError, RecordTooLarge, ValidationError):
                return True  # not a record: nobody's takeover
        self._fence(f"a process of uid {st.st_uid}", f"its record {directory.path / name}")
        return False


class OutsideCohorts:
    """The guard of a client outside any failover cohort whose instance id a cohort claims as its
    logical id (a collision, issue 38: the client had taken the cohort's record over, the member
    ended fenced and readers saw the client's address). The cohort owns its logical id: such a
    client may register nothing under it (:meth:`check`), and once a member claimed it, the client
    writes nothing back (:meth:`allows`, False) and gives its records up (``on_taken(holder)``)."""

    def __init__(self, lock_dir: StoreDirectory, instance_id: int, on_taken: Callable[[str], None]) -> None:
        self._lock_dir = lock_dir
        self._instance_id = instance_id
        self._name = claim_name(instance_id)
        self._on_taken = on_taken

    def holder(self) -> str | None:
        """Who claims this client's instance id as a cohort's logical id (None: nobody)."""
        try:
            with self._lock_dir.use() as dir_fd:
                claim = read_claim(dir_fd, self._name)
        except OSError as exc:
            raise storage_error(exc, f"cannot read {self._lock_dir.path / self._name}") from exc
        return None if claim is None else f"{claim.describe()} (its claim {self._lock_dir.path / self._name})"

    def check(self) -> None:
        """ConflictError when a cohort claims this client's instance id."""
        holder = self.holder()
        if holder is not None:
            raise ConflictError(
                f"instance id {self._instance_id:x} is the logical id of a failover cohort, claimed by {holder}: "
                "a client outside the cohort may not write under it (it would replace the cohort's records); "
                f"connect with another instance_id, or join the cohort (logical_instance_id={self._instance_id})"
            )

    def allows(self) -> bool:
        """Whether this client may still write back its records (no cohort claims its id); when one
        does, ``on_taken(holder)`` is called and False returned."""
        holder = self.holder()
        if holder is None:
            return True
        self._on_taken(holder)
        return False
