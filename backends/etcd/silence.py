"""Silent watch streams: whether the etcd member behind them still answers, confirmed by one cheap request.

etcd sends nothing on a quiet watch (its progress notifications come every 10 minutes by
default), and a member that hangs (a stopped process, a partition, a stalled disk) keeps the
stream's connection open and silent: its watches would see nothing until it resumes. So a thread
of every client that watches (``discovery-sync-etcd-silence``) asks: once no stream on a member
has delivered anything, and the member has answered no request of the client, for :data:`QUIET`
seconds, it sends that member alone one ``/v3/maintenance/status`` (no permission needed, answered
from the member's memory), bounded by the confirm patience (:mod:`.deadlines`, 1 s).

- **Answered, with a leader**: the streams are quiet, not cut off. The next confirmation comes
  :data:`QUIET` seconds later if nothing else is heard from the member: a quiet client asks each
  member its streams are on about once every 1.5 s; a busy one, or a writer whose keep-alive that
  member answers, less or never.
- **No answer, a 5xx, or no leader** (a member cut off from the others elects none): the member
  is set aside (:mod:`.members`), which cuts every connection to it: the streams on it resume on
  another member from the last revision they delivered (nothing lost, nothing repeated: etcd's
  history holds every change since), and the client is SUSPENDED until one of them is accepted
  (RECONNECTED).

A change made while a member hangs thus reaches a watch on it at most QUIET + 1 s after the
member fell silent, plus the time to open a stream elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from discovery_sync.errors import BackendUnavailable
from discovery_sync.threads import start_thread

from .watcher import BucketStream
from .wire import EtcdError, EtcdGateway

log = logging.getLogger("discovery_sync.backends.etcd")

SILENCE_THREAD = "discovery-sync-etcd-silence"
#: seconds the streams on a member may be silent (and the member unheard of) before it is asked
QUIET = 1.5


class SilenceWatch:
    """Confirms the members that ``streams()`` (the client's open streams) are on, through
    ``gateway`` (see the module docstring)."""

    def __init__(
        self, gateway: EtcdGateway, streams: Callable[[], list[BucketStream]], *, quiet: float = QUIET
    ) -> None:
        self._gateway = gateway
        self._streams = streams
        self.quiet = quiet
        self._confirmed: dict[str, float] = {}  # member -> when its last confirmation began
        self._stop = threading.Event()
        self._wake = threading.Event()
        #: confirmations asked so far, and how many set a member aside (for status() and tests)
        self.confirmations = 0
        self.set_aside = 0
        self._thread = start_thread(SILENCE_THREAD, self._run)

    def wake(self) -> None:
        """A stream began an attempt: time its silence from now."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (a confirmation under way ends within its patience)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _last_heard(self) -> dict[str, float]:
        """Each member some stream is on: when the client last heard of it (a stream's delivery
        or opening, an answer to any request, a confirmation begun)."""
        heard: dict[str, float] = {}
        members = self._gateway.members
        for stream in self._streams():
            at, member = stream.heard(), stream.member
            if at is None or member is None:
                continue
            latest = max(at, members.last_answer(member), self._confirmed.get(member, float("-inf")))
            heard[member] = max(heard.get(member, float("-inf")), latest)
        return heard

    def _run(self) -> None:
        while not self._stop.is_set():
            heard = self._last_heard()
            if not heard:
                self._wake.wait()  # a stream that begins an attempt wakes it
                self._wake.clear()
                continue
            member = min(heard, key=heard.__getitem__)
            wait = heard[member] + self.quiet - time.monotonic()
            if wait > 0:
                self._wake.wait(wait)
                self._wake.clear()
                continue
            self._confirm(member, heard[member])

    def _confirm(self, member: str, last_heard: float) -> None:
        """Ask ``member`` for its status; set it aside (and SUSPEND the client) when it does not
        answer in time or knows no leader."""
        began = time.monotonic()
        self._confirmed[member] = began
        self.confirmations += 1
        try:
            if self._gateway.member_leader(member, self._gateway.patience.confirm):
                return
            problem = "it knows no leader (cut off from the other members)"
        except EtcdError:
            return  # a refusal is an answer: the member is there
        except BackendUnavailable as exc:
            problem = f"asking it for its status failed: {exc}"
        if self._stop.is_set() or self._gateway.closing:
            return
        quiet = began - last_heard
        reason = f"the watch streams on etcd member {member} were silent for {quiet:.1f} s and {problem}"
        self.set_aside += 1
        if len(self._gateway.endpoints) > 1:
            self._gateway.members.set_aside(member, reason)  # cuts the streams: they resume elsewhere
        self._gateway.failed(reason)
