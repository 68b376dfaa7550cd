"""The members of an etcd cluster as one client sees them: which to ask first, which are set aside,
and cutting the requests that hang on a member once it is set aside.

A client is given every member's URL and talks to one at a time, the *current* member: the last
one that answered. A member that does not answer within its patience (:mod:`.deadlines`), refuses
connections, or answers HTTP 5xx is **set aside** for :data:`SET_ASIDE` seconds: requests try the
members that are not set aside first (the current one, then the others in the order given), and
the set-aside ones last, the one whose time is up soonest first. A member set aside that answers
after all is taken back at once.

Setting a member aside also **cuts** every connection this client has open to it
(:meth:`Connections.cut`): a request of another thread hung there (a ``register()``, a range, a
watch stream) fails at once and goes on to another member, instead of waiting out its own
timeout while the lease it depends on runs out. A request cut this way may still have reached the
member; every call the backend repeats is safe to repeat (a create-if-absent transaction, a put
of the same value, a delete, a keep-alive).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import urllib.parse
import weakref
from typing import Any

import requests
import urllib3
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from discovery_sync.clock import SYSTEM, Clock

log = logging.getLogger("discovery_sync.backends.etcd")

#: seconds a member that did not answer is asked only after every other one
SET_ASIDE = 10.0


def host_port(url: str) -> tuple[str, int]:
    """The host and port a member's URL names (80/443 when it names none)."""
    parts = urllib.parse.urlsplit(url)
    return (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


class Connections:
    """Every HTTP connection the sessions of one client opened (:meth:`adapter`), so that those
    to one member can be cut (:meth:`cut`). Closed connections drop out by themselves."""

    def __init__(self) -> None:
        self._open: weakref.WeakSet[HTTPConnection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pools = _tracking_pools(self._track)

    def _track(self, connection: Any) -> None:
        with self._lock:
            self._open.add(connection)

    def adapter(self, **options: Any) -> requests.adapters.HTTPAdapter:
        """An adapter for a session of this client whose connections are tracked."""
        return _TrackingAdapter(self._pools, **options)

    def cut(self, url: str | None = None) -> int:
        """Shut the socket of every connection to the member at ``url`` (None: to every member),
        idle or in use: a read blocked on one returns at once. How many were cut."""
        target = None if url is None else host_port(url)
        with self._lock:
            connections = list(self._open)
        cut = 0
        for connection in connections:
            sock = getattr(connection, "sock", None)
            if sock is None or (target is not None and (str(connection.host).lower(), connection.port) != target):
                continue
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                cut += 1
        return cut


def _tracking_pools(track: Any) -> dict[str, type[HTTPConnectionPool]]:
    """urllib3 pool classes whose new connections are handed to ``track``."""

    class TrackingPool(HTTPConnectionPool):
        def _new_conn(self) -> Any:
            connection = super()._new_conn()
            track(connection)
            return connection

    class TrackingTlsPool(HTTPSConnectionPool):
        def _new_conn(self) -> Any:
            connection = super()._new_conn()
            track(connection)
            return connection

    return {"http": TrackingPool, "https": TrackingTlsPool}


class _TrackingAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose pools track their connections (see :class:`Connections`)."""

    def __init__(self, pools: dict[str, type[HTTPConnectionPool]], **options: Any) -> None:
        self._pools = pools  # before the base class makes its pool manager
        super().__init__(**options)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        manager: urllib3.PoolManager = self.poolmanager
        manager.pool_classes_by_scheme = dict(self._pools)


class Members:
    """The member URLs of one client, in the order to try them (see the module docstring).

    Thread-safe; ``answered`` is cheap (a request's hot path)."""

    def __init__(self, urls: list[str], *, clock: Clock = SYSTEM, set_aside: float = SET_ASIDE) -> None:
        self.urls = list(urls)
        self.connections = Connections()
        self._clock = clock
        self._set_aside = set_aside
        self._current = self.urls[0]
        self._aside_until: dict[str, float] = {}
        self._last_answer: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        """The member that answered last (the first one given, before any answer)."""
        return self._current

    def order(self) -> list[str]:
        """Every member, in the order a request tries them."""
        now = self._clock.monotonic()
        with self._lock:
            start = self.urls.index(self._current)
            rotated = self.urls[start:] + self.urls[:start]
            ready = [url for url in rotated if self._aside_until.get(url, 0.0) <= now]
            aside = sorted((url for url in rotated if url not in ready), key=lambda url: self._aside_until[url])
        return ready + aside

    def preferred(self) -> str:
        """The member a new watch stream opens on: the first of :meth:`order`."""
        return self.order()[0]

    def answered(self, url: str) -> None:
        """``url`` answered a request: it is the current member (and no longer set aside)."""
        self._last_answer[url] = self._clock.monotonic()
        if url != self._current or url in self._aside_until:
            with self._lock:
                self._aside_until.pop(url, None)
                self._current = url

    def last_answer(self, url: str) -> float:
        """When (on the clock) ``url`` last answered; -inf when never."""
        return self._last_answer.get(url, float("-inf"))

    def is_aside(self, url: str) -> bool:
        return self._aside_until.get(url, 0.0) > self._clock.monotonic()

    def set_aside(self, url: str, reason: str) -> bool:
        """Ask ``url`` last for a while and cut the connections to it (``reason``: why, for the
        log); True when it was not set aside already. A client of one member cuts nothing."""
        now = self._clock.monotonic()
        with self._lock:
            newly = self._aside_until.get(url, 0.0) <= now
            self._aside_until[url] = now + self._set_aside
        if len(self.urls) > 1:  # a lone member is asked whatever it did: cutting its streams gains nothing
            if newly:
                log.warning(
                    "etcd member %s is set aside for %g s (%s); asking the others", url, self._set_aside, reason
                )
            self.connections.cut(url)
        return newly

    def status(self) -> dict[str, Any]:
        """The current member and the members set aside, with the seconds left for each."""
        now = self._clock.monotonic()
        with self._lock:
            aside = {url: round(until - now, 1) for url, until in self._aside_until.items() if until > now}
        return {"member": self._current, "set_aside": aside}
