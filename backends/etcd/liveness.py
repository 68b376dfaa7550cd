"""Liveness of the etcd backend: the client's lease, kept alive by a named thread and re-granted when lost.

A :class:`LeaseKeeper` grants the lease when it is made; the client makes one on the first need
of a lease (never at connect, never for a read-only client).

The lease id is the client's instance id, so a lost lease (expired during an outage, or while
the server answered nonsense) is granted again with the SAME id and the client's records are
written again; the instance id never changes. The keep-alive thread retries every interval
whatever goes wrong; ``status()`` tells what happened.

The keep-alive reports to the client's connection state: a keep-alive that fails suspends it; one
that finds the lease gone makes it LOST (etcd removed the records attached to the lease), and once
the lease is granted again and every record written again it reconnects, naming their keys; one
that renews the lease after failures resumes it (nothing was lost). The keep-alive alone decides
between the last two, so another request that etcd answers after a failure only wakes it
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

from .wire import EtcdGateway

log = logging.getLogger("discovery_sync.backends.etcd")


class LeaseKeeper:
    """The client's lease, granted when made, and its keep-alive thread (started by :meth:`start`).

    ``rewrite()`` writes the client's records again under the lease and returns their store keys;
    ``connection`` is the client's connection state, which the keep-alive reports to (see the
    module docstring)."""

    def __init__(
        self,
        gateway: EtcdGateway,
        ttl: int,
        rewrite: Callable[[], list[str]],
        connection: ConnectionStates,
        lease_id: int = 0,
    ) -> None:
        self.gateway = gateway
        self.ttl = ttl
        self._rewrite = rewrite
        self._connection = connection
        self._keeper = 0  # the keep-alive thread's ident, once it has run
        self.lease_id, _ = gateway.lease_grant(ttl, lease_id)
        self.losses = 0
        self.last_keepalive = time.monotonic()
        self.connected = True
        self._rewrite_pending = False  # the lease was lost and the records are not all written back yet
        self._thread = PeriodicThread(
            "discovery-sync-etcd-keepalive",
            max(ttl / 3, 0.5),
            self._keep_alive,
            on_error=self._error,
            on_crash=self._crashed,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def check_now(self) -> None:
        """Renew the lease now rather than at the end of the interval (etcd answers again after a
        failure: the keep-alive tells whether the lease survived); nothing when called from the
        keep-alive thread itself, whose run under way tells already."""
        if threading.get_ident() != self._keeper:
            self._thread.wake()

    def _keep_alive(self) -> None:
        """Renew the lease; once it is lost, grant it again and rewrite the records, until both succeed.

        ``connected`` becomes True only when the lease is renewed and every record is back.
        """
        self._keeper = threading.get_ident()
        if self.gateway.lease_keepalive(self.lease_id) <= 0:
            if not self._rewrite_pending:
                self._lost()
            self._rewrite_pending = True
            self.gateway.lease_grant(self.ttl, self.lease_id)
        if self._rewrite_pending:
            # also after a grant whose reply was lost: the keep-alive above then found the lease alive
            rewritten = self._rewrite()
            self._rewrite_pending = False
            self._connection.reconnect(
                f"etcd lease {self.lease_id:x} was granted again and this client's {len(rewritten)} "
                "record(s) written again",
                rewritten,
            )
        else:
            self._connection.resume(f"etcd renews lease {self.lease_id:x} again: it outlived the failures")
        self.last_keepalive = time.monotonic()
        self.connected = True

    def _lost(self) -> None:
        self.losses += 1
        log.warning(
            "etcd lease %x expired (the server was unusable for longer than its %d s TTL); "
            "granting it again and re-registering this client's records",
            self.lease_id,
            self.ttl,
        )
        self._connection.lose(
            f"etcd lease {self.lease_id:x} expired or was revoked (etcd unusable for longer than its "
            f"{self.ttl} s TTL, or the lease revoked): etcd removed this client's records with it"
        )

    def _error(self, exc: BaseException) -> bool:
        """Retry after the interval whatever the job raised; only KeyboardInterrupt and the like end the thread."""
        self.connected = False
        self._connection.suspend(f"the keep-alive of etcd lease {self.lease_id:x} failed: {exc}")
        if not isinstance(exc, Exception):
            return False
        log_retry(f"keep-alive of etcd lease {self.lease_id:x}", exc, self._thread.interval)
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
        }
