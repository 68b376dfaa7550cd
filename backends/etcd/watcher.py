"""One watch on etcd: a range at revision R, then a watch stream from R+1, in a named thread.

Compaction, a cancelled or failed stream, or a server that went away make the watcher range
again and reconcile (the missed changes, then a Resync) before it watches on; it backs off
(250 ms doubling to 5 s, with jitter) while the server is unreachable. A stream that is only
quiet for the read timeout is re-opened from the last revision without a resync.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import requests

from discovery_sync.errors import BackendUnavailable
from discovery_sync.model import DiscoveryInstance
from discovery_sync.reconcile import apply
from discovery_sync.watch import WatchFeed

from .gateway import EtcdGateway, KeyValue, abort_stream, parse_value
from .keys import KeyLayout

log = logging.getLogger("discovery_sync.backends.etcd")

BACKOFF_START, BACKOFF_MAX = 0.25, 5.0


class NeedsResync(Exception):
    """The stream cannot continue from our revision (compacted or cancelled)."""


class FeedWatcher:
    _count = 0

    def __init__(self, gateway: EtcdGateway, layout: KeyLayout, feed: WatchFeed, *, read_timeout: float = 60.0):
        self.gateway = gateway
        self.layout = layout
        self.feed = feed
        self.read_timeout = read_timeout
        self.key, self.range_end = layout.query_range(feed.query)
        self.revision = 0
        self.known: dict[bytes, DiscoveryInstance] = {}
        self._stop = threading.Event()
        self._session = gateway.stream_session()
        self._response: requests.Response | None = None
        FeedWatcher._count += 1
        self._thread = threading.Thread(
            target=self._run, name=f"discovery-sync-etcd-watch-{FeedWatcher._count}", daemon=True
        )
        feed.add_close_callback(self.stop)

    def start(self) -> None:
        """Range now (so the watch is established when this returns), then stream in the thread."""
        snapshot, self.revision = self._range()
        self.known = snapshot
        self.feed.start(snapshot.values())
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._response is not None:
            abort_stream(self._response)  # unblocks the stream read
        self._session.close()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)

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
        delay = BACKOFF_START
        resync = False
        while not self._stop.is_set():
            try:
                if resync:
                    self._resync()
                    resync = False
                self._stream()
                delay = BACKOFF_START
            except NeedsResync as exc:
                log.info("watch on %s must resynchronise: %s", self.feed.query, exc)
                resync = True
            except (requests.RequestException, BackendUnavailable) as exc:
                if self._stop.is_set():
                    return
                if isinstance(exc, requests.ReadTimeout):
                    continue  # only quiet: watch again from the last revision
                log.warning("watch on %s lost etcd (%s); retrying in %.2f s", self.feed.query, exc, delay)
                resync = True
                self._stop.wait(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, BACKOFF_MAX)
            except Exception as exc:  # a bug: the consumer must hear of it
                log.exception("watch on %s failed", self.feed.query)
                self.feed.fail(exc)
                return

    def _resync(self) -> None:
        snapshot, self.revision = self._range()
        self.feed.reconcile(snapshot.values(), force_resync=True)
        view = {i.id(): i for i in self.feed.snapshot()}
        self.known = {key: view.get(instance.id(), instance) for key, instance in snapshot.items()}

    def _stream(self) -> None:
        stream = self.gateway.watch(
            self._session, self.key, self.range_end, self.revision + 1, self.read_timeout, self._opened
        )
        for result in stream:
            if self._stop.is_set():
                return
            if result.get("compact_revision") and result.get("compact_revision") != "0":
                raise NeedsResync(f"revision {self.revision + 1} was compacted")
            if result.get("canceled"):
                raise NeedsResync(result.get("cancel_reason") or "the server cancelled the watch")
            for event in result.get("events", []):
                self._apply(event)
            header = result.get("header", {})
            if not result.get("events") and "revision" in header and not result.get("created"):
                self.revision = max(self.revision, int(header["revision"]))  # a progress notification
        if not self._stop.is_set():
            raise NeedsResync("the server ended the watch stream")

    def _opened(self, response: requests.Response) -> None:
        self._response = response
        if self._stop.is_set():
            abort_stream(response)

    def _apply(self, event: dict[str, Any]) -> None:
        kv = KeyValue.from_json(event["kv"])
        self.revision = max(self.revision, kv.mod_revision)
        if event.get("type") == "DELETE":
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
