"""Liveness of the etcd backend: the client's lease, kept alive by a named thread and re-granted when lost.

A :class:`LeaseKeeper` grants the lease when it is made; the client makes one on the first need
of a lease (never at connect, never for a read-only client).

The lease id is the client's instance id, so a lost lease is granted again with the SAME id and
the client's records are written again; the instance id never changes. The keep-alive runs every
TTL/3, and its attempts on a member that does not answer are bounded by the keep-alive's patience
(:mod:`.deadlines`): the member is set aside and the next one asked at once, so a hung member
costs at most that patience, never the lease.

Connection state, as Curator defines it, judged by the client:

- **SUSPENDED** as soon as a keep-alive is overdue on a member (or fails on every member): the
  records are at risk, even if the next member renews the lease a moment later. A renewal counts
  only once a linearizable read of one key name (:meth:`~.wire.EtcdGateway.confirm_quorum`)
  confirms that a quorum stands behind it: a leader cut off from the others goes on renewing
  leases until it notices (one to two election timeouts), and the read is overdue at once.
- **LOST** once the lease's TTL has passed since the last keep-alive etcd acknowledged (counted
  from when that keep-alive was sent, with the TTL etcd gave back), even while etcd says nothing:
  no keep-alive waits on a member past that moment, and one due after it is LOST before it is
  sent (not a patience later); or at once when etcd says the lease is gone (expired or revoked:
  etcd deleted the records).
- **RECONNECTED** when the lease is renewed after failures (nothing was lost), or, after LOST,
  once the lease is renewed or granted again and every record written again (naming their keys).
  After a LOST judged by the client the records are written again even if the lease survived:
  the client cannot know what was deleted meanwhile.

While failing, the keep-alive retries every second at most, and no later than the moment the
lease would expire. Another request that etcd answers after a failure wakes it
(:meth:`LeaseKeeper.check_now`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from discovery_sync.connection import ConnectionStates
from discovery_sync.periodic import PeriodicThread
from discovery_sync.threads import log_retry

from .deadlines import MIN_PATIENCE
from .wire import EtcdGateway

log = logging.getLogger("discovery_sync.backends.etcd")

#: seconds between keep-alives while they fail, at most
RETRY_WHILE_FAILING = 1.0
#: seconds :meth:`LeaseKeeper.stop` waits for the keep-alive thread, at most
STOP_TIMEOUT = 5.0
#: seconds between two cuts of the connections while a shutdown waits for the keep-alive thread
RECUT_EVERY = 0.05
#: what ``rewrite`` gets: a call to make first, under the same lock (it grants the lease again when needed)
Prepare = Callable[[], None]


class LeaseKeeper:
    """The client's lease, granted when made, and its keep-alive thread (started by :meth:`start`).

    ``rewrite(prepare)`` calls ``prepare()`` then writes the client's records again under the
    lease, both under the lock that guards the client's records, and returns their store keys;
    ``connection`` is the client's connection state, which the keep-alive reports to (see the
    module docstring)."""

    def __init__(
        self,
        gateway: EtcdGateway,
        ttl: int,
        rewrite: Callable[[Prepare], list[str]],
        connection: ConnectionStates,
        lease_id: int = 0,
        *,
        quorum_key: bytes = b"\0",
    ) -> None:
        self.gateway = gateway
        self._quorum_key = quorum_key
        self.ttl = ttl
        self._rewrite = rewrite
        self._connection = connection
        self._keeper = 0  # the keep-alive thread's ident, once it has run
        sent = time.monotonic()
        self.lease_id, granted = gateway.lease_grant(ttl, lease_id)
        #: when (``time.monotonic()``) the lease expires unless renewed, as far as the client knows
        self.expires_at = sent + (granted or ttl)
        self.losses = 0
        self.keepalives = 0  # acknowledged by etcd
        self.keepalive_member: str | None = None  # the member that acknowledged the last one
        self.last_keepalive = time.monotonic()
        self.connected = True
        self._rewrite_pending = False  # the lease was lost and the records are not all written back yet
        self._loss_lock = threading.Lock()  # the keep-alive and a write refused for want of the lease both judge
        self._grant_lock = threading.Lock()  # one grant again at a time
        self.interval = max(ttl / 3, 0.5)
        self._thread = PeriodicThread(
            "discovery-sync-etcd-keepalive",
            self.interval,
            self._keep_alive,
            on_error=self._error,
            on_crash=self._crashed,
            next_interval=self._next_interval,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the keep-alive thread and wait for it (5 s at most). While the client shuts down
        (the gateway is closing), the gateway's connections are cut again every 50 ms until the
        thread has ended: a keep-alive that passed the gateway's closing check just before
        shutdown's cut connects after it, and would otherwise wait out its patience on a member
        that answers nothing before shutdown could go on (issue 38)."""
        if threading.get_ident() == self._keeper:
            self._thread.stop(0)  # from the keep-alive itself: it ends after this run
            return
        give_up = time.monotonic() + STOP_TIMEOUT
        self._thread.stop(0)
        while self._thread.is_alive() and time.monotonic() < give_up:
            if self.gateway.closing:
                self.gateway.members.connections.cut()
            self._thread.stop(RECUT_EVERY)

    def check_now(self) -> None:
        """Renew the lease now rather than at the end of the interval (etcd answers again after a
        failure: the keep-alive tells whether the lease survived); nothing when called from the
        keep-alive thread itself, whose run under way tells already."""
        if threading.get_ident() != self._keeper:
            self._thread.wake()

    def _keep_alive(self) -> None:
        """Renew the lease; once it is lost, grant it again when etcd dropped it and rewrite the
        records, until both succeed. ``connected`` becomes True only when the lease is renewed
        and every record is back."""
        self._keeper = threading.get_ident()
        sent = time.monotonic()
        self._judge_expiry(sent)  # a keep-alive due after the expiry: LOST now, not once it fails
        deadline = self._deadline(sent)
        remaining = self.gateway.lease_keepalive(self.lease_id, deadline=deadline, on_overdue=self._overdue)
        if remaining > 0:
            # a leader cut off from the others renews for a while: believe the renewal once a
            # quorum answers
            self.gateway.confirm_quorum(self._quorum_key, deadline=deadline, on_overdue=self._overdue)
            self.expires_at = sent + remaining
        else:
            self._lost(
                f"etcd lease {self.lease_id:x} expired or was revoked (etcd unusable for longer than its "
                f"{self.ttl} s TTL, or the lease revoked): etcd removed this client's records with it"
            )
        if self._rewrite_pending:
            rewritten = self._rewrite(self.ensure_granted)
            self._rewrite_pending = False
            self._connection.reconnect(
                f"etcd lease {self.lease_id:x} is held again and this client's {len(rewritten)} "
                "record(s) written again",
                rewritten,
            )
        else:
            self._connection.resume(f"etcd renews lease {self.lease_id:x} again: it outlived the failures")
        self.keepalives += 1
        self.keepalive_member = self.gateway.members.current
        self.last_keepalive = time.monotonic()
        self.connected = True

    def _deadline(self, sent: float) -> float:
        """Until when a keep-alive sent at ``sent`` tries the members: one patience each, within
        ``request_timeout``; while the lease is believed alive, not past its expiry (so that LOST
        is judged when the TTL has passed, not a patience later), but at least
        :data:`~.deadlines.MIN_PATIENCE`."""
        patience = self.gateway.patience.keepalive
        tries = sent + min(self.gateway.request_timeout, patience * len(self.gateway.endpoints))
        if self._rewrite_pending:
            return tries
        return min(tries, max(self.expires_at, sent + MIN_PATIENCE))

    def _judge_expiry(self, now: float) -> None:
        """LOST when the lease's TTL has passed by ``now`` since the last keep-alive etcd
        acknowledged (counted from when it was sent): etcd has removed the records, or will."""
        if now >= self.expires_at:
            silent = round(now - self.last_keepalive, 1)
            self._lost(
                f"no keep-alive of etcd lease {self.lease_id:x} was acknowledged for {silent:g} s, past its "
                f"{self.ttl} s TTL: etcd has removed this client's records, or will"
            )

    def ensure_granted(self) -> None:
        """Make sure etcd holds the lease: grant it again under its id when a keep-alive finds it
        gone (the keep-alive's rewrite, or a write etcd refused for want of it). Idempotent."""
        with self._grant_lock:
            sent = time.monotonic()
            remaining = self.gateway.lease_keepalive(self.lease_id)
            if remaining <= 0:
                _, remaining = self.gateway.lease_grant(self.ttl, self.lease_id)
            self.expires_at = sent + (remaining or self.ttl)

    def refused_for_want_of_lease(self, refusal: str) -> None:
        """A write was refused because etcd holds no such lease (it expired or was revoked before
        the keep-alive noticed): LOST, the lease granted again at once (so that the write can be
        retried), and the keep-alive woken to write every record again."""
        self._lost(f"etcd refused a write of this client ({refusal}): lease {self.lease_id:x} is gone")
        self.ensure_granted()
        self.check_now()

    def _overdue(self, member: str, cause: str) -> None:
        """A keep-alive got no answer in time from ``member`` (set aside; the next is asked now)."""
        self.connected = False
        self._connection.suspend(
            f"the keep-alive of etcd lease {self.lease_id:x} is overdue on {member} ({cause}); asking another member"
        )

    def _lost(self, reason: str) -> None:
        """LOST, once until the records are all back."""
        with self._loss_lock:
            if self._rewrite_pending:
                return
            self._rewrite_pending = True
            self.losses += 1
        log.warning("%s; this client's records will be written again once etcd renews or grants the lease", reason)
        self._connection.lose(reason)

    def _next_interval(self) -> float:
        """TTL/3 while the keep-alives succeed; while they fail, a second at most, and no later
        than the lease's expiry."""
        if self.connected:
            return self.interval
        retry = min(self.interval, RETRY_WHILE_FAILING)
        left = self.expires_at - time.monotonic()
        if not self._rewrite_pending and left > 0:
            retry = min(retry, left + 0.01)
        return max(retry, 0.05)

    def _error(self, exc: BaseException) -> bool:
        """Retry soon whatever the job raised (LOST once the TTL has passed since the last
        acknowledged keep-alive); only KeyboardInterrupt and the like end the thread. A keep-alive
        cut because the client shuts down is no fault: nothing is reported."""
        if self.gateway.closing and isinstance(exc, Exception):
            return True  # stop() ends the thread before its next run
        self.connected = False
        self._connection.suspend(f"the keep-alive of etcd lease {self.lease_id:x} failed: {exc}")
        self._judge_expiry(time.monotonic())
        if not isinstance(exc, Exception):
            return False
        log_retry(f"keep-alive of etcd lease {self.lease_id:x}", exc, self._next_interval())
        return True

    def _crashed(self, exc: BaseException) -> None:
        self.connected = False
        self._connection.suspend(f"the keep-alive of etcd lease {self.lease_id:x} ended: {exc!r}")

    def status(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "ttl": self.ttl,
            "lease_losses": self.losses,
            "connected": self.connected,
            "seconds_since_keepalive": round(time.monotonic() - self.last_keepalive, 3),
            "keepalives": self.keepalives,
            "keepalive_member": self.keepalive_member,
            **self.gateway.members.status(),
        }
