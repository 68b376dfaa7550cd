"""The client's lease: granted at start, kept alive by a named thread, re-granted when lost.

The lease id is the client's instance id, so a lost lease (expired during an outage) is
granted again with the SAME id and the client's records are written again; the instance id
never changes. ``status()`` tells what happened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from discovery_sync.errors import BackendUnavailable, DiscoveryError
from discovery_sync.periodic import PeriodicThread

from .gateway import EtcdGateway

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
        self._lock = threading.Lock()
        self._thread = PeriodicThread(
            "discovery-sync-etcd-keepalive", max(ttl / 3, 0.5), self._keep_alive, on_error=self._error
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _keep_alive(self) -> None:
        remaining = self.gateway.lease_keepalive(self.lease_id)
        self.connected = True
        if remaining > 0:
            self.last_keepalive = time.monotonic()
            return
        with self._lock:
            self.losses += 1
            log.warning(
                "etcd lease %x expired (the server was unreachable for longer than its %d s TTL); "
                "granting it again and re-registering this client's records",
                self.lease_id,
                self.ttl,
            )
            self.gateway.lease_grant(self.ttl, self.lease_id)
            self._rewrite()
            self.last_keepalive = time.monotonic()

    def _error(self, exc: BaseException) -> bool:
        self.connected = False
        log.warning("etcd keep-alive of lease %x failed: %s", self.lease_id, exc)
        return isinstance(exc, DiscoveryError | BackendUnavailable | OSError)

    def status(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "ttl": self.ttl,
            "lease_losses": self.losses,
            "connected": self.connected,
            "seconds_since_keepalive": round(time.monotonic() - self.last_keepalive, 3),
        }
