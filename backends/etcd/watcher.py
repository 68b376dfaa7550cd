"""Watches on etcd: one watch stream per bucket and client, fanned out to every watch of that bucket.

A :class:`BucketStream` ranges its whole bucket (``{root}{bucket}/``) at revision R, then watches it
from R+1 in a thread of its own (``discovery-sync-etcd-watch-{bucket}``). It keeps the bucket's records
(``known``, the last valid value of each key) and the revision it has applied everything up to, and
hands each change to the feeds whose query it concerns. So a client holds at most one stream, one
thread and one connection per bucket (four in all) however many watches it has.

A watch added to a running stream ranges its own key range at a new revision R first (so a record
written before ``list_and_watch`` was called is in its initial state), then, under the stream's lock:
when the stream has applied up to R or further, its initial state is the matching part of ``known``
and every later change of the stream is its; otherwise (the stream lags behind R) its initial state is
the range itself and the stream skips, for this watch only, the changes at revisions up to R, which the
range already holds. Either way nothing is missed and nothing is delivered twice.

Compaction, a cancelled, ended or malformed stream, or a server that went away make the stream range
its bucket again and reconcile every watch of it (the missed changes, then a Resync) before it watches
on, after a :class:`~discovery_sync.retry.Retry` delay (250 ms doubling to 5 s while the server
stays unreachable or answers nonsense; back to 250 ms once a watch is created). A watch that started
from a range newer than the resync's is already current and is left alone. A stream that is only quiet
for the read timeout is re-opened from the last revision without a resync. Any other exception ends
the thread and fails every watch of the stream (the consumers get ``WatchFailed``); the next watch of
that bucket gets a new stream.

A stream that fails because etcd cannot be reached (refused, reset, HTTP 5xx) tells the gateway
(:meth:`~.wire.EtcdGateway.failed`), so the client's connection state is SUSPENDED; the next watch
etcd creates (or the resync's range before it) tells it etcd answers again. Compaction, a
cancelled or ended stream, nonsense and a quiet stream are no connection fault: they change no
state.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable

import requests

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import BackendUnavailable
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.queries import Query
from discovery_sync.reconcile import apply
from discovery_sync.retry import Retry
from discovery_sync.threads import log_retry, start_thread
from discovery_sync.watch import WatchFeed

from .layout import KeyLayout
from .wire import (
    EtcdGateway,
    KeyValue,
    Unreachable,
    WatchEvent,
    WatchResult,
    abort_stream,
    failure_cause,
    parse_value,
    parse_watch_result,
    prefix_end,
)

log = logging.getLogger("discovery_sync.backends.etcd")

BACKOFF_START, BACKOFF_MAX = 0.25, 5.0


class NeedsResync(Exception):
    """The stream cannot continue from our revision (compacted, cancelled or ended)."""


class StreamEnded(Exception):
    """The stream's thread died (its watches failed): a new watch needs a new stream."""


class _Member:
    """One watch of a stream: its feed, its key range, and the revision its initial state holds
    (the stream's changes at or below it are not its)."""

    __slots__ = ("feed", "key", "range_end", "since")

    def __init__(self, feed: WatchFeed, key: bytes, range_end: bytes, since: int) -> None:
        self.feed, self.key, self.range_end, self.since = feed, key, range_end, since


