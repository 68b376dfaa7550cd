"""Silent watches: whether the API server behind them still answers, confirmed by one cheap request.

A real API server sends nothing on a quiet watch (no BOOKMARK without a change), and one that is
shutting down (SIGTERM) refuses new connections at once but keeps its open watches silent for
about 60 s, until it exits; a network partition that drops packets silences them too. So silence
alone proves nothing, and waiting for a BOOKMARK proves nothing either: a thread of every client
(``discovery-sync-kube-silence``) asks. Once no open watch of the client has delivered a line
(event or BOOKMARK), opened, or been confirmed for :data:`SILENCE` seconds, it sends one
``GET /version`` (one request per client, not per stream; anyone may ask it, no etcd behind it),
bounded by :data:`CONFIRM_TIMEOUT` seconds so that a blackhole is caught as surely as a refusal.

- **Answered** (any HTTP answer but a 5xx/429): the watches are quiet, not cut off. Nothing
  changes; the next confirmation comes :data:`SILENCE` seconds later if they stay quiet, so a
  healthy quiet cluster gets one ``/version`` per client every 5 s, and a busy one none.
- **Not answered** (refused, reset, timed out, a 5xx/429): the client is SUSPENDED at once, the
  reason naming the silence and the failed confirmation; the failure does not last by itself
  (as a failed read barrier). Every watch that stayed silent since the confirmation began is cut
  (:meth:`~.watcher.ResourceStream.interrupt`): a watch on a server that is going away would
  otherwise hang until it exits (60 s) or until the read timeout (330 s) on a partition. Each
  stream then reconnects, resuming from its last resourceVersion, and reports its own trouble:
  refused reconnections keep the client SUSPENDED (from the second in a row, as always), and the
  first watch the API server accepts again makes it RECONNECTED (:mod:`.keeper`). A watch that
  delivered something meanwhile is left alone; when every open watch did, nothing happens.

With the defaults a client is SUSPENDED at most SILENCE + CONFIRM_TIMEOUT = 8 s after the API
server stopped answering (SILENCE when it refuses), plus the thread's scheduling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from kubernetes.client.exceptions import ApiException

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.threads import start_thread

from .keeper import ConnectionKeeper
from .watcher import ResourceStream
from .wire import TRANSPORT_ERRORS, KubeApi, explain, unreachable

log = logging.getLogger("discovery_sync.backends.kube")

SILENCE_THREAD = "discovery-sync-kube-silence"
#: seconds every open watch may stay silent before the API server is asked whether it answers
SILENCE = 5.0
#: seconds that request may take (connecting included) before the server counts as not answering
CONFIRM_TIMEOUT = 3.0
SOURCE = "silent watches"


class SilenceWatch:
    """Confirms silent watches of ``streams`` with ``api``'s ``/version`` (see the module
    docstring), reporting to ``keeper`` (None: only cuts the watches); reads and waits on ``clock``."""

    def __init__(
        self,
        api: KubeApi,
        streams: Sequence[ResourceStream],
        keeper: ConnectionKeeper | None,
        *,
        clock: Clock = SYSTEM,
        silence: float = SILENCE,
        confirm_timeout: float = CONFIRM_TIMEOUT,
    ) -> None:
        self._api = api
        self._streams = streams
        self._keeper = keeper
        self._clock = clock
        self.silence = silence
        self.confirm_timeout = confirm_timeout
        self._confirmed = -float("inf")  # clock time the latest confirmation that was answered began
        self._stop = threading.Event()
        self._wake = threading.Event()
        #: confirmations asked so far, and how many got no answer (for status() and tests)
        self.confirmations = 0
        self.unanswered = 0
        self._thread = start_thread(SILENCE_THREAD, self._run, start=False)
        clock.enroll(self._thread)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (a confirmation under way ends within its timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _due(self) -> float | None:
        """When the next confirmation is due on the clock; None while no watch is open."""
        heard = [at for at in (stream.heard() for stream in self._streams) if at is not None]
        if not heard:
            return None
        return max(max(heard), self._confirmed) + self.silence

    def _run(self) -> None:
        while not self._stop.is_set():
            due = self._due()
            now = self._clock.monotonic()
            if due is None or now < due:  # nothing open: look again once a watch could have gone silent
                self._clock.wait(self._wake, self.silence if due is None else due - now)
                self._wake.clear()
                continue
            self._confirm(due - self.silence)

    def _confirm(self, last_heard: float) -> None:
        """Ask the API server once (the watches were last heard of at ``last_heard``); on no
        answer, SUSPENDED and the silent watches cut."""
        began, started = self._clock.monotonic(), time.monotonic()
        self.confirmations += 1
        try:
            self._api.server_version(started + self.confirm_timeout)
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            if not unreachable(exc):  # a refusal (401, 403, ...) is an answer: the server is there
                self._confirmed = began
                return
            silent = [s for s in self._streams if (heard := s.heard()) is not None and heard < began]
            self._confirmed = began  # the cut watches reconnect: their own reports take over
            if self._stop.is_set() or not silent:  # every open watch delivered meanwhile: the server is there
                return
            self.unanswered += 1
            quiet = self._clock.monotonic() - last_heard
            reason = f"no watch delivered anything for {quiet:.1f} s and " + explain(
                exc, "asking the API server for /version", self._api.server
            )
            log.warning("%s; cutting the silent watches so that they reconnect", reason)
            if self._keeper is not None:
                self._keeper.failed(SOURCE, reason, started, lasting=False)
            for stream in silent:
                stream.interrupt(reason)
            return
        self._confirmed = began
        if self._keeper is not None:
            reason = f"the Kubernetes API server {self._api.server} answers again (/version answered)"
            self._keeper.answered(SOURCE, reason, started)
