"""The etcd backend: records under one key prefix, each attached to the client's lease (granted on first need)."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from discovery_sync.discovery import Discovery
from discovery_sync.errors import BackendUnavailable, DiscoveryError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.metrics import BackendFigures
from discovery_sync.model import DiscoveryInstance, Model, instance_to_json
from discovery_sync.options import DEFAULT_CONNECT_TIMEOUT
from discovery_sync.queries import Query
from discovery_sync.retry import Retry
from discovery_sync.watch import WatchFeed

from .deadlines import Patience
from .layout import KeyLayout
from .liveness import LeaseKeeper, Prepare
from .options import OPTIONS
from .silence import SilenceWatch
from .watcher import BucketStream, StreamEnded
from .wire import REQUEST_TIMEOUT, EtcdError, EtcdGateway, parse_value

log = logging.getLogger("discovery_sync.backends.etcd")

#: connecting retries after 0.5 s, doubling to 5 s: a worker waiting without limit for its etcd
#: sees it at most 5 s after it starts
CONNECT_BACKOFF = (0.5, 5.0)
#: seconds shutdown() gives the revocation of the lease, every member included
REVOKE_TIMEOUT = 1.0
#: etcd's refusal of a write attached to a lease it does not hold
LEASE_NOT_FOUND = "requested lease not found"

T = TypeVar("T")


def unreachable(failure: BackendUnavailable, elapsed: float, timeout: float | None) -> str:
    """The message of the BackendUnavailable that ends a connect: the last ``failure`` (it names
    each endpoint and why it failed), how long it was tried, and what to do."""
    limit = "none" if timeout is None else f"{timeout:g}"
    return (
        f"{failure} (tried for {round(elapsed, 1):g} s, connect_timeout={limit}): start etcd or check "
        "the address, or pass connect_timeout=none to wait for etcd without limit"
    )


class EtcdDiscovery(Discovery):
    """Discovery on etcd v3 (JSON gateway). The instance id is the client's lease id.

    Connecting checks only that etcd can be reached: it asks ``/v3/maintenance/status`` (which
    needs no permission; with a user and password it logs in first, so wrong credentials fail
    here), retrying with backoff (0.5 s doubling to 5 s, the last try at the deadline) until
    ``connect_timeout`` has passed, then raises BackendUnavailable naming the endpoints, why each
    failed and the timeout ("cannot reach etcd at URL: connection refused (tried for 10 s,
    connect_timeout=10): ..."). The timeout bounds the whole of it, every endpoint and retry: each
    request is cut to the time left (shared by the endpoints left to try, at least 0.1 s each).
    It grants no lease.

    The lease (and the thread keeping it alive) is granted on first need: the first write that
    needs it (``register``, ``lease_endpoint``, ``update_model_taints``) or the first read of
    ``instance_id``; once, however many threads ask at the same time. A failed grant raises
    BackendUnavailable and the next need tries again. Reading (``list``, ``get``,
    ``list_and_watch``, ``live_view``), ``status()``, ``diagnose()`` and ``check_connection()``
    grant none (before the grant they say "no lease yet"), and ``shutdown()`` of a client that
    never had a lease revokes nothing. After ``shutdown()`` no lease is granted (ClientClosed).

    A read-only client (``read_only=True``) never grants a lease: its ``instance_id`` is a random
    63-bit number that names no lease (no record carries it), and every write raises
    ValidationError.

    Members: the client talks to the member that answered last; a member that does not answer
    within a patience derived from the TTL (:mod:`.deadlines`: a keep-alive min(TTL/3, 1 s)),
    refuses or answers 5xx is set aside for a while and the request goes on to the next at once,
    and every request hung on a member set aside is cut and moves on too (:mod:`.members`). Watch
    streams on a member gone silent move to another (:mod:`.silence`).

    Connection state (:attr:`state`, see :mod:`.liveness`): SUSPENDED as soon as a keep-alive is
    overdue, or when no member answers a request or a watch stream; LOST once the TTL has passed
    since the last keep-alive etcd acknowledged (judged by the client, even while etcd says
    nothing) or when etcd says the lease is gone; RECONNECTED once the lease is renewed, or after
    LOST once it is held again and every record written back (naming their keys). A client
    without a lease is RECONNECTED by the next answer. Compaction changes nothing (the watches
    resynchronise). ``shutdown()`` returns within 1.5 s whatever etcd does (the records expire
    with the lease when it cannot be revoked).

    :param endpoints: ``http(s)://host:port`` URLs, tried in order with fail-over.
    :param prefix: a root key prefix (default none: the reference's keys exactly).
    :param ttl: the lease TTL in seconds.
    :param connect_timeout: seconds connecting keeps trying to reach etcd (default 10, as etcd
        clients dial); None: without limit (a worker that starts before its etcd).
    :param watch_read_timeout: seconds a watch stream may stay quiet before it is re-opened.
    :param request_timeout: seconds each request to etcd may take in all, every member tried
        (at least 0.1, default 10), connecting included, which may take 3.05 s of it at most; it
        also caps each member's patience and bounds connecting a watch stream (whose reads wait
        up to ``watch_read_timeout``).
    :param read_only: never write (see above).
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
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        watch_read_timeout: float = 60.0,
        request_timeout: float = REQUEST_TIMEOUT,
        read_only: bool = False,
    ) -> None:
        super().__init__(read_only=OPTIONS.check("read_only", read_only))
        ttl, connect_timeout = OPTIONS.check("ttl", ttl), OPTIONS.check("connect_timeout", connect_timeout)
        watch_read_timeout = OPTIONS.check("watch_read_timeout", watch_read_timeout)
        prefix = OPTIONS.check("prefix", prefix)
        request_timeout = OPTIONS.check("request_timeout", request_timeout)
        self.gateway = EtcdGateway(
            endpoints,
            username=username,
            password=password,
            verify=verify,
            cert=cert,
            request_timeout=request_timeout,
            patience=Patience.for_ttl(ttl, request_timeout),
        )
        self.keys = KeyLayout(prefix)
        self.ttl = ttl
        #: seconds connecting kept trying to reach etcd at most (None: without limit)
        self.connect_timeout: float | None = connect_timeout
        self.watch_read_timeout = watch_read_timeout
        self._create_revisions: dict[DiscoveryInstanceId, int] = {}
        # the watch streams in use, at most one live per bucket (and streams that died, until their
        # failed watches are closed); one is removed, and stopped, when its last watch closes
        self._watchers: set[BucketStream] = set()
        self._watchers_lock = threading.Lock()
        self._silence: SilenceWatch | None = None  # started with the first stream
        self._lease: LeaseKeeper | None = None  # granted on first need (never for a read-only client)
        self._lease_lock = threading.Lock()  # held while granting: racing threads get one lease
        self._unleased_id = (secrets.randbits(63) or 1) if self.read_only else 0
        try:
            self._wait_until_reachable(connect_timeout)
        except BaseException:
            self.gateway.session.close()
            raise
        # only now: the failed tries of connecting are not a connected client's faults
        self.gateway.report_to(self._connection.suspend, self._answered)

    def _answered(self) -> None:
        """etcd answers again after a request failed as Unreachable: a client without a lease is
        connected again; a client with one asks its keep-alive, which resumes when the lease
        survived and otherwise reconnects once the lease and the records are back (so that no
        RECONNECTED is shown before a LOST it did not know of yet)."""
        lease = self._lease
        if lease is None:
            self._connection.resume("etcd answers again")
        else:
            lease.check_now()

    def _wait_until_reachable(self, timeout: float | None) -> None:
        """Ask etcd for its status until it answers (see the class docstring); BackendUnavailable
        once ``timeout`` seconds have passed (None: never)."""
        retry = Retry(*CONNECT_BACKOFF, jitter=0, timeout=timeout)  # the last try at the deadline
        while True:
            try:
                self.gateway.server_status(retry.deadline)
                return
            except BackendUnavailable as exc:
                if retry.expired:
                    raise BackendUnavailable(unreachable(exc, retry.elapsed(), timeout)) from exc
                wait = min(retry.next_delay(), retry.remaining())
                log.warning("etcd is not reachable yet (%s); retrying in %.1f s", exc, wait)
                retry.wait(wait)

    @property
    def instance_id(self) -> int:
        """The lease id, granting the lease if this client has none yet (BackendUnavailable when that
        fails, ClientClosed after shutdown); a read-only client's random id, which names no lease."""
        if self.read_only:
            return self._unleased_id
        return self._leased().lease_id

    def _leased(self) -> LeaseKeeper:
        """The client's lease, granted (and its keep-alive thread started) on the first call."""
        lease = self._lease
        if lease is not None:
            return lease
        with self._lease_lock:
            if self._lease is None:
                self._check_writable("hold a lease")
                self._check_open()  # _close() takes the lease under this lock once _closed is set
                # the first key name of the client's range: one a user allowed to read it may read
                quorum_key = self.keys.everything()[0]
                lease = LeaseKeeper(
                    self.gateway, self.ttl, self._rewrite_owned, self._connection, quorum_key=quorum_key
                )
                lease.start()
                self._lease = lease
            return self._lease

    def status(self) -> dict[str, Any]:
        """:meth:`Discovery.status`, with the lease: id, TTL, how often it was lost and re-granted,
        connectivity; before the first need of a lease ``lease: "no lease yet"`` and ``lease_id:
        None`` (asking grants none)."""
        return {**super().status(), **self._lease_status()}

    def _lease_status(self) -> dict[str, Any]:
        lease = self._lease
        if lease is None:
            state = "none (read-only client)" if self.read_only else "no lease yet"
            return {"lease": state, "lease_id": None, "ttl": self.ttl}
        return {"lease": "granted", **lease.status()}

    def _reported_instance_id(self) -> str | None:
        # diagnosing grants no lease: before the first need, there is no id to show
        if not self.read_only and self._lease is None:
            return "no lease yet"
        return super()._reported_instance_id()

    def _diagnose(self, report: dict[str, Any]) -> None:
        report["lease"] = self._lease_status()

    # -- storage primitives -------------------------------------------------------------------------
    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        kvs, _ = self.gateway.range(self.keys.key(instance_id))
        return parse_value(kvs[0]) if kvs else None

    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        key, value = self.keys.key(instance.id()), instance_to_json(instance)
        created, existing = self._with_lease(lambda lease_id: self.gateway.create(key, value, lease_id))
        if created:
            return None
        return parse_value(existing) if existing is not None else None

    def _replace(self, instance: DiscoveryInstance) -> None:
        key, value = self.keys.key(instance.id()), instance_to_json(instance)
        self._with_lease(lambda lease_id: self.gateway.put(key, value, lease_id))

    def _with_lease(self, write: Callable[[int], T]) -> T:
        """``write(lease_id)``; when etcd refuses it for want of the lease (lost before the
        keep-alive noticed), the lease is granted again at once and the write made once more."""
        lease = self._leased()
        try:
            return write(lease.lease_id)
        except EtcdError as exc:
            if LEASE_NOT_FOUND not in str(exc):
                raise
            lease.refused_for_want_of_lease(str(exc))
            return write(lease.lease_id)

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
        """Add ``feed`` to its bucket's stream (started by the bucket's first watch); closing the
        feed removes it, and the last watch of a stream stops it (nothing stays behind)."""
        while True:
            stream = self._acquire(feed.query.kind)
            try:
                stream.add(feed)
            except StreamEnded:
                self._release(stream)
                continue  # its thread died: the next try gets a new stream
            except BaseException:
                self._release(stream)
                raise
            break
        feed.add_close_callback(partial(self._detach, stream, feed))
        with self._watchers_lock:
            closed = self._closed  # _close() may have closed the stream's watches before this one joined
        if closed:
            feed.close()
            self._check_open()

    def _acquire(self, kind: RecordKind) -> BucketStream:
        """The live stream of ``kind``'s bucket (a new one if there is none), counted as used once more."""
        with self._watchers_lock:
            self._check_open()  # _close() takes its snapshot of the streams under this lock
            stream = next((s for s in self._watchers if s.kind is kind and s.failure is None), None)
            if stream is None:
                if self._silence is None:
                    self._silence = SilenceWatch(self.gateway, self._streams)
                stream = BucketStream(
                    self.gateway, self.keys, kind, read_timeout=self.watch_read_timeout, on_stream=self._silence.wake
                )
                self._watchers.add(stream)
            stream.users += 1
        return stream

    def _streams(self) -> list[BucketStream]:
        with self._watchers_lock:
            return list(self._watchers)

    def _release(self, stream: BucketStream) -> None:
        """One use of ``stream`` less; the last stops it."""
        with self._watchers_lock:
            stream.users -= 1
            if stream.users:
                return
            self._watchers.discard(stream)
        stream.stop()

    def _detach(self, stream: BucketStream, feed: WatchFeed) -> None:
        stream.remove(feed)
        self._release(stream)

    def _backend_metrics(self) -> BackendFigures:
        """The keep-alive rounds of the lease (none before it is granted, nor for a read-only client)."""
        lease = self._lease
        if lease is None:
            return BackendFigures()
        return BackendFigures(heartbeat=lease._thread.durations, threads=[lease._thread])

    def _probe(self) -> None:
        self.gateway.range(*self.keys.everything(), limit=1)

    def _rewrite_owned(self, prepare: Prepare) -> list[str]:
        """``prepare()`` (which grants the lease again when etcd dropped it), then write the owned
        records again (the keep-alive thread, after LOST); their store keys. Under the client's
        lock, so that no record is written back after it was unregistered; a call of another thread
        that holds it while hung on a member is cut when the keep-alive sets that member aside."""
        lease_id = self._leased().lease_id
        written = []
        with self._api_lock:
            prepare()
            for instance in self._owned.values():
                key = self.keys.key(instance.id())
                self.gateway.put(key, instance_to_json(instance), lease_id)
                written.append(key.decode())
        return written

    def _interrupt(self) -> None:
        """Shutdown begins: every request under way is cut and later ones refuse (but the revoke),
        and the keep-alive ends, so that nothing shutdown waits for hangs on a member."""
        self.gateway.interrupt()
        lease = self._lease
        if lease is not None:
            lease.stop()

    def _remove_at_shutdown(self, owned: list[DiscoveryInstanceId]) -> None:
        """Nothing one by one: revoking the lease (:meth:`_close`) deletes every record attached to
        it at once, and when etcd does not answer they expire with it."""

    def _close(self) -> None:
        with self._lease_lock:  # _closed is set: no lease is granted after this
            lease = self._lease
        if lease is not None:
            lease.stop()
        with self._watchers_lock:
            streams = list(self._watchers)
        for stream in streams:
            for feed in stream.feeds():
                feed.close()  # the last one stops the stream
            stream.stop()  # also a stream whose first watch is still starting: it will not start
        if self._silence is not None:
            self._silence.stop()
        if lease is not None:
            try:
                self.gateway.lease_revoke(lease.lease_id, deadline=time.monotonic() + REVOKE_TIMEOUT)
            except DiscoveryError as exc:
                log.warning(
                    "could not revoke lease %x (its records expire with it within %d s): %s",
                    lease.lease_id,
                    self.ttl,
                    exc,
                )
        self.gateway.session.close()
