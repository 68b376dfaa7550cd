"""List-then-watch of one resource in a named thread, reporting to the daemon through messages.

The thread lists (paged), posts :class:`Listed`, then watches from the list's resourceVersion with
bookmarks, posting :class:`Changed` and :class:`Progress`. A stream the server ends is resumed
from the last resourceVersion; a 410 Gone (compacted history) makes it list again, which the
daemon turns into a resync of every watch. Errors (the API server's, the connection's, a line over
the bound of :mod:`discovery_sync.ndjson`) back off 250 ms doubling to 5 s, with jitter.
Only a 401/403/404 before the first list succeeded is final (:class:`Fatal`): the CRD or RBAC is
missing and retrying will not help. Anything unexpected is posted as :class:`Crashed`.

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

from .wire import TRANSPORT_ERRORS, Gone, KubeApi, Resource, abort, explain, unreachable

log = logging.getLogger("discovery_sync.backends.kube")

BACKOFF_START, BACKOFF_MAX = 0.25, 5.0


@dataclass(frozen=True)
class Listed:
    """A complete list of ``resource`` at ``resource_version``; ``initial`` for the first one;
    ``started``: when the list began (``time.monotonic()``)."""

    resource: str
    objects: dict[str, dict[str, Any]]
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
    """One ADDED / MODIFIED / DELETED watch event."""

    resource: str
    type: str
    object: dict[str, Any]


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
class Fatal:
    """The resource cannot be listed at all (CRD missing, access denied)."""

    resource: str
    message: str


@dataclass(frozen=True)
class Crashed:
    """The stream thread died of an unexpected exception."""

    resource: str
    error: BaseException


Message = Listed | Opened | Changed | Progress | Trouble | Fatal | Crashed


class ResourceStream:
    """Keeps one resource's list+watch going until :meth:`stop`; waits between attempts through ``clock``."""

    def __init__(
        self, api: KubeApi, resource: Resource, post: Callable[[Message], None], *, clock: Clock = SYSTEM
    ) -> None:
        self.api = api
        self.resource = resource
        self._post = post
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the thread's wait between attempts (set by stop())
        self._clock = clock
        self._response: Any = None
        self._started = 0.0  # when the current attempt began
        self._failures = 0  # attempts in a row that failed
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
            try:
                if version is None:
                    self._started = time.monotonic()
                    objects, version = self.api.list_all(self.resource)
                    self._failures = 0
                    self._post(Listed(plural, objects, version, initial=not listed, started=self._started))
                    listed = True
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
                action = f"watching {plural}" if listed else f"listing {plural}"
                message = explain(exc, action, self.api.server)
                if not listed and isinstance(exc, ApiException) and exc.status in (401, 403, 404):
                    self._post(Fatal(plural, message))
                    return
                delay = retry.next_delay()
                log.warning("%s; retrying in %.2f s", message, delay)
                self._failures += 1
                self._post(Trouble(plural, message, unreachable(exc), self._failures, self._started))
                retry.wait(delay)  # stop() ends it; the loop then sees _stop

    def _watch(self, version: str) -> str:
        """Stream events after ``version``; returns the last resourceVersion seen when the stream ends."""
        plural = self.resource.plural
        for event in self.api.watch(self.resource, version, self._opened):
            if self._stop.is_set():
                break
            kind = event.get("type")
            obj = event.get("object") or {}
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                self._post(Progress(plural, version))
            elif kind in ("ADDED", "MODIFIED", "DELETED"):
                self._post(Changed(plural, kind, obj))
            else:
                log.warning("ignoring a watch event of unknown type %r on %s", kind, plural)
        self._response = None
        return version

    def _opened(self, response: Any) -> None:
        self._response = response
        if self._stop.is_set():
            abort(response)
            return
        self._failures = 0
        self._post(Opened(self.resource.plural, self._started))
