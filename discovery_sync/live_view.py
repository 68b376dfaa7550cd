"""Live views: a map kept current from a watch by a background thread.

The blocking counterpart of the reference runtime's ``watch_and_extract_field`` and
``watch_and_extract_base_model_field``: the client's view pump (one named thread for all its
views, :mod:`.view_pump`) consumes ``list_and_watch(query)`` and keeps ``key → extract(record)``
current, so that callers read it at any time or block until it
says what they wait for, instead of writing a consumer thread of their own. It is called a
*view* because callers only read it, and *live* because it changes under them; a *watch* is
already the stream of events it is built from.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .errors import ValidationError, WatchClosed, WatchFailed
from .events import Added, DiscoveryEvent, ModelTaintsUpdated, Resync
from .identity import DiscoveryInstanceId, RecordKind
from .model import DiscoveryInstance, Model
from .options import wait_timeout
from .queries import Query
from .watch import Watch, WatchTimeout

if TYPE_CHECKING:
    from .discovery import Discovery

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_T = TypeVar("_T")
Callback = Callable[[Mapping[Any, Any], DiscoveryEvent], None]

INITIAL_SYNC_TIMEOUT = 60.0  # the first Resync is queued when list_and_watch returns; this is a safety bound


def instance_key(instance: DiscoveryInstance) -> int:
    """The default key: the record's instance id (the worker's, for endpoints and model cards)."""
    return instance.instance_id


class LiveView(Mapping[K, V]):
    """``key → value`` for every record matching a query, kept current by its client's view pump
    (one thread, ``discovery-sync-live-view-pump-N``, for every view of the client:
    :mod:`.view_pump`); read it like a read-only mapping.

    * ``extract(x)`` makes the value: ``x`` is the card (``card_json``) of a model card, or the
      card as a ``card_type`` when one is given (see :meth:`Model.card_as`: a dataclass, a
      pydantic model, ...), and the instance itself for other kinds; without ``extract`` the
      value is the whole instance, or the typed card. A record whose card does not fit
      ``card_type`` or whose ``extract`` raises is skipped with a warning (the reference skips
      cards that do not deserialise), and the key keeps what it had.
    * ``key(instance)`` makes the key; by default the instance id, as the reference keys it.
      That key is ambiguous when one worker has several matching records (several endpoints,
      or a base card and LoRA cards): then the value is that of the most recently added record
      still present. Pass ``key=lambda i: i.id()`` to keep one entry per record.
    * ``base_models_only`` (model queries only): LoRA cards (``model_suffix`` set) never add,
      replace or remove an entry, whatever the order of their arrival and removal.
    * A ``Resync`` of the watch replaces the whole map. When the watch fails or the view is
      closed (``close()``, or ``shutdown()`` of its client), every read raises ``WatchFailed``
      (cause chained) or ``WatchClosed`` rather than serve a map that no longer changes.
    * ``on_change(snapshot, event)`` callbacks run on the pump's thread after each change (not
      for the initial state), one after the other for all the views of a client, as kazoo runs
      its watchers: a slow one delays the other views. An exception in one is logged and the
      view goes on; a ``BaseException`` (``SystemExit``...) ends that view alone (reads raise
      ``WatchFailed``).

    The map is complete when the constructor returns (like ``list()``). Reads are cheap: a
    snapshot is copied once per change, when first asked for. ``close()`` closes the watch and
    takes the view off the pump (no callback of it runs once it returns, unless called from
    one); a view dropped without it runs until its client shuts down.
    """

    def __init__(
        self,
        client: Discovery,
        query: Query,
        extract: Callable[[Any], V] | None = None,
        *,
        base_models_only: bool = False,
        key: Callable[[DiscoveryInstance], K] | None = None,
        on_change: Callback | None = None,
        card_type: type[Any] | None = None,
    ) -> None:
        if not isinstance(query, Query):
            raise ValidationError(f"live_view() takes a Query, got {type(query).__name__}")
        for option, given in (("base_models_only", base_models_only), ("card_type", card_type)):
            if given and query.kind is not RecordKind.MODEL:
                raise ValidationError(f"{option} applies to model queries, not to {query}")
        if card_type is not None and not isinstance(card_type, type):
            raise ValidationError(f"live_view() card_type must be a class, got {type(card_type).__name__}")
        for name, function in (("extract", extract), ("key", key), ("on_change", on_change)):
            if function is not None and not callable(function):
                raise ValidationError(f"live_view() {name} must be callable, got {type(function).__name__}")
        self.query = query
        self._extract = extract
        self._key: Callable[[DiscoveryInstance], Any] = key or instance_key
        self._base_models_only = base_models_only
        self._card_type = card_type
        self._callbacks: list[Callback] = [on_change] if on_change is not None else []
        self._changed = threading.Condition()
        self._records: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._entries: dict[DiscoveryInstanceId, tuple[Any, Any]] = {}  # id -> (key, value)
        self._by_key: dict[Any, dict[DiscoveryInstanceId, Any]] = {}  # key -> {id: value}, oldest first
        self._values: dict[Any, Any] = {}  # key -> the value shown: that of the most recent id in _by_key
        self._version = 0
        self._snapshot: tuple[int, Mapping[K, V]] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._watch: Watch = client.list_and_watch(query)
        self._recorder = client._metrics  # counts a crash of the view
        self._pump = client._view_pump
        try:
            self._initial_sync()
        except BaseException:
            self._watch.close()
            raise
        self._watch._feed.on_ready(lambda: self._pump.ready(self))
        self._pump.add(self)  # drained at once: what came after the initial state

    # -- reading ------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Grows by one on every change of the map (0: the initial state)."""
        return self._version

    @property
    def closed(self) -> bool:
        return self._closed

    def snapshot(self) -> Mapping[K, V]:
        """An immutable copy of the current map."""
        with self._changed:
            self._raise_if_stopped()
            return self._current()

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: V | _T) -> V | _T: ...
    def get(self, key: Any, default: Any = None) -> Any:
        with self._changed:
            self._raise_if_stopped()
            return self._values.get(key, default)

    def __getitem__(self, key: K) -> V:
        with self._changed:
            self._raise_if_stopped()
            return self._values[key]  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        with self._changed:
            self._raise_if_stopped()
            return key in self._values

    def __len__(self) -> int:
        with self._changed:
            self._raise_if_stopped()
            return len(self._values)

    def __iter__(self) -> Iterator[K]:
        """The keys of a snapshot (changes during the iteration do not affect it)."""
        return iter(self.snapshot())

    def keys(self) -> KeysView[K]:
        return self.snapshot().keys()

    def items(self) -> ItemsView[K, V]:
        return self.snapshot().items()

    def values(self) -> ValuesView[V]:
        return self.snapshot().values()

    def __repr__(self) -> str:
        state = "failed" if self._failure else "closed" if self._closed else f"{len(self._values)} entries"
        return f"<LiveView {self.query} version={self._version} {state}>"

    def wait_for(self, predicate: Callable[[Mapping[K, V]], object], timeout: float | None = None) -> Mapping[K, V]:
        """Block until ``predicate(snapshot)`` is true and return that snapshot; WatchTimeout
        after ``timeout`` seconds (None: no limit), WatchFailed or WatchClosed if the view stops."""
        limit = wait_timeout(timeout, "timeout")
        deadline = None if limit is None else time.monotonic() + limit
        with self._changed:
            while True:
                self._raise_if_stopped()
                snapshot = self._current()
                if predicate(snapshot):
                    return snapshot
                self._wait(deadline, "the predicate to hold")

    def wait_changed(self, since_version: int, timeout: float | None = None) -> int:
        """Block until :attr:`version` exceeds ``since_version`` and return it; WatchTimeout after
        ``timeout`` seconds, WatchFailed or WatchClosed if the view stops."""
        limit = wait_timeout(timeout, "timeout")
        deadline = None if limit is None else time.monotonic() + limit
        with self._changed:
            while self._version <= since_version:
                self._raise_if_stopped()
                self._wait(deadline, f"a change after version {since_version}")
            return self._version

    def add_callback(self, callback: Callback) -> None:
        """Call ``callback(snapshot, event)`` on the view's thread after each later change."""
        if not callable(callback):
            raise ValidationError(f"a live-view callback must be callable, got {type(callback).__name__}")
        with self._changed:
            self._callbacks.append(callback)

    # -- lifecycle ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the view; later reads raise WatchClosed. Idempotent."""
        self._watch.close()
        self._stopped(None)

    def __enter__(self) -> LiveView[K, V]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the thread ---------------------------------------------------------------------------------
    def _initial_sync(self) -> None:
        while True:
            event = self._watch.get(timeout=INITIAL_SYNC_TIMEOUT)
            if isinstance(event, Resync):
                self._apply(event)
                self._version = 0
                return

    def drain(self) -> None:
        """The pump's job for this view: apply every event its watch holds now. Nothing escapes:
        a ``BaseException`` of a callback ends this view alone."""
        try:
            while not self._closed:
                try:
                    event = self._watch.get(timeout=0)
                except WatchTimeout:
                    return
                except WatchClosed:
                    self._stopped(None)
                    return
                except WatchFailed as exc:
                    self._stopped(exc)
                    return
                if self._apply(event):
                    self._notify(event)
        except BaseException as exc:
            log.error("live view %r ended: %s", self, exc, exc_info=exc)
            self._recorder.thread_crashed()
            self._watch.close()
            self._stopped(exc)

    def _stopped(self, failure: BaseException | None) -> None:
        with self._changed:
            first = not self._closed
            if first:
                self._closed = True
                self._failure = failure
            self._changed.notify_all()
        if first:  # outside the lock: the pump may be applying an event
            self._pump.remove(self)

    def _notify(self, event: DiscoveryEvent) -> None:
        with self._changed:
            callbacks = list(self._callbacks)
            snapshot = self._current() if callbacks else None
        for callback in callbacks:
            try:
                callback(snapshot, event)  # type: ignore[arg-type]
            except Exception:
                log.exception("a callback of %r failed (the view goes on)", self)

    # -- applying events (values are extracted outside the lock: extract is the caller's code) -------
    def _apply(self, event: DiscoveryEvent) -> bool:
        """Apply one event; True when the map changed."""
        if isinstance(event, Resync):
            entries = {i.id(): entry for i in event.instances if (entry := self._entry(i)) is not None}
            with self._changed:
                before = self._visible()
                self._records = {i.id(): i for i in event.instances}
                self._entries, self._by_key, self._values = {}, {}, {}
                for instance_id, (key, value) in entries.items():
                    self._put(instance_id, key, value)
                return self._changed_from(before)
        if isinstance(event, ModelTaintsUpdated):
            instance = self._records.get(event.id)
            if not isinstance(instance, Model):
                return False
            event = Added(_with_taints(instance, event.taints))
        if isinstance(event, Added):
            instance = event.instance
            entry = self._entry(instance)
            with self._changed:
                self._records[instance.id()] = instance
                if entry is None:
                    return False
                self._drop(instance.id())
                self._put(instance.id(), *entry)
                return self._bump()
        with self._changed:
            self._records.pop(event.id, None)
            return self._drop(event.id) and self._bump()

    def _entry(self, instance: DiscoveryInstance) -> tuple[Any, Any] | None:
        """(key, value) of a record, or None when the view leaves it out."""
        if self._base_models_only and not (isinstance(instance, Model) and instance.model_suffix is None):
            return None
        try:
            key = self._key(instance)
            subject: Any = instance
            if isinstance(instance, Model):
                subject = instance.card_as(self._card_type) if self._card_type else instance.card_json
            value = self._extract(subject) if self._extract is not None else (subject if self._card_type else instance)
            hash(key)
        except Exception as exc:
            log.warning("live view of %s skips %s: %r", self.query, instance.id().to_path(), exc)
            return None
        return key, value

    def _put(self, instance_id: DiscoveryInstanceId, key: Any, value: Any) -> None:
        self._entries[instance_id] = (key, value)
        self._by_key.setdefault(key, {})[instance_id] = value
        self._values[key] = value

    def _drop(self, instance_id: DiscoveryInstanceId) -> bool:
        entry = self._entries.pop(instance_id, None)
        if entry is None:
            return False
        key = entry[0]
        values = self._by_key[key]
        del values[instance_id]
        if values:
            self._values[key] = next(reversed(values.values()))  # the most recent one still present
        else:
            del self._by_key[key], self._values[key]
        return True

    def _visible(self) -> dict[Any, Any]:
        return dict(self._values)

    def _changed_from(self, before: dict[Any, Any]) -> bool:
        try:
            same = before == self._visible()
        except Exception:  # values that cannot be compared: count it as a change
            same = False
        return not same and self._bump()

    def _bump(self) -> bool:
        self._version += 1
        self._changed.notify_all()
        return True

    def _current(self) -> Mapping[K, V]:
        if self._snapshot is None or self._snapshot[0] != self._version:
            self._snapshot = (self._version, MappingProxyType(self._visible()))
        return self._snapshot[1]

    def _raise_if_stopped(self) -> None:
        if self._failure is not None:
            raise WatchFailed(f"the live view of {self.query} stopped: its watch failed") from self._failure
        if self._closed:
            raise WatchClosed(f"the live view of {self.query} is closed")

    def _wait(self, deadline: float | None, what: str) -> None:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise WatchTimeout(f"the live view of {self.query} timed out waiting for {what}")
        self._changed.wait(remaining)


def _with_taints(model: Model, taints: tuple[str, ...]) -> Model:
    """The card after a taint update (the event carries only the taints)."""
    card = dict(model.card_json)
    runtime_config = card.get("runtime_config")
    card["runtime_config"] = {**(runtime_config if isinstance(runtime_config, dict) else {}), "taints": list(taints)}
    return dataclasses.replace(model, card_json=card)
