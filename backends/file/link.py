"""The file store's faults as the client's connection state (:mod:`discovery_sync.connection`).

A writing client is SUSPENDED while its heartbeat fails (EROFS after a read-only remount, ENOSPC
when a record must be written back on a full disk, EACCES, EIO, …) or hangs (a beat under way
for more than ``max(2 s, its interval)``: a stalled mount, :meth:`.liveness.Heartbeat.trouble`).
It is LOST once no beat has succeeded for longer than the shortest time a reader gives its
records, ``min(TTL, 10 s)``: a reader whose TTL is shorter waits as long as this client's
heartbeat step asks (:class:`.liveness.Patience`), one with ``uniform_ttl`` has a TTL no shorter
than this writer's, reference workers sweep at 10 s; readers may have removed its records since.
Once a beat succeeds again it is connected again: RECONNECTED naming the store keys of the
records its heartbeat wrote back meanwhile (after LOST always, the keys possibly none), or
without keys after SUSPENDED when none had to be. A record removed by someone else and written
back while the heartbeat works changes nothing (the heartbeat logs it).

Every client, a read-only one included, is SUSPENDED too while its rescans fail (a bucket that
cannot be read; for a read-only client, a store whose every bucket directory was removed after
it saw one: a store that never existed is an empty one to it) or hang (a rescan under way for
longer than ``max(2 s, 8 x a usual rescan of as many files)``: a stalled mount), and connected again once they
read the store.

A beat or a rescan stalled in the kernel cannot report itself: the ``discovery-sync-file-link``
thread of every client judges from in-memory timestamps alone, at the deadlines they set (the
stall bounds of the beat and the rescan under way, the lose bound), and never touches the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sized
from pathlib import Path

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.connection import ConnectionState, ConnectionStates
from discovery_sync.threads import start_thread

from .liveness import Heartbeat
from .rescan import Rescans
from .wire import REFERENCE_TTL

LINK_THREAD = "discovery-sync-file-link"
#: deadlines are judged this long after they fall (the bounds are strict: "longer than")
MARGIN = 0.001


def lose_after(ttl: float) -> float:
    """Seconds without a successful beat after which readers may have removed a writer's records
    (see the module docstring)."""
    return min(ttl, REFERENCE_TTL)


class Link:
    """Reports one client's store faults to its :class:`ConnectionStates` (see the module
    docstring). ``heartbeat`` is None for a read-only client; ``rescans()`` gives the client's
    rescans (made after the link); ``owned()`` says which records the client has now (a copy,
    taken without waiting)."""

    def __init__(
        self,
        connection: ConnectionStates,
        root: Path,
        *,
        heartbeat: Heartbeat | None,
        rescans: Callable[[], Rescans],
        owned: Callable[[], Sized],
        lose_after: float,
        clock: Clock = SYSTEM,
    ) -> None:
        self._connection = connection
        self._root = root
        self._heartbeat = heartbeat
        self._rescans = rescans
        self._owned = owned
        self._lose_after = lose_after
        self._clock = clock
        self._lock = threading.Lock()  # a leaf but for ConnectionStates' own (a leaf too)
        self._since = clock.monotonic()  # stands for the last good beat until the first one
        self._scan_trouble: str | None = None
        self._rewritten: set[str] = set()  # keys written back since the client was last connected
        self._wake = threading.Event()
        self._stopping = False
        self._thread = start_thread(LINK_THREAD, self._run, start=False)
        clock.enroll(self._thread)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def timing_changed(self) -> None:
        """A beat began, or a rescan began or ended: the link thread judges again and sets its
        next deadline."""
        self._wake.set()

    def written_back(self, key: str) -> None:
        """This client wrote back its record ``key`` (gone, or replaced by a stranger): named when
        it is connected again, unless it was connected when it wrote it (nothing was lost then)."""
        with self._lock:
            if self._connection.state is not ConnectionState.CONNECTED:
                self._rewritten.add(key)

    def scanned(self, trouble: str | None) -> None:
        """A rescan ended: why it could not read the store (None: it could)."""
        with self._lock:
            self._scan_trouble = trouble
            self._judge()

    def judge(self) -> None:
        """Report the state the facts call for (after a beat, and at the link thread's deadlines)."""
        with self._lock:
            self._judge()

    def _judge(self) -> None:
        connection, now = self._connection, self._clock.monotonic()
        trouble = self._scan_trouble or self._scan_stalled(now)
        heartbeat = self._heartbeat
        if heartbeat is not None:
            trouble = heartbeat.trouble(now) or trouble
            silent = now - self._last_good(heartbeat)
            if silent > self._lose_after and self._owned():
                connection.lose(
                    f"no heartbeat of the file store at {self._root} succeeded for {silent:.1f} s, longer than "
                    f"readers give a record ({self._lose_after:g} s): they may have removed this client's records"
                    + (f" ({trouble})" if trouble else "")
                )
                return
        if trouble is not None:
            connection.suspend(f"the file store at {self._root}: {trouble}")
            return
        state = connection.state
        if state is ConnectionState.CONNECTED or state is ConnectionState.CLOSED:
            return
        rewritten = sorted(self._rewritten)
        if state is ConnectionState.LOST or rewritten:
            connection.reconnect(self._reconnected(rewritten), rewritten)
        else:
            connection.resume(self._reconnected(rewritten))
        if connection.state is ConnectionState.CONNECTED:
            self._rewritten.clear()

    def _scan_stalled(self, now: float) -> str | None:
        rescans = self._rescans()
        since = rescans.scanning_since
        if since is not None and now - since > rescans.stall_after:
            return f"a rescan has been stalled by the store for {now - since:.1f} s"
        return None

    def _reconnected(self, rewritten: list[str]) -> str:
        what = "the heartbeat" if self._heartbeat is not None else "rescans"
        wrote = f"wrote back {len(rewritten)} record(s)" if rewritten else "no record had to be written back"
        return f"the file store at {self._root} answers {what} again; {wrote}"

    def _last_good(self, heartbeat: Heartbeat) -> float:
        beaten_at = heartbeat.beaten_at
        return self._since if beaten_at is None else beaten_at

    def _run(self) -> None:
        """The link thread: judge, then wait for the next deadline (or a beat's start)."""
        while not self._stopping:
            self.judge()
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(deadline - self._clock.monotonic(), MARGIN)
            self._clock.wait(self._wake, timeout)
            self._wake.clear()

    def _next_deadline(self) -> float | None:
        """When the facts known now call for a judgement without anything else happening: the
        stall bounds of the beat and the rescan under way, or the lose bound (None: only the
        start of a beat or a rescan)."""
        now, rescans, heartbeat = self._clock.monotonic(), self._rescans(), self._heartbeat
        deadlines = [
            since + bound + MARGIN
            for since, bound in (
                (rescans.scanning_since, rescans.stall_after),
                (None, 0.0) if heartbeat is None else (heartbeat.beating_since, heartbeat.stall_after),
            )
            if since is not None and since + bound + MARGIN > now
        ]
        if heartbeat is not None and self._connection.state is not ConnectionState.LOST:
            lose_at = self._last_good(heartbeat) + self._lose_after + MARGIN
            # passed without owning a record: look again every interval (a record may come)
            deadlines.append(lose_at if lose_at > now else now + heartbeat.interval)
        return min(deadlines, default=None)
