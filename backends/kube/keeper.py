"""The Kubernetes client's connection state (docs/design.md §5.5): which faults of the API server
suspend it, what resumes it, and the thread that applies this worker's CR again.

Sources of evidence: the daemon's two watch streams (``watch <plural>``), this client's CR writes
(``write``), the read barrier of consistent reads and ``check_connection()`` (``read``), and the
daemon once it has Failed (``daemon``, for good). A request the API server does not answer
(refused, reset, timed out) or answers with a 5xx or 429 is a failure; a stream and a write
count it once a retry failed too (the second attempt in a row), so that one dropped connection
is no outage; the read barrier, which is not retried, counts it at once.

A source the API server refuses the permission it needs (a watch or a list answered 403:
``denied``) is a failure too, however recent the latest success: an answer, but one that leaves
the client blind. It lasts until that source answers (the daemon: until the stream's watch opens).
Silent watches that the API server is not there to confirm suspend the client (:mod:`.silence`);
that failure does not last by itself: the cut watches report their own.

A source that failed once and is retrying (a stream's first failed attempt, which does not
count yet) does not suspend the client, but while it has not answered it does not let the
client resume either: after an API server restart that answers 503 on custom-resource paths
for a second while serving EndpointSlices, the readiness watch answering first must not make
the client RECONNECTED while the CR watch is still failing (it would be SUSPENDED again at its
next try).

The client is SUSPENDED from the first failure that counts, and RECONNECTED once every source
that failed has answered again: a stream by listing or by opening its watch, a write by
succeeding. A write that gives up, and a read, stop counting as failing when they end (they do
not resume the client either: the next answer does). A failure of a request that began before
the latest success is out of date and ignored: the server answered since.

A CR deleted while the client owns records in it is LOST; :class:`ConnectionKeeper` hands the
deletion to a thread of its own (``discovery-sync-kube-keeper``, started on the first one) that
lets the backend apply the whole CR again (RECONNECTED naming its records), so the daemon's
thread never waits for the API server. When that fails because the server does not answer, the
next answer asks for it again.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Callable

from discovery_sync.connection import ConnectionState, ConnectionStates
from discovery_sync.threads import start_thread

log = logging.getLogger("discovery_sync.backends.kube")

KEEPER_THREAD = "discovery-sync-kube-keeper"


class ConnectionKeeper:
    """Turns what the backend and its daemon see of the API server into connection states, and
    runs ``recover(uid)`` on its thread for each deleted CR (``uid``; None: try again after a
    failed attempt). Every method is thread-safe, quick and may be called under the backend's or
    the daemon's locks (its own lock is taken last, and it calls only ``connection``)."""

    def __init__(self, connection: ConnectionStates, recover: Callable[[str | None], None]) -> None:
        self._connection = connection
        self._recover = recover
        self._lock = threading.Lock()
        self._failing: dict[str, str] = {}  # source -> why it fails
        self._retrying: set[str] = set()  # sources that failed once and have not answered since
        self._latest_answer = -math.inf  # when the latest request that succeeded began
        self._retry_on_answer = False
        self._closed = False
        self._requests: queue.SimpleQueue[tuple[str | None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def failing(self) -> dict[str, str]:
        """The sources failing now and why (for status())."""
        with self._lock:
            return dict(self._failing)

    def failed(self, source: str, reason: str, started: float, *, lasting: bool = True) -> None:
        """A request of ``source`` begun at ``started`` (``time.monotonic()``) failed: SUSPENDED
        (``lasting``: ``source`` keeps it so until it answers or :meth:`settled`)."""
        with self._lock:
            if self._closed or started < self._latest_answer:
                return
            if lasting:
                self._failing[source] = reason
            self._connection.suspend(reason)

    def denied(self, source: str, reason: str) -> None:
        """The API server refuses ``source`` a permission it needs: SUSPENDED until ``source``
        answers (never out of date: see the module docstring)."""
        with self._lock:
            if self._closed:
                return
            self._failing[source] = reason
            self._connection.suspend(reason)

    def retrying(self, source: str) -> None:
        """``source`` failed once and retries: it does not suspend the client, but until it
        answers the client does not resume."""
        with self._lock:
            if not self._closed:
                self._retrying.add(source)

    def answered(self, source: str, reason: str, started: float) -> None:
        """A request of ``source`` begun at ``started`` succeeded: RECONNECTED (``reason``) when no
        other source fails; when the CR is LOST and applying it again waits for an answer, that."""
        with self._lock:
            if self._closed:
                return
            self._latest_answer = max(self._latest_answer, started)
            self._failing.pop(source, None)
            self._retrying.discard(source)
            if self._failing or self._retrying:
                return
            if self._connection.state is ConnectionState.LOST:
                if self._retry_on_answer:
                    self._retry_on_answer = False
                    self._request(None)
                return
            self._connection.resume(reason)

    def settled(self, source: str) -> None:
        """``source`` stopped trying (a write that gave up or was refused): it no longer keeps the
        client SUSPENDED, nor does it resume it."""
        with self._lock:
            self._failing.pop(source, None)
            self._retrying.discard(source)

    def cr_gone(self, uid: str | None) -> None:
        """The daemon saw this worker's CR ``uid`` deleted: the keeper thread runs ``recover(uid)``."""
        with self._lock:
            if not self._closed:
                self._request(uid)

    def retry_when_answered(self) -> None:
        """Applying the CR again failed for the API server's sake: run ``recover(None)`` at the
        next answer."""
        with self._lock:
            self._retry_on_answer = True

    def close(self) -> None:
        """Report nothing more (the client is shutting down) and end the thread after its current
        work; :meth:`join` waits for it."""
        with self._lock:
            self._closed = True
            if self._thread is not None:
                self._requests.put(None)

    def join(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _request(self, uid: str | None) -> None:  # lock held
        self._requests.put((uid,))
        if self._thread is None:
            self._thread = start_thread(KEEPER_THREAD, self._run)

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            try:
                self._recover(request[0])
            except Exception:  # a bug: logged, and the next deletion is still handled
                log.exception("thread %s: handling a deleted DynamoWorkerMetadata failed", KEEPER_THREAD)
