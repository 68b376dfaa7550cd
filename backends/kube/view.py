"""Served view of the kube backend: the ready-gated records of every worker, fed by two watches.

This is what the reference runtime calls the discovery "daemon" (hence :class:`KubeDaemon`, the
thread name and "the daemon" below).

A named thread (``discovery-sync-kube-daemon``) applies what two :class:`ResourceStream` threads
report — the DynamoWorkerMetadata CRs of the namespace, and readiness (EndpointSlices labelled
``nvidia.com/dynamo-discovery-enabled=true`` in pod mode, Pods with that label in container mode)
— to one view, and pushes every change to the open watch feeds (classified by
:func:`discovery_sync.reconcile.diff`). A re-list after a 410 reconciles every feed and forces a
Resync. This pod's own records come from the backend (:meth:`KubeDaemon.set_local`), not from its
CR, so they are seen at once and whether or not the pod is ready.

States: ``Pending`` until both resources were listed and watched once, then ``Ready``; ``Stopped`` after
:meth:`stop`; ``Failed(reason)`` when the CRD or RBAC is missing at start, or on a bug — then
every feed fails with the cause, never silently.

With a :class:`~.keeper.ConnectionKeeper` the daemon reports what its streams and its read
barrier see of the API server (failing, answering again), its own failure, and the deletion of
this pod's own CR (a DELETED event, or a new list without it or with another uid). A
:class:`~.silence.SilenceWatch` confirms watches that have gone quiet (a real API server sends
no BOOKMARK on a quiet watch, and keeps its watches silent while it shuts down).

A permission the client lacks (``list`` or ``watch`` on either resource, answered 403) does not
look like an empty cluster: while a stream is refused, or the read barrier's list is, the
client is SUSPENDED with that reason (naming the verb, the resource and the namespace) and
every read (``list``, ``get`` of another worker's record, ``list_and_watch``) raises
BackendUnavailable with it at once, not after a timeout; the stream keeps retrying, and once
its watch opens the reads work again and the client is RECONNECTED. The state stays Pending when
the very first list is refused.

:meth:`sync` is the read barrier behind read-your-writes across pods (consistent reads, the
default): it asks each resource's collection resourceVersion with a LIST of one object (read
from etcd: the revision now) and returns at once when the watches have applied every change up
to it (comparing resourceVersions as integers, as etcd-backed servers issue them). A watch gets
no BOOKMARK when its resource is quiet, and Kubernetes 1.28 offers a client no progress notify,
so a resource whose watch has not reached that version is listed (names and versions only kept)
and the barrier waits until the view has applied at least that state; the cache then counts as
current at the list's version, so the next read of a quiet namespace lists nothing.

The caches keep summaries of the objects (:mod:`.summary`), made by the streams as they arrive.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from kubernetes.client.exceptions import ApiException

from discovery_sync.broadcast import FeedSet
from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.errors import BackendUnavailable
from discovery_sync.events import Added, DiscoveryEvent, Removed, Resync
from discovery_sync.identity import DiscoveryInstanceId
from discovery_sync.model import DiscoveryInstance
from discovery_sync.queries import Query
from discovery_sync.reconcile import apply
from discovery_sync.threads import start_thread
from discovery_sync.watch import WatchFeed

from .keeper import ConnectionKeeper
from .liveness import Readiness, WorkerEntry, is_served, parse_rv, update_entry
from .served import ServedSet
from .silence import SilenceWatch
from .summary import ObjectSummary, Summarize, readiness, summarize_cr, summarize_pod, summarize_slice, versioned
from .watcher import (
    Changed,
    Crashed,
    Denied,
    Fatal,
    Listed,
    Message,
    Opened,
    Progress,
    ResourceStream,
    Trouble,
    denied_message,
)
from .wire import PLURAL, TRANSPORT_ERRORS, KubeApi, Resource, explain, unreachable

log = logging.getLogger("discovery_sync.backends.kube")

THREAD_NAME = "discovery-sync-kube-daemon"

T = TypeVar("T")

#: what the view keeps of each resource's objects (:mod:`.summary`)
SUMMARIZE: dict[str, Summarize] = {PLURAL: summarize_cr, "endpointslices": summarize_slice, "pods": summarize_pod}


class State(enum.Enum):
    PENDING = "Pending"
    READY = "Ready"
    STOPPED = "Stopped"
    FAILED = "Failed"


@dataclass
class ResourceCache:
    """The objects of one watched resource (summarized) and how far the stream has got (highest
    resourceVersion it delivered, or at which the read barrier found the cache current)."""

    resource: Resource
    objects: dict[str, ObjectSummary] = field(default_factory=dict)
    progress: int | None = None
    listed: bool = False
    #: the server accepted a watch of it once: Ready needs that too, so that a watch refused (403)
    #: right after the list is reported by the first read instead of one read later
    watching: bool = False

    def advance(self, version: Any) -> None:
        number = parse_rv(version)
        if number is not None and (self.progress is None or number > self.progress):
            self.progress = number

    def reached(self, version: str) -> bool:
        """Whether every change up to the collection resourceVersion ``version`` has been applied
        (False when that cannot be told: a version that is no integer)."""
        at = parse_rv(version)
        return at is not None and self.progress is not None and self.progress >= at

    def covers(self, listed: Mapping[str, ObjectSummary], version: str) -> bool:
        """Whether this cache reflects at least the state of a list taken at ``version``.

        Every listed object's change must have been applied, and every cached object missing from
        the list must be newer than the list (else it was deleted and the stream is behind).
        Without integer resourceVersions this cannot be judged and counts as covered.
        """
        at = parse_rv(version)
        versions = [parse_rv(o.resource_version) for o in listed.values()]
        if at is None or None in versions:
            return True
        newest = max([v for v in versions if v is not None], default=0)
        if newest and (self.progress is None or self.progress < newest):
            return False
        for name, obj in self.objects.items():
            if name not in listed:
                mine = parse_rv(obj.resource_version)
                if mine is None or mine <= at:
                    return False
        return True


class KubeDaemon:
    """The view of one namespace for one client; see the module docstring."""

    def __init__(
        self,
        api: KubeApi,
        *,
        mode: str,
        own_cr_name: str | None,
        keeper: ConnectionKeeper | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.api = api
        self._keeper = keeper
        self.mode = mode
        self.own_cr_name = own_cr_name
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._queue: queue.Queue[Message | None] = queue.Queue()
        self._crs = ResourceCache(api.worker_metadata)
        self._readiness = ResourceCache(api.pods if mode == "container" else api.endpoint_slices)
        self._caches = {c.resource.plural: c for c in (self._crs, self._readiness)}
        self._entries: dict[str, WorkerEntry] = {}
        self._readiness_map: Readiness = {}
        self._serving = ServedSet(exclude=own_cr_name)
        self._served: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._first_seen: dict[DiscoveryInstanceId, int | None] = {}
        self._feeds = FeedSet()
        self.state = State.PENDING
        self.reason = ""
        self.last_error = ""
        self.resyncs = 0
        self._stale_warned = False
        #: why a stream lacks a permission, by source (``watch <plural>``); the read barrier raises its own
        self._denied: dict[str, str] = {}
        self._streams = [
            ResourceStream(api, c.resource, self._queue.put, summarize=SUMMARIZE[c.resource.plural], clock=clock)
            for c in self._caches.values()
        ]
        self.silence = SilenceWatch(api, self._streams, keeper, clock=clock)
        self._thread = start_thread(THREAD_NAME, self._run, self._fail, start=False)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        for stream in self._streams:
            stream.start()
        self.silence.start()

    def stop(self) -> None:
        """Stop the threads and close every feed; the state becomes Stopped (unless it Failed)."""
        self.silence.stop()
        for stream in self._streams:
            stream.stop()
        self._queue.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5)
        with self._changed:
            if self.state is not State.FAILED:
                self.state = State.STOPPED
            self._changed.notify_all()
        self._feeds.close_all()

    def join(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for the threads to end after a stop or failure; True when they did."""
        for thread in [self._thread, self.silence.thread, *(s._thread for s in self._streams)]:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout)
        return not self.threads()

    def threads(self) -> list[str]:
        """Names of this daemon's live threads."""
        alive = [t for t in (self._thread, self.silence.thread) if t.is_alive()]
        return [t.name for t in alive] + [s._thread.name for s in self._streams if s.is_alive()]

    # -- waiting ------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """Return once Ready; BackendUnavailable when Failed, Stopped, still Pending after
        ``timeout``, or (at once) while a permission it needs is refused."""
        with self._changed:
            self._changed.wait_for(lambda: self.state is not State.PENDING or bool(self._denied), timeout)
            state, reason, last_error = self.state, self.reason, self.last_error
            denied = list(self._denied.values())
        if denied and state in (State.PENDING, State.READY):
            raise BackendUnavailable(f"Kubernetes discovery cannot see the cluster: {'; '.join(denied)}")
        if state is State.READY:
            return
        if state is State.FAILED:
            raise BackendUnavailable(f"Kubernetes discovery failed: {reason}")
        if state is State.STOPPED:
            raise BackendUnavailable("Kubernetes discovery was stopped")
        waiting = ", ".join(c.resource.plural for c in self._caches.values() if not c.listed) or "nothing"
        raise BackendUnavailable(
            f"Kubernetes discovery is not ready after {timeout:g} s (still listing {waiting}"
            + (f"; last error: {last_error})" if last_error else ")")
        )

    def sync(self, timeout: float) -> bool:
        """Wait until the view reflects everything stored when this call started (read-your-writes).

        Returns False (after logging) when that could not be checked or did not happen within
        ``timeout``; the view is then served as it is, possibly stale. See the module docstring.
        """
        started = time.monotonic()
        probed = self._barrier_reads(started, "a read's list", self.api.collection_version, list(self._caches.values()))
        if probed is None:
            return False
        with self._lock:  # no wait: a quiet resource's watch gets nothing past its last change
            behind = [cache for cache, version in probed if self.state is State.READY and not cache.reached(version)]
        if behind:
            listed = self._barrier_reads(started, "a read's list", self._versions_listed, behind)
            if listed is None:
                return False
        else:
            listed = []
        with self._changed:
            current = self._changed.wait_for(
                lambda: self.state is not State.READY or all(c.covers(o, v) for c, (o, v) in listed),
                max(0.0, timeout - (time.monotonic() - started)),
            )
            if current and self.state is State.READY:
                for cache, (_, version) in listed:  # current at that version: the next read need not list
                    cache.advance(version)
        if not current:
            self._warn_stale(f"the watches did not catch up with the API server within {timeout:g} s")
        else:
            self._stale_warned = False
        return current

    def _versions_listed(self, resource: Resource) -> tuple[dict[str, ObjectSummary], str]:
        return self.api.list_all(resource, versioned)

    def _barrier_reads(
        self, started: float, what: str, read: Callable[[Resource], T], caches: list[ResourceCache]
    ) -> list[tuple[ResourceCache, T]] | None:
        """``read`` of each cache's resource for the read barrier; None (after logging) when one
        failed; BackendUnavailable when one was refused (403)."""
        answers = []
        for cache in caches:
            try:
                answers.append((cache, read(cache.resource)))
            except ApiException as exc:
                if exc.status == 403:
                    self._read_denied(exc, cache.resource)
                self._barrier_failed(exc, cache.resource.plural, started)
                return None
            except TRANSPORT_ERRORS as exc:
                self._barrier_failed(exc, cache.resource.plural, started)
                return None
        self._answered("read", what, started)
        return answers

    def _barrier_failed(self, exc: BaseException, plural: str, started: float) -> None:
        message = explain(exc, f"listing {plural}", self.api.server)
        if self._keeper is not None and unreachable(exc):
            self._keeper.failed("read", message, started, lasting=False)
        self._warn_stale(message)

    def _read_denied(self, exc: ApiException, resource: Resource) -> NoReturn:
        """The read barrier may not list ``resource``: SUSPENDED until a read's list works again,
        and BackendUnavailable saying so."""
        message = denied_message("list", resource, self.api.namespace, exc, self.api.server)
        if self._keeper is not None:
            self._keeper.denied("read", message)
        raise BackendUnavailable(f"Kubernetes discovery cannot see the cluster: {message}") from exc

    def _warn_stale(self, why: str) -> None:
        if not self._stale_warned:
            log.warning("serving the discovery view without checking that it is current: %s", why)
            self._stale_warned = True

    # -- reading ------------------------------------------------------------------------------------
    def records(self, query: Query | None = None) -> list[DiscoveryInstance]:
        with self._lock:
            return [r for r in self._served.values() if query is None or query.matches(r)]

    def get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        with self._lock:
            return self._served.get(instance_id)

    def first_seen(self, instance_id: DiscoveryInstanceId) -> int | None:
        """The resourceVersion at which the served record first appeared in its CR (None: unknown)."""
        with self._lock:
            return self._first_seen.get(instance_id)

    def open_feed(self, feed: WatchFeed) -> None:
        """Start ``feed`` with the current view and keep it fed; BackendUnavailable unless Ready."""
        with self._lock:
            if self.state is not State.READY:
                raise BackendUnavailable(f"Kubernetes discovery is {self.state.value}: {self.reason}")
            feed.start(self._served.values())
            self._feeds.add(feed)

    def status(self) -> dict[str, Any]:
        with self._lock:
            ready = self._readiness_map
            return {
                "state": self.state.value,
                "reason": self.reason,
                "last_error": self.last_error,
                "workers": len(self._entries),
                "served_workers": sorted(e.name for e in self._entries.values() if is_served(e, ready)),
                "served_records": len(self._served),
                "resyncs": self.resyncs,
                "denied": dict(self._denied),
                "silence_confirmations": self.silence.confirmations,
                "watches": len(self._feeds),
                "threads": self.threads(),
            }

    # -- this pod's records -------------------------------------------------------------------------
    def set_local(
        self, records: Mapping[DiscoveryInstanceId, DiscoveryInstance], seen: Mapping[DiscoveryInstanceId, int | None]
    ) -> None:
        """This pod's records changed (after a successful write): update the view and the feeds."""
        with self._changed:
            touched = self._serving.set_local(records, seen)
            if self.state is not State.FAILED:
                self._publish(touched, resync=False)
            self._changed.notify_all()

    # -- the daemon thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if message is None:
                return
            try:
                with self._changed:
                    self._handle(message)
                    self._changed.notify_all()
            except BaseException as exc:
                self._fail(exc)
                return
            if self.state is State.FAILED:  # a Fatal message: nothing more to do
                return

    def _handle(self, message: Message) -> None:
        if self.state in (State.FAILED, State.STOPPED):
            return
        if isinstance(message, Crashed):
            raise message.error
        if isinstance(message, Fatal):
            self._fail_with(message.message)
            return
        if isinstance(message, (Trouble, Denied, Opened)):
            self._stream_state(message)
            return
        cache = self._caches[message.resource]
        if isinstance(message, Progress):
            cache.advance(message.resource_version)
            return
        if isinstance(message, Listed):
            if f"watch {message.resource}" not in self._denied:  # refused: only its watch opening mends that
                self._answered(f"watch {message.resource}", f"listing {message.resource}", message.started)
            self._listed(cache, message)
            return
        assert isinstance(message, Changed)
        obj = message.object
        name = obj.name
        cache.advance(obj.resource_version)
        if message.type == "DELETED":
            cache.objects.pop(name, None)
            if cache is self._crs:
                self._entries.pop(name, None)
                if name == self.own_cr_name:
                    self._own_cr_gone(obj)
        elif cache is self._crs:
            self._entries[name] = update_entry(self._entries.get(name), obj)
            cache.objects[name] = _parsed(obj)
        else:
            cache.objects[name] = obj
        self._publish(self._serve(name) if cache is self._crs else self._readiness_changed(), resync=False)

    def _stream_state(self, message: Trouble | Denied | Opened) -> None:
        """A stream failed (and retries), was refused, or opened its watch."""
        source = f"watch {message.resource}"
        if isinstance(message, Trouble):
            self.last_error = message.message
            if self._keeper is not None:
                self._keeper.retrying(source)
                if message.unreachable and message.failures > 1:
                    self._keeper.failed(source, message.message, message.started)
        elif isinstance(message, Denied):
            self.last_error = message.message
            self._denied[source] = message.message
            if self._keeper is not None:
                self._keeper.denied(source, message.message)
        else:
            self._denied.pop(source, None)
            self._answered(source, f"watching {message.resource}", message.started)
            self._caches[message.resource].watching = True
            self._ready_once_complete()

    def _listed(self, cache: ResourceCache, message: Listed) -> None:
        """A complete list: replace the cache, re-serve what it concerns (Ready once both are listed and watched)."""
        if cache is self._crs and self.own_cr_name is not None:
            before, after = cache.objects.get(self.own_cr_name), message.objects.get(self.own_cr_name)
            if before is not None and (after is None or after.uid != before.uid):
                self._own_cr_gone(before)  # deleted while the watch was down (and maybe created anew)
        cache.progress = None
        cache.advance(message.resource_version)
        cache.listed = True
        if cache is self._crs:
            self._entries = {name: update_entry(self._entries.get(name), obj) for name, obj in message.objects.items()}
            cache.objects = {name: _parsed(obj) for name, obj in message.objects.items()}
            touched = self._serve_all()
        else:
            cache.objects = dict(message.objects)
            touched = self._readiness_changed()
        resync = not message.initial and self.state is State.READY
        if resync:
            self.resyncs += 1
            log.info("listed %s again; resynchronising %d watch(es)", message.resource, len(self._feeds))
        self._publish(touched, resync=resync)
        self._ready_once_complete()

    def _ready_once_complete(self) -> None:
        """Pending → Ready once every resource is listed and watched."""
        if self.state is State.PENDING and all(c.listed and c.watching for c in self._caches.values()):
            self.state = State.READY
            self.last_error = ""
            log.debug("Kubernetes discovery is ready (%d workers)", len(self._entries))

    def _answered(self, source: str, what: str, started: float) -> None:
        if self._keeper is not None:
            reason = f"the Kubernetes API server {self.api.server} answers again ({what} worked)"
            self._keeper.answered(source, reason, started)

    def _own_cr_gone(self, obj: ObjectSummary) -> None:
        """This pod's own CR was deleted (by anyone: the backend judges whose records that lost)."""
        if self._keeper is not None:
            self._keeper.cr_gone(obj.uid)

    # One change re-serves only the workers it concerns, so delivery does not slow down with the
    # size of the namespace; a new list re-serves them all.
    def _serve(self, name: str) -> set[DiscoveryInstanceId]:
        """Serve worker ``name`` or not, by its CR and readiness now; the record ids that may have changed."""
        entry = self._entries.get(name)
        served = entry is not None and is_served(entry, self._readiness_map)
        return self._serving.set_worker(name, entry if served else None)

    def _serve_all(self) -> set[DiscoveryInstanceId]:
        touched = self._serving.clear_workers()
        for name in self._entries:
            touched |= self._serve(name)
        return touched

    def _readiness_changed(self) -> set[DiscoveryInstanceId]:
        ready = readiness(self._readiness.objects.values())
        before, self._readiness_map = self._readiness_map, ready
        touched: set[DiscoveryInstanceId] = set()
        for name in before.keys() | ready.keys():
            if before.get(name) != ready.get(name):
                touched |= self._serve(name)
        return touched

    def _publish(self, touched: set[DiscoveryInstanceId], *, resync: bool) -> None:
        """Bring the served records of ``touched`` up to date; publish the events (or reconcile every feed)."""
        events: list[DiscoveryEvent] = []
        for key in sorted(touched, key=lambda k: (k.kind.value, k.to_path())):
            candidate = self._serving.candidate(key)
            old = self._served.get(key)
            if candidate is None:
                if old is not None:
                    del self._served[key]
                    self._first_seen.pop(key, None)
                    events.append(Removed(key))
                continue
            record, self._first_seen[key] = candidate
            self._served[key], found, _ = apply(old, record)
            events.extend(found)
        if resync:
            for feed in self._feeds.current():
                feed.reconcile(self._served.values(), force_resync=True)
            return
        for event in events:
            self._feeds.publish(event, None if isinstance(event, Removed) else self._served[_event_id(event)])

    def _fail_with(self, reason: str) -> None:
        self._fail(BackendUnavailable(reason))

    def _fail(self, exc: BaseException) -> None:
        reason = str(exc) if isinstance(exc, BackendUnavailable) else f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, BackendUnavailable):
            log.error(
                "thread %s: the Kubernetes discovery daemon failed: %r",
                threading.current_thread().name,
                exc,
                exc_info=exc,
            )
        else:
            log.error("Kubernetes discovery failed: %s", reason)
        with self._changed:
            self.state = State.FAILED
            self.reason = reason
            self._changed.notify_all()
        if self._keeper is not None:  # reads fail from now on, with this reason
            self._keeper.failed("daemon", f"Kubernetes discovery failed: {reason}", time.monotonic())
        self._feeds.fail(exc)
        self.silence.stop(timeout=0)
        for stream in self._streams:
            stream.stop(timeout=0)


def _parsed(cr: ObjectSummary) -> ObjectSummary:
    """A CR's summary once its ``spec.data`` is parsed into its entry: without the data."""
    return ObjectSummary(cr.name, cr.uid, cr.resource_version, cr.owner)


def _event_id(event: DiscoveryEvent) -> DiscoveryInstanceId:
    if isinstance(event, Added):
        return event.instance.id()
    if isinstance(event, Resync):
        raise TypeError("a Resync is the event of no single record")
    return event.id
