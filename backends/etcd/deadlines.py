"""How long one etcd member may take to answer before a request moves on: derived from the lease TTL.

A member that hangs (a stopped process, a partition, a stalled disk) accepts connections and
answers nothing. A client that waits on it for the whole ``request_timeout`` (10 s) lets its
lease (5 or 10 s) expire while two healthy members could have renewed it. So every attempt on
one member has a *patience*, and a member that exhausts it is set aside
(:mod:`.members`) while the request goes on to the next, all within ``request_timeout``:

- **keep-alive**: min(TTL/3, 1 s). The keep-alive runs every TTL/3; etcd renews a lease in
  milliseconds on a healthy member (the leader answers from memory), so a second without an
  answer means the member is in trouble. The lease then has at least a third of its TTL left to
  be renewed elsewhere, and the client is SUSPENDED at most TTL/3 + 1 s after its member hung.
- **writes** (transactions, puts, deletes, lease grants and revokes): max(TTL/3, 1 s). A write
  goes through the cluster's log and a disk sync; a slow disk may take a second.
- **reads** (ranges): max(TTL/3, 5 s). A range of a large bucket may be megabytes.
- **confirming** a member that a silent watch stream is on: 1 s (:mod:`.silence`).

Each is capped by ``request_timeout`` and floored at :data:`MIN_PATIENCE`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: seconds an attempt is given at least, however small the TTL or the time left
MIN_PATIENCE = 0.1
KEEPALIVE_CAP = 1.0
WRITE_FLOOR = 1.0
READ_FLOOR = 5.0
CONFIRM = 1.0


@dataclass(frozen=True, slots=True)
class Patience:
    """Seconds one member may take to answer each kind of request (see the module docstring)."""

    keepalive: float
    write: float
    read: float
    confirm: float

    @classmethod
    def for_ttl(cls, ttl: float, request_timeout: float) -> Patience:
        """The patience of a client whose lease TTL is ``ttl`` seconds (a read-only client: the
        TTL it was given), each capped by ``request_timeout``."""

        def bounded(seconds: float) -> float:
            return max(MIN_PATIENCE, min(seconds, request_timeout))

        third = ttl / 3
        return cls(
            keepalive=bounded(min(third, KEEPALIVE_CAP)),
            write=bounded(max(third, WRITE_FLOOR)),
            read=bounded(max(third, READ_FLOOR)),
            confirm=bounded(CONFIRM),
        )