class BucketStream:
    """The watch stream of one bucket, shared by every watch of that bucket on one client.

    ``users`` is the owner's count of the watches using it (kept under the owner's lock). Its
    thread waits between attempts through ``clock``."""

    def __init__(
        self,
        gateway: EtcdGateway,
        layout: KeyLayout,
        kind: RecordKind,
        *,
        read_timeout: float = 60.0,
        clock: Clock = SYSTEM,
        on_stream: Callable[[], None] = lambda: None,
    ) -> None:
        self.gateway = gateway
        self.layout = layout
        self.kind = kind
        self.read_timeout = read_timeout
        self.key = f"{layout.root}{kind.bucket}/".encode()
        self.range_end = prefix_end(self.key)
        self.label = str(Query(kind))  # "endpoints(all)": what the stream watches, in log lines
        self.users = 0
        self.revision = 0  # every change up to this revision is applied to known and handed out
        self.known: dict[bytes, DiscoveryInstance] = {}
        self.members: dict[WatchFeed, _Member] = {}
        self.failure: BaseException | None = None
        self._lock = threading.Lock()  # revision, known, members, failure
        self._start_lock = threading.Lock()  # held by the first watch while it ranges the bucket
        self._started = False
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the thread's wait between attempts (set by stop())
        self._retry = Retry(BACKOFF_START, BACKOFF_MAX, clock=clock, wake=self._wake)
        self._session = gateway.stream_session()
        self._response: requests.Response | None = None
        self._on_stream = on_stream
        #: the member the stream is open on (or being opened on), and when it was last heard from
        #: (``time.monotonic()``; None between attempts): what :mod:`.silence` confirms
        self.member: str | None = None
        self._heard: float | None = None
        self._created = False  # the member accepted the stream under way
        self._thread = start_thread(f"discovery-sync-etcd-watch-{kind.bucket}", self._run, self._crashed, start=False)

    # -- watches ----------------------------------------------------------------------------------
    def add(self, feed: WatchFeed) -> None:
        """Start ``feed`` with its initial state and hand it every later change; returns once it is.

        The first watch ranges the whole bucket and starts the thread. When a range fails
        (BackendUnavailable) the feed is not touched; StreamEnded when the thread has died."""
        with self._start_lock:
            if not self._started:
                self._start(feed)
                return
        key, range_end = self.layout.query_range(feed.query)
        kvs, revision = self.gateway.range(key, range_end)
        parsed = [(kv.key, parse_value(kv)) for kv in kvs]
        with self._lock:
            if self.failure is not None:
                raise StreamEnded(f"the watch stream of {self.label} ended: {self.failure!r}")
            if self.revision >= revision:  # the stream is at least as fresh as the range: its records
                since, snapshot = self.revision, _within(self.known, key, range_end)
            else:  # the stream lags behind: the range, and the stream's changes up to it are not this feed's
                found = ((k, instance or self.known.get(k)) for k, instance in parsed)
                since, snapshot = revision, [instance for _, instance in found if instance is not None]
            feed.start(snapshot)
            self.members[feed] = _Member(feed, key, range_end, since)

    def _start(self, feed: WatchFeed) -> None:
        kvs, revision = self.gateway.range(self.key, self.range_end)
        known = {}
        for kv in kvs:
            instance = parse_value(kv)
            if instance is not None:
                known[kv.key] = instance
        key, range_end = self.layout.query_range(feed.query)
        with self._lock:
            self.known, self.revision = known, revision
            feed.start(_within(known, key, range_end))
            self.members[feed] = _Member(feed, key, range_end, revision)
        self._started = True
        self._thread.start()

    def remove(self, feed: WatchFeed) -> None:
        with self._lock:
            self.members.pop(feed, None)

    def feeds(self) -> list[WatchFeed]:
        with self._lock:
            return list(self.members)

    def stop(self) -> None:
        """Stop the thread and release the stream; returns once the thread has ended (at most 5 s)."""
        self._stop.set()
        self._wake.set()
        response = self._response
        if response is not None:
            abort_stream(response)  # unblocks the stream read
        self._session.close()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)
        self._response = None

    def heard(self) -> float | None:
        """When the stream under way last delivered anything or was opened; None between attempts."""
        return self._heard

    def _crashed(self, exc: BaseException) -> None:
        """The thread died of an unexpected error: every watch of the stream fails with it."""
        with self._lock:
            self.failure = exc
            members = list(self.members.values())
        for member in members:
            member.feed.fail(exc)

    # -- reading ----------------------------------------------------------------------------------
    def _run(self) -> None:
        """Stream until stopped; exceptions other than those handled here end it through ``_crashed``."""
        resync = False
        while not self._stop.is_set():
            try:
                if resync:
                    self._resync()
                    resync = False
                self._stream()
            except requests.ReadTimeout:
                continue  # only quiet: watch again from the last revision
            except (NeedsResync, requests.RequestException, BackendUnavailable) as exc:
                self._heard = None
                if self._stop.is_set() or self.gateway.closing:  # closing: the client cut it
                    return
                if self._moved():
                    continue
                if isinstance(exc, requests.RequestException):
                    self.gateway.failed(f"the watch on {self.label} cannot reach etcd: {failure_cause(exc)}")
                elif isinstance(exc, Unreachable):  # already told, unless the stream itself got it
                    self.gateway.failed(f"the watch on {self.label} failed: {exc}")
                resync = True
                self._pause(exc)

    def _moved(self) -> bool:
        """The stream was cut because its member was set aside (it did not answer in time): it
        resumes on another member from the last revision it delivered, at once and without a
        resync (etcd's history holds every change since). Not a stream the member never accepted."""
        member, created = self.member, self._created
        if not created or member is None or not self.gateway.members.is_aside(member):
            return False
        log.info(
            "watch on %s moves from etcd member %s (set aside) and resumes after revision %d",
            self.label,
            member,
            self.revision,
        )
        return True

    def _pause(self, exc: Exception) -> None:
        """Wait before a resync, so that a server failing every stream at once is not hammered."""
        delay = self._retry.next_delay()
        if isinstance(exc, NeedsResync):
            log.info("watch on %s must resynchronise (%s); in %.2f s", self.label, exc, delay)
        else:
            if isinstance(exc, requests.RequestException):  # logged in words, not as urllib3's reprs
                exc = BackendUnavailable(f"cannot reach etcd: {failure_cause(exc)}")
            log_retry(f"watch on {self.label}", exc, delay)
        self._retry.wait(delay)  # stop() ends it; _run then sees _stop

    def _resync(self) -> None:
        """Range the bucket again and bring every watch of it to that state (then a Resync)."""
        kvs, revision = self.gateway.range(self.key, self.range_end)
        with self._lock:
            self.known, self.revision = _revalidated(self.known, kvs), revision
            keys = sorted(self.known)
            for member in self.members.values():
                if member.since <= revision:  # a watch that started from a newer range is current already
                    snapshot = _within(self.known, member.key, member.range_end, keys)
                    member.feed.reconcile(snapshot, force_resync=True)

    def _stream(self) -> None:
        self.member, self._created = self.gateway.members.preferred(), False
        self._heard = time.monotonic()
        self._on_stream()
        stream = self.gateway.watch(
            self._session, self.key, self.range_end, self.revision + 1, self.read_timeout, self._opened, self.member
        )
        try:
            for raw in stream:
                self._heard = time.monotonic()
                if self._stop.is_set():
                    return
                self._handle(parse_watch_result(raw))
        except (AttributeError, ValueError) as exc:
            # http.client reading a connection shut under it may fail so: a cut, when one was made
            if self._stop.is_set() or (self.member is not None and self.gateway.members.is_aside(self.member)):
                raise requests.ConnectionError(f"the stream's connection was cut ({exc!r})") from exc
            raise
        if not self._stop.is_set():
            raise NeedsResync("the server ended the watch stream")

    def _handle(self, result: WatchResult) -> None:
        if result.compact_revision:
            raise NeedsResync(f"revision {self.revision + 1} was compacted")
        if result.canceled:
            raise NeedsResync(result.cancel_reason or "the server cancelled the watch")
        if result.created:
            self._created = True
            self._retry.reset()  # the server accepted the watch: a later failure starts the backoff again
            self.gateway.answered()
        with self._lock:  # the changes of one message (one revision, or a transaction) are handed out as one
            for event in result.events:
                self._apply(event)
            if not result.events and not result.created and result.revision:
                self.revision = max(self.revision, result.revision)  # a progress notification

    def _opened(self, response: requests.Response) -> None:
        self._response = response
        if self._stop.is_set():
            abort_stream(response)

    def _apply(self, event: WatchEvent) -> None:
        """Apply one change to ``known`` and hand it to the watches it concerns (lock held)."""
        kv = event.kv
        revision = kv.mod_revision
        self.revision = max(self.revision, revision)
        if event.deleted:
            old = self.known.pop(kv.key, None)
            if old is not None:
                for member in self.members.values():
                    if revision > member.since and member.feed.query.matches(old):
                        member.feed.removed(old.id())
            return
        new = parse_value(kv)
        if new is None:
            return
        valid, published, _ = apply(self.known.get(kv.key), new)
        self.known[kv.key] = valid
        for member in self.members.values():
            if revision > member.since:
                for change in published:  # a feed whose query does not match ignores them
                    member.feed.publish(change, valid)


def _within(
    known: dict[bytes, DiscoveryInstance], key: bytes, range_end: bytes, keys: list[bytes] | None = None
) -> list[DiscoveryInstance]:
    """The records of ``known`` whose keys lie in [key, range_end) (``keys``: ``known``'s, sorted)."""
    if keys is None:
        return [instance for k, instance in known.items() if key <= k < range_end]
    found = []
    for index in range(bisect_left(keys, key), len(keys)):
        if keys[index] >= range_end:
            break
        found.append(known[keys[index]])
    return found


def _revalidated(known: dict[bytes, DiscoveryInstance], kvs: Iterable[KeyValue]) -> dict[bytes, DiscoveryInstance]:
    """The bucket as a new range shows it, each value judged against the last valid one (an
    unreadable value keeps it; a rejected model change keeps the old value), as the watches' views
    judge it when they reconcile."""
    fresh: dict[bytes, DiscoveryInstance] = {}
    for kv in kvs:
        old, new = known.get(kv.key), parse_value(kv)
        if new is None:
            if old is not None:
                fresh[kv.key] = old
            continue
        fresh[kv.key] = apply(old, new)[0]
    return fresh
