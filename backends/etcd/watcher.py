"""One watch on etcd: a range at revision R, then a watch stream from R+1, in a named thread.

Compaction, a cancelled, ended or malformed stream, or a server that went away make the watcher
range again and reconcile (the missed changes, then a Resync) before it watches on, after a
:class:`~discovery_sync.threads.Backoff` delay (250 ms doubling to 5 s while the server stays
unreachable or answers nonsense; back to 250 ms once a watch is created). A stream that is only
quiet for the read timeout is re-opened from the last revision without a resync. Any other
exception ends the thread and fails the feed (the consumer gets ``WatchFailed``).
"""

from __future__ import annotations

import itertools
import logging
import threading

import requests

from discovery_sync.errors import BackendUnavailable
from discovery_sync.model import DiscoveryInstance
from discovery_sync.reconcile import apply
from discovery_sync.threads import Backoff, log_retry, start_thread
from discovery_sync.watch import WatchFeed

from .layout import KeyLayout
from .wire import (
    EtcdGateway,
    WatchEvent,
    WatchResult,
    abort_stream,
    failure_cause,
    parse_value,
    parse_watch_result,
)

log = logging.getLogger("discovery_sync.backends.etcd")

BACKOFF_START, BACKOFF_MAX = 0.25, 5.0
_numbers = itertools.count(1)


class NeedsResync(Exception):
    """The stream cannot continue from our revision (compacted, cancelled or ended)."""


class FeedWatcher:
    def __init__(self, gateway: EtcdGateway, layout: KeyLayout, feed: WatchFeed, *, read_timeout: float = 60.0):
        self.gateway = gateway
        self.layout = layout
        self.feed = feed
        self.read_timeout = read_timeout
        self.key, self.range_end = layout.query_range(feed.query)
        self.revision = 0
        self.known: dict[bytes, DiscoveryInstance] = {}
        self._stop = threading.Event()
        self._backoff = Backoff(BACKOFF_START, BACKOFF_MAX)
        self._session = gateway.stream_session()
        self._response: requests.Response | None = None
        self._thread = start_thread(f"discovery-sync-etcd-watch-{next(_numbers)}", self._run, feed.fail, start=False)

    def start(self) -> None:
        """Range now (so the watch is established when this returns), then stream in the thread.

        When the range fails nothing is left open and the feed is not touched."""
        try:
            snapshot, self.revision = self._range()
        except BaseException:
            self._session.close()
            raise
        self.known = snapshot
        self.feed.add_close_callback(self.stop)
        self.feed.start(snapshot.values())
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and release the stream; returns once the thread has ended (at most 5 s)."""
        self._stop.set()
        response = self._response
        if response is not None:
            abort_stream(response)  # unblocks the stream read
        self._session.close()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)
        self._response = None

    # -- reading ----------------------------------------------------------------------------------
    def _range(self) -> tuple[dict[bytes, DiscoveryInstance], int]:
        kvs, revision = self.gateway.range(self.key, self.range_end)
        snapshot = {}
        for kv in kvs:
            instance = parse_value(kv) or self.known.get(kv.key)
            if instance is not None and self.feed.query.matches(instance):
                snapshot[kv.key] = instance
        return snapshot, revision

    def _run(self) -> None:
        """Stream until stopped; exceptions other than those handled here end it through ``feed.fail``."""
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
                if self._stop.is_set():
                    return
                resync = True
                self._pause(exc)

    def _pause(self, exc: Exception) -> None:
        """Wait before a resync, so that a server failing every stream at once is not hammered."""
        delay = self._backoff.next()
        if isinstance(exc, NeedsResync):
            log.info("watch on %s must resynchronise (%s); in %.2f s", self.feed.query, exc, delay)
        else:
            if isinstance(exc, requests.RequestException):  # logged in words, not as urllib3's reprs
                exc = BackendUnavailable(f"cannot reach etcd: {failure_cause(exc)}")
            log_retry(f"watch on {self.feed.query}", exc, delay)
        self._stop.wait(delay)

    def _resync(self) -> None:
        snapshot, self.revision = self._range()
        self.feed.reconcile(snapshot.values(), force_resync=True)
        view = {i.id(): i for i in self.feed.snapshot()}
        self.known = {key: view.get(instance.id(), instance) for key, instance in snapshot.items()}

    def _stream(self) -> None:
        stream = self.gateway.watch(
            self._session, self.key, self.range_end, self.revision + 1, self.read_timeout, self._opened
        )
        for raw in stream:
            if self._stop.is_set():
                return
            self._handle(parse_watch_result(raw))
        if not self._stop.is_set():
            raise NeedsResync("the server ended the watch stream")

    def _handle(self, result: WatchResult) -> None:
        if result.compact_revision:
            raise NeedsResync(f"revision {self.revision + 1} was compacted")
        if result.canceled:
            raise NeedsResync(result.cancel_reason or "the server cancelled the watch")
        if result.created:
            self._backoff.reset()  # the server accepted the watch: a later failure starts the backoff again
        for event in result.events:
            self._apply(event)
        if not result.events and not result.created and result.revision:
            self.revision = max(self.revision, result.revision)  # a progress notification

    def _opened(self, response: requests.Response) -> None:
        self._response = response
        if self._stop.is_set():
            abort_stream(response)

    def _apply(self, event: WatchEvent) -> None:
        kv = event.kv
        self.revision = max(self.revision, kv.mod_revision)
        if event.deleted:
            old = self.known.pop(kv.key, None)
            if old is not None:
                self.feed.removed(old.id())
            return
        new = parse_value(kv)
        if new is None or not self.feed.query.matches(new):
            return
        valid, published, _ = apply(self.known.get(kv.key), new)
        self.known[kv.key] = valid
        if published is not None:
            self.feed.publish(published, valid)
