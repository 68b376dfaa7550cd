"""One thread for every live view of a client: the ``discovery-sync-live-view-pump``.

A live view (:mod:`.live_view`) used to have a thread of its own blocked on its watch; 300 views
made 300 threads, and one change woke them all. Now each view's watch tells the pump when it has
something (:meth:`.watch.WatchFeed.on_ready`), and the pump's one thread drains the watches that
are ready, one view at a time, in the order they became ready. As kazoo runs every watcher on one
thread, so do the views of a client: their ``on_change`` callbacks run on that thread, one after
the other, and a slow callback delays the other views of the client (not their watches).

The thread starts with the first view and ends when the last one ended (closed, failed, or its
client shut down); the next view starts it again.
"""

from __future__ import annotations

import itertools
import threading
from typing import Protocol

from .threads import start_thread

THREAD_NAME = "discovery-sync-live-view-pump"
_numbers = itertools.count(1)


class Drained(Protocol):
    """What the pump drives: a view whose :meth:`drain` applies what its watch holds now."""

    def drain(self) -> None: ...


class ViewPump:
    """The live views of one client, and the thread that drains their watches."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._views: dict[int, Drained] = {}  # by id(): a view is a Mapping, which is unhashable
        self._ready: dict[int, Drained] = {}  # in the order they became ready
        self._thread: threading.Thread | None = None
        self._draining: Drained | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The pump's thread while it runs (None: no view is open)."""
        return self._thread

    def add(self, view: Drained) -> None:
        """A new view: drained from now on (the thread starts if it is not running)."""
        with self._lock:
            self._views[id(view)] = view
            if self._thread is None:
                self._thread = start_thread(f"{THREAD_NAME}-{next(_numbers)}", self._run)
            self._ready[id(view)] = view
            self._lock.notify()

    def ready(self, view: Drained) -> None:
        """``view``'s watch has something (called by producers: never blocks for long). A view
        removed meanwhile is not drained again."""
        with self._lock:
            if id(view) in self._views:
                self._ready[id(view)] = view
                self._lock.notify()

    def remove(self, view: Drained) -> None:
        """``view`` ended: never drained again. Unless called by the pump's thread itself (from
        the view's drain or callback), returns once the pump no longer drains it."""
        with self._lock:
            self._ready.pop(id(view), None)
            self._views.pop(id(view), None)
            self._lock.notify_all()
            while self._draining is view and threading.current_thread() is not self._thread:
                self._lock.wait()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._ready:
                    if not self._views:
                        self._thread = None
                        return
                    self._lock.wait()
                view = self._ready.pop(next(iter(self._ready)))
                self._draining = view
            try:
                view.drain()  # a view keeps its own failures: nothing escapes it
            finally:
                del view  # a closed view is not kept alive by this frame while the pump waits
                with self._lock:
                    self._draining = None
                    self._lock.notify_all()
