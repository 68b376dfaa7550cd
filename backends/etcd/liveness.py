"""Liveness of the etcd backend: the client's lease, kept alive by a named thread and re-granted when lost.

A :class:`LeaseKeeper` grants the lease when it is made; the client makes one on the first need
of a lease (never at connect, never for a read-only client).

The lease id is the client's instance id, so a lost lease (expired during an outage, or while
the server answered nonsense) is granted again with the SAME id and the client's records are
written again; the instance id never changes. The keep-alive thread retries every interval
whatever goes wrong; ``status()`` tells what happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from discovery_sync.periodic import PeriodicThread
from discovery_sync.threads import log_retry

from .wire import EtcdGateway

log = logging.getLogger("discovery_sync.backends.etcd")


class LeaseKeeper:
    def __init__(self, gateway: EtcdGateway, ttl: int, rewrite: Callable[[], None], lease_id: int = 0) -> None:
        self.gateway = gateway
        self.ttl = ttl
        self._rewrite = rewrite
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

    def _keep_alive(self) -> None:
        """Renew the lease; once it is lost, grant it again and rewrite the records, until both succeed.

        ``connected`` becomes True only when the lease is renewed and every record is back.
        """
        if self.gateway.lease_keepalive(self.lease_id) <= 0:
            if not self._rewrite_pending:
                self.losses += 1
                log.warning(
                    "etcd lease %x expired (the server was unusable for longer than its %d s TTL); "
                    "granting it again and re-registering this client's records",
                    self.lease_id,
                    self.ttl,
                )
            self._rewrite_pending = True
            self.gateway.lease_grant(self.ttl, self.lease_id)
        if self._rewrite_pending:
            # also after a grant whose reply was lost: the keep-alive above then found the lease alive
            self._rewrite()
            self._rewrite_pending = False
        self.last_keepalive = time.monotonic()
        self.connected = True

    def _error(self, exc: BaseException) -> bool:
        """Retry after the interval whatever the job raised; only KeyboardInterrupt and the like end the thread."""
        self.connected = False
        if not isinstance(exc, Exception):
            return False
        log_retry(f"keep-alive of etcd lease {self.lease_id:x}", exc, self._thread.interval)
        return True

    def _crashed(self, exc: BaseException) -> None:
        self.connected = False

    def status(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "ttl": self.ttl,
            "lease_losses": self.losses,
            "connected": self.connected,
            "seconds_since_keepalive": round(time.monotonic() - self.last_keepalive, 3),
        }
