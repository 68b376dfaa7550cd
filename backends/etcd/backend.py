"""The etcd backend: records under one key prefix, each attached to the client's lease."""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

from discovery_sync.discovery import Discovery
from discovery_sync.errors import BackendUnavailable, DiscoveryError
from discovery_sync.identity import DiscoveryInstanceId
from discovery_sync.model import DiscoveryInstance, Model, instance_to_json
from discovery_sync.queries import Query
from discovery_sync.watch import WatchFeed

from .layout import KeyLayout
from .liveness import LeaseKeeper
from .options import OPTIONS
from .watcher import FeedWatcher
from .wire import EtcdGateway, parse_value

log = logging.getLogger("discovery_sync.backends.etcd")


class EtcdDiscovery(Discovery):
    """Discovery on etcd v3 (JSON gateway). The instance id is the client's lease id.

    :param endpoints: ``http(s)://host:port`` URLs, tried in order with fail-over.
    :param prefix: a root key prefix (default none: the reference's keys exactly).
    :param ttl: the lease TTL in seconds.
    :param startup_timeout: how long to keep trying to reach etcd at start (backoff 1 s to 30 s).
    """

    backend_name = "etcd"

    def __init__(
        self,
        endpoints: list[str],
        *,
        prefix: str = "",
        ttl: int = 10,
        username: str | None = None,
        password: str | None = None,
        verify: str | bool = True,
        cert: tuple[str, str] | None = None,
        startup_timeout: float = 120.0,
        watch_read_timeout: float = 60.0,
    ) -> None:
        super().__init__()
        ttl, startup_timeout = OPTIONS.check("ttl", ttl), OPTIONS.check("startup_timeout", startup_timeout)
        watch_read_timeout, prefix = (
            OPTIONS.check("watch_read_timeout", watch_read_timeout),
            OPTIONS.check("prefix", prefix),
        )
        self.gateway = EtcdGateway(endpoints, username=username, password=password, verify=verify, cert=cert)
        self.keys = KeyLayout(prefix)
        self.watch_read_timeout = watch_read_timeout
        self._create_revisions: dict[DiscoveryInstanceId, int] = {}
        self._watchers: set[FeedWatcher] = set()  # the open watches: a closed one is removed at once
        self._watchers_lock = threading.Lock()
        try:
            self._lease = self._grant_with_retries(ttl, startup_timeout)
        except BaseException:
            self.gateway.session.close()
            raise
        self._lease.start()

    def _grant_with_retries(self, ttl: int, timeout: float) -> LeaseKeeper:
        deadline, delay = time.monotonic() + timeout, 1.0
        while True:
            try:
                return LeaseKeeper(self.gateway, ttl, self._rewrite_owned)
            except BackendUnavailable as exc:
                if time.monotonic() + delay > deadline:
                    raise BackendUnavailable(f"{exc} (gave up after {timeout:g} s)") from exc
                log.warning("etcd is not reachable yet (%s); retrying in %.0f s", exc, delay)
                time.sleep(delay)  # start-up backoff: nothing to wait on but time
                delay = min(delay * 2, 30.0)

    @property
    def instance_id(self) -> int:
        return self._lease.lease_id

    def status(self) -> dict[str, Any]:
        """The lease: id, TTL, how often it was lost and re-granted, connectivity."""
        return self._lease.status()

    # -- storage primitives -------------------------------------------------------------------------
    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        kvs, _ = self.gateway.range(self.keys.key(instance_id))
        return parse_value(kvs[0]) if kvs else None

    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        created, existing = self.gateway.create(
            self.keys.key(instance.id()), instance_to_json(instance), self._lease.lease_id
        )
        if created:
            return None
        return parse_value(existing) if existing is not None else None

    def _replace(self, instance: DiscoveryInstance) -> None:
        self.gateway.put(self.keys.key(instance.id()), instance_to_json(instance), self._lease.lease_id)

    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        self.gateway.delete(self.keys.key(instance_id))

    def _list(self, query: Query) -> list[DiscoveryInstance]:
        kvs, _ = self.gateway.range(*self.keys.query_range(query))
        found = []
        for kv in kvs:
            instance = parse_value(kv)
            if instance is not None:
                found.append(instance)
                if isinstance(instance, Model):
                    self._create_revisions[instance.id()] = kv.create_revision
        return found

    def _loses_conflict(self, model: Model, conflict: Model) -> bool:
        # the earlier create revision wins: of two racing writers exactly one rolls back
        ours = self._create_revisions.get(model.id())
        theirs = self._create_revisions.get(conflict.id())
        return ours is None or theirs is None or theirs < ours

    def _open_feed(self, feed: WatchFeed) -> None:
        """Start a watcher for ``feed``; closing the feed stops it and forgets it (nothing stays behind)."""
        watcher = FeedWatcher(self.gateway, self.keys, feed, read_timeout=self.watch_read_timeout)
        watcher.start()
        with self._watchers_lock:
            closed = self._closed  # _close() takes its snapshot of the watchers under this lock
            if not closed:
                self._watchers.add(watcher)
        if closed:
            feed._close()
            self._check_open()
        feed.add_close_callback(partial(self._forget, watcher))

    def _forget(self, watcher: FeedWatcher) -> None:
        with self._watchers_lock:
            self._watchers.discard(watcher)

    def _probe(self) -> None:
        self.gateway.range(*self.keys.everything(), limit=1)

    def _rewrite_owned(self) -> None:
        with self._api_lock:
            for instance in self._owned.values():
                self.gateway.put(self.keys.key(instance.id()), instance_to_json(instance), self._lease.lease_id)

    def _close(self) -> None:
        self._lease.stop()
        with self._watchers_lock:
            watchers, self._watchers = self._watchers, set()
        for watcher in watchers:
            watcher.feed._close()
        try:
            self.gateway.lease_revoke(self._lease.lease_id)
        except DiscoveryError as exc:
            log.warning("could not revoke lease %x (its records expire with it): %s", self._lease.lease_id, exc)
        self.gateway.session.close()
