"""List-then-watch of one resource in a named thread, reporting to the daemon through messages.

The thread lists (paged), posts :class:`Listed`, then watches from the list's resourceVersion with
bookmarks, posting :class:`Changed` and :class:`Progress`. Nothing here waits for a BOOKMARK: a
real API server sends none on a quiet watch and at most about one a minute after a change, so
they only advance the resume point. A stream the server ends is resumed from the last
resourceVersion; a 410 Gone (compacted history, or a restarted server whose watch cache begins
after it) makes it list again, which the daemon turns into a resync of every watch. Errors (the
API server's, the connection's, a line over the bound of :mod:`discovery_sync.ndjson`) back off
250 ms doubling to 5 s, with jitter.

A 403 on a list or a watch (RBAC lacking ``list`` or ``watch`` on the resource) is posted as
:class:`Denied`, naming the verb, the resource and the namespace, and retried with the same
backoff, so granting the permission later heals the stream; only a 401/404 before the first
list succeeded is final (:class:`Fatal`): the CRD is missing or the credentials are refused.
Anything unexpected is posted as :class:`Crashed`.

:meth:`ResourceStream.heard` says when the open watch last delivered a line (or opened), for
:mod:`.silence`, which may :meth:`~ResourceStream.interrupt` a watch that has gone silent on an
API server that no longer answers: the stream then reconnects and reports that as its trouble.

For the connection state (:mod:`.keeper`) every attempt is timed: :class:`Listed` and
:class:`Opened` (a watch the server accepted) say when the request that worked began;
:class:`Trouble` says when the failed one began, how many attempts in a row failed and whether
the server was unreachable (no answer, a 5xx or a 429).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.ndjson import LineTooLong
from discovery_sync.retry import Retry
from discovery_sync.threads import start_thread

from .summary import ObjectSummary, Summarize, versioned
from .wire import TRANSPORT_ERRORS, Gone, KubeApi, Resource, abort, explain, unreachable

log = logging.getLogger("discovery_sync.backends.kube")

BACKOFF_START, BACKOFF_MAX = 0.25, 5.0


@dataclass(frozen=True)
class Listed:
    """A complete list of ``resource`` at ``resource_version``; ``initial`` for the first one;
    ``started``: when the list began (``time.monotonic()``)."""

    resource: str
    objects: dict[str, ObjectSummary]
    resource_version: str
    initial: bool
    started: float = 0.0


@dataclass(frozen=True)
class Opened:
    """The server accepted a watch of ``resource`` asked for at ``started`` (``time.monotonic()``)."""

    resource: str
    started: float


@dataclass(frozen=True)
class Changed:
    """One ADDED / MODIFIED / DELETED watch event, its object summarized."""

    resource: str
    type: str
    object: ObjectSummary


@dataclass(frozen=True)
class Progress:
    """A BOOKMARK: every change up to ``resource_version`` has been delivered."""

    resource: str
    resource_version: str


@dataclass(frozen=True)
class Trouble:
    """A transient error; the stream retries by itself. ``failures``: attempts in a row that
    failed, this one included; ``unreachable``: no answer, a 5xx or a 429; ``started``: when the
    failed attempt began (``time.monotonic()``)."""

    resource: str
    message: str
    unreachable: bool = False
    failures: int = 1
    started: float = 0.0


@dataclass(frozen=True)
class Denied:
    """The API server refuses this client ``verb`` (``list`` or ``watch``) on the resource (403);
    the stream retries. ``started``: when the refused request began (``time.monotonic()``)."""

    resource: str
    verb: str
    message: str
    started: float = 0.0


@dataclass(frozen=True)
class Fatal:
    """The resource cannot be listed at all (CRD missing, credentials refused)."""

    resource: str
    message: str


@dataclass(frozen=True)
class Crashed:
    """The stream thread died of an unexpected exception."""

    resource: str
    error: BaseException


Message = Listed | Opened | Changed | Progress | Trouble | Denied | Fatal | Crashed


def denied_message(verb: str, resource: Resource, namespace: str, exc: ApiException, server: str) -> str:
    """One line naming what is forbidden, where, and (through :func:`.wire.explain`) what to do."""
    action = "watching" if verb == "watch" else "listing"
    what = f"{verb} {resource.qualified_name} in namespace {namespace} is forbidden for this client"
    return f"{what}: {explain(exc, f'{action} {resource.plural}', server)}"


class ResourceStream:
    """Keeps one resource's list+watch going until :meth:`stop`; waits between attempts and reads
    the time through ``clock``. Objects are posted as ``summarize`` makes them (:mod:`.summary`):
    the raw JSON of a list page or an event is not kept."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        post: Callable[[Message], None],
        *,
        summarize: Summarize = versioned,
        clock: Clock = SYSTEM,
    ) -> None:
        self.api = api
        self.resource = resource
        self._summarize = summarize
        self._post = post
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the thread's wait between attempts (set by stop())
        self._clock = clock
        self._response: Any = None
        self._started = 0.0  # when the current attempt began
        self._failures = 0  # attempts in a row that failed
        self._heard: float | None = None  # clock time the open watch last delivered a line (None: no watch open)
        self._interrupted: str | None = None  # why interrupt() cut the current watch
        self._thread = start_thread(
            f"discovery-sync-kube-watch-{resource.plural}", self._loop, self._crashed, start=False
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._response is not None:
            abort(self._response)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def heard(self) -> float | None:
        """When (on the clock) the open watch last delivered a line or opened; None while no
        watch is open (listing, or waiting to retry: those requests have timeouts of their own)."""
        return self._heard

    def interrupt(self, reason: str) -> None:
        """Cut the open watch because the API server did not answer meanwhile (``reason``): the
        stream posts :class:`Trouble` with that reason, counted as a failed attempt, and
        reconnects (resuming from its last resourceVersion) after the usual backoff."""
        response = self._response
        if response is None or self._stop.is_set():
            return
        self._interrupted = reason
        abort(response)

    def _crashed(self, exc: BaseException) -> None:
        """An unexpected error ended the thread (already logged): the daemon must hear of it."""
        if not self._stop.is_set():
            self._post(Crashed(self.resource.plural, exc))

    def _loop(self) -> None:
        plural = self.resource.plural
        version: str | None = None
        listed = False
        retry = Retry(BACKOFF_START, BACKOFF_MAX, clock=self._clock, wake=self._wake)
        while not self._stop.is_set():
            verb = "list"
            try:
                if version is None:
                    self._started = time.monotonic()
                    objects, version = self.api.list_all(self.resource, self._summarize)
                    self._failures = 0
                    self._post(Listed(plural, objects, version, initial=not listed, started=self._started))
                    listed = True
                verb = "watch"
                self._started = time.monotonic()
                version = self._watch(version)
                retry.reset()
            except Gone as exc:
                log.info("the watch of %s must list again: %s", plural, exc)
                version = None
            except (ApiException, LineTooLong, *TRANSPORT_ERRORS) as exc:
                if self._stop.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    version = None
                    continue
                if not self._failed(exc, verb, listed, retry):
                    return

    def _failed(self, exc: BaseException, verb: str, listed: bool, retry: Retry) -> bool:
        """Report a failed attempt and wait to retry (True), or post :class:`Fatal` (False: the
        thread ends)."""
        plural = self.resource.plural
        interrupted, self._interrupted = self._interrupted, None
        if isinstance(exc, ApiException) and exc.status == 403:
            message = denied_message(verb, self.resource, self.api.namespace, exc, self.api.server)
            delay = retry.next_delay()
            log.warning("%s; retrying in %.2f s", message, delay)
            self._failures = 0  # an answer: the server is there
            self._post(Denied(plural, verb, message, self._started))
            retry.wait(delay)
            return True
        message = explain(exc, f"{verb}ing {plural}", self.api.server)
        if not listed and isinstance(exc, ApiException) and exc.status in (401, 404):
            self._post(Fatal(plural, message))
            return False
        if interrupted is not None:
            message = f"watching {plural} stopped: {interrupted}"
        delay = retry.next_delay()
        log.warning("%s; retrying in %.2f s", message, delay)
        self._failures += 1
        self._post(Trouble(plural, message, interrupted is not None or unreachable(exc), self._failures, self._started))
        retry.wait(delay)  # stop() ends it; the loop then sees _stop
        return True

    def _watch(self, version: str) -> str:
        """Stream events after ``version``; returns the last resourceVersion seen when the stream ends."""
        plural = self.resource.plural
        # the clock's reading, bound once: a line costs one call (the real clock's, unwrapped)
        now = time.monotonic if type(self._clock) is Clock else self._clock.monotonic
        try:
            for event in self.api.watch(self.resource, version, self._opened):
                self._heard = now()
                if self._stop.is_set():
                    break
                kind = event.get("type")
                obj = event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    self._post(Progress(plural, version))
                elif kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._post(Changed(plural, kind, self._summarize(obj)))
                else:
                    log.warning("ignoring a watch event of unknown type %r on %s", kind, plural)
        finally:
            self._heard = None
            self._response = None
        return version

    def _opened(self, response: Any) -> None:
        self._response = response
        self._interrupted = None
        self._heard = self._clock.monotonic()
        if self._stop.is_set():
            abort(response)
            return
        self._failures = 0
        self._post(Opened(self.resource.plural, self._started))
