"""The Discovery base class: the one blocking, thread-safe API every backend offers.

Backends implement a handful of storage primitives (``_get``, ``_create``, ``_replace``,
``_delete``, ``_list``, ``_store_lock``, ``_open_feed``, ``_probe``, ``_close``); the rules
every backend shares — model conflicts with rollback, replays, taint validation, event-source
immutability, ownership and shutdown — live here once.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from .cohort import CohortMembership, Replacement
from .connection import ConnectionState, ConnectionStates, StateListener
from .endpoint_leases import EndpointLease, EndpointLeases
from .errors import ClientClosed, ConflictError, DiscoveryError, InstanceReplaced, NotFoundError, ValidationError
from .events import WatchEvent
from .failover import FailoverLock, check_lock_name
from .identity import DiscoveryInstanceId, ModelCardInstanceId, RecordKind
from .metrics import BackendFigures, Metrics, Recorder, collect
from .model import DiscoveryInstance, Endpoint, EventChannel, EventSource, Model, R, stored_form
from .model_cards import check_replay, conflict_error, find_conflict, find_conflicts
from .queries import Query
from .reconcile import ordered
from .specs import DiscoverySpec, EndpointSpec, EventChannelSpec, EventSourceSpec, ModelSpec
from .taints import check_caller_taints, normalized_card, taints_of, with_taints
from .view_pump import ViewPump
from .watch import DEFAULT_WATCH_QUEUE_SIZE, Watch, WatchFeed

if TYPE_CHECKING:
    from .live_view import LiveView

log = logging.getLogger(__name__)

# live_view()'s overloads: the key and the value of a view, a card_type, the records whose
# extract takes them whole, and those of a query of several kinds or of unknown kind
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
_C = TypeVar("_C")
_N = TypeVar("_N", bound=Endpoint | EventChannel | EventSource)
_U = TypeVar("_U", bound=DiscoveryInstance)

_SPEC_TYPES = (EndpointSpec, ModelSpec, EventChannelSpec, EventSourceSpec)
_INSTANCE_TYPES = (Endpoint, Model, EventChannel, EventSource)


class CollectedGarbage(list[str]):
    """What :meth:`Discovery.collect_garbage` removed: the store keys, in order; and in
    ``not_removed``, dead records it found but could not remove (store key -> why)."""

    def __init__(self, removed: Iterable[str] = (), not_removed: Mapping[str, str] | None = None) -> None:
        super().__init__(removed)
        self.not_removed: dict[str, str] = dict(not_removed or {})


class Discovery(abc.ABC):
    """A client of one discovery store.

    All methods block and are safe to call from several threads. Records a client registers
    are owned by it: they live as long as the client (its lease) and ``shutdown()`` removes
    them at once.
    """

    #: the URL scheme of the backend, e.g. ``"file"``
    backend_name: str = ""
    #: connected with ``read_only=true``: it never writes to the store (no lease, no Kubernetes
    #: CR, no store directory, no removal of dead records); every write raises ValidationError
    read_only: bool = False

    def __init__(self, *, read_only: bool = False, logical_instance_id: int | None = None) -> None:
        self._api_lock = threading.RLock()
        self._owned: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._closed = False
        self.read_only = read_only
        self._logical_instance_id = logical_instance_id
        self._endpoint_leases = EndpointLeases(self)
        #: the connection state backends report to (docs/design.md §5.5)
        self._connection = ConnectionStates(type(self).__name__)
        #: this client's membership of a failover cohort (clients sharing a logical instance id), or None
        self._cohort: CohortMembership | None = None
        if logical_instance_id is not None and not read_only:
            self._cohort = CohortMembership(
                logical_instance_id, on_mark=lambda replacement: self._connection.lose(str(replacement), final=True)
            )
        self._failover_locks: list[FailoverLock] = []  # closed by shutdown()
        #: the counters of metrics() that no backend keeps (watches, failed writes, crashes)
        self._metrics = Recorder()
        self._view_pump = ViewPump()  # the one thread of its live views

    # -- identity ---------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def instance_id(self) -> int:
        """This client's instance id: the id its endpoints, models and event channels carry."""

    @property
    def logical_instance_id(self) -> int | None:
        """The failover cohort's shared id when this client is a cohort member (docs/design.md §5),
        else None; a member's ``instance_id`` is this id."""
        return self._logical_instance_id

    # -- registration -----------------------------------------------------------------------------
    @overload
    def register(self, spec: EndpointSpec) -> Endpoint: ...
    @overload
    def register(self, spec: ModelSpec) -> Model: ...
    @overload
    def register(self, spec: EventChannelSpec) -> EventChannel: ...
    @overload
    def register(self, spec: EventSourceSpec) -> EventSource: ...
    def register(self, spec: DiscoverySpec) -> DiscoveryInstance:
        """Store a record for this client and return the stored instance (of the spec's kind:
        ``register(EndpointSpec(...))`` returns an :class:`Endpoint`, and so on).

        * Endpoints and event channels are created if absent; an existing record with the same
          id is kept as it is (and returned).
        * Models are refused (ConflictError) when another model is registered on the endpoint;
          a conflict found after writing rolls the write back. Re-registering the same id is a
          replay: accepted when only ``runtime_config.taints`` differ, and the stored taints stay.
        * Event sources are immutable: the same descriptor again succeeds, a different one raises
          ConflictError and keeps the original.

        The record must be storable as JSON the reference runtime reads back unchanged (see
        :mod:`discovery_sync.jsonsafe`): otherwise ValidationError naming the field, and nothing
        is written. The returned instance holds the record as stored (tuples became lists).
        """
        if not isinstance(spec, _SPEC_TYPES):
            raise ValidationError(
                f"register() takes an EndpointSpec, ModelSpec, EventChannelSpec or EventSourceSpec, "
                f"got {type(spec).__name__}"
            )
        self._check_writable("register records")
        self._check_spec(spec)
        instance = stored_form(spec.to_instance(self.instance_id))
        if isinstance(instance, Model):
            instance = dataclasses.replace(instance, card_json=normalized_card(instance.card_json))
        with self._api_lock:
            self._check_open()
            try:
                stored = self._store_registered(instance)
            except Exception as exc:
                self._metrics.write_failed("register", exc)
                raise
            self._owned[stored.id()] = stored
            return stored

    def _store_registered(self, instance: DiscoveryInstance) -> DiscoveryInstance:
        """Under the API lock: store ``instance`` by the rules of its kind; the stored instance."""
        if self._cohort is not None and self._in_cohort(instance):
            return self._register_in_cohort(self._cohort, instance)
        if isinstance(instance, Model):
            return self._register_model(instance)
        if isinstance(instance, EventSource):
            return self._register_event_source(instance)
        return self._create_or_keep(instance)

    def _in_cohort(self, instance: DiscoveryInstance) -> bool:
        """Whether ``instance`` is one of this cohort member's shared records: every record under
        its instance id, and an event source published under it."""
        return not isinstance(instance, EventSource) or instance.publisher_id == self.instance_id

    def _register_in_cohort(self, cohort: CohortMembership, instance: DiscoveryInstance) -> DiscoveryInstance:
        """Register as a failover-cohort member (docs/design.md §4.1): under the store lock, claim
        the logical id (InstanceReplaced once a successor replaced this client), then replace
        whatever is stored under the record's id, a predecessor's record included: readers see
        the worker change in place. A model card still may not conflict with another worker's
        model on the endpoint."""
        cohort.check()
        if isinstance(instance, Model):
            lock_key = Query.models(instance.namespace, instance.component, instance.endpoint).key_prefix()
        else:
            lock_key = instance.kind.bucket + "/" + instance.id().to_path()
        with self._store_lock(instance.kind, lock_key):
            self._claim(cohort)
            cohort.claimed = True
            if isinstance(instance, Model):
                endpoint_models = Query.models(instance.namespace, instance.component, instance.endpoint)
                others = [m for m in self._list_models(endpoint_models) if m.id() != instance.id()]
                conflict = find_conflict(instance, others)
                if conflict is not None:
                    raise conflict_error(instance, conflict)
            self._take_over(instance)
        return instance

    def _check_spec(self, spec: DiscoverySpec) -> None:
        """A backend's own checks of a spec before anything is stored (none by default)."""
        return None

    def _create_or_keep(self, instance: DiscoveryInstance) -> DiscoveryInstance:
        existing = self._create(instance)
        if existing is None:
            return instance
        if existing != instance:
            log.warning(
                "%s %s is already registered with a different value; keeping the stored one "
                "(unregister it first to change it)",
                instance.kind.value,
                instance.id().to_path(),
            )
        return existing

    def _register_model(self, model: Model) -> Model:
        endpoint_models = Query.models(model.namespace, model.component, model.endpoint)
        with self._store_lock(RecordKind.MODEL, endpoint_models.key_prefix()):
            existing = _stored_model(self._get(model.id()))
            if existing is not None:
                check_replay(existing, model)
                return existing
            conflict = find_conflict(model, self._list_models(endpoint_models))
            if conflict is not None:
                raise conflict_error(model, conflict)
            existing = _stored_model(self._create(model))
            if existing is not None:  # written by someone else between _get and _create
                check_replay(existing, model)
                return existing
            # a write that races ours may be seen here; every conflicting model gets a say
            racing = find_conflicts(model, self._list_models(endpoint_models))
            conflict = next((c for c in racing if self._loses_conflict(model, c)), None)
            if conflict is not None:
                try:
                    self._delete(model.id())
                except Exception as exc:
                    raise ConflictError(
                        f"{conflict_error(model, conflict)}; rolling the write back failed as well: {exc}"
                    ) from exc
                raise conflict_error(model, conflict)
            return model

    def _loses_conflict(self, model: Model, conflict: Model) -> bool:
        """Whether a conflict found after writing ``model`` makes it roll back.

        Backends that can order writes (etcd: create revisions) override this so that exactly
        one of two racing writers wins; under a store lock a post-write conflict always loses.
        """
        return True

    def _register_event_source(self, source: EventSource) -> EventSource:
        with self._store_lock(source.kind, source.kind.bucket + "/" + source.id().to_path()):
            existing = self._get(source.id()) or self._create(source)
            if existing is None or existing == source:
                return source
            raise ConflictError(
                f"event source {source.id().to_path()} cannot change its descriptor: it is already "
                "registered with different metadata; use a new publisher_id for a new incarnation"
            )

    def unregister(self, instance: DiscoveryInstance | DiscoveryInstanceId) -> None:
        """Remove a record this client registered. NotFoundError when it owns no such record;
        ConflictError, with nothing removed, for an endpoint that leases of this client hold
        (:meth:`lease_endpoint`): release them instead."""
        instance_id = instance.id() if isinstance(instance, _INSTANCE_TYPES) else instance
        self._check_writable("unregister records")
        with self._api_lock:
            self._check_open()
            try:
                if self._cohort is not None:
                    self._cohort.check()
                if instance_id not in self._owned:
                    raise NotFoundError(f"this client has not registered {_describe(instance_id)}")
                self._endpoint_leases.check_unleased(instance_id)
                self._delete(instance_id)
            except Exception as exc:
                self._metrics.write_failed("unregister", exc)
                raise
            del self._owned[instance_id]

    def update_model_taints(self, model_id: ModelCardInstanceId, taints: Any) -> Model:
        """Replace the caller taints of this client's base model card; return the stored model.

        Taints with the reserved prefix ``dynamo.topology/`` are refused; topology taints are
        derived from ``runtime_config.topology_domains`` and kept. Stored sorted and unique.
        ValidationError, with nothing written, for taints that are not non-empty valid strings.
        """
        if not isinstance(model_id, ModelCardInstanceId):
            raise ValidationError(f"update_model_taints() takes a ModelCardInstanceId, got {type(model_id).__name__}")
        self._check_writable("update model taints")
        if model_id.instance_id != self.instance_id:
            raise ValidationError(
                f"cannot update the taints of {model_id.to_path()}: this client owns instance {self.instance_id:x}"
            )
        if not model_id.is_base:
            raise ValidationError("taints can be updated only on base model cards (no model_suffix)")
        caller_taints = check_caller_taints(taints)  # before the locks, and a generator is read once
        with self._api_lock:
            self._check_open()
            try:
                return self._store_taints(model_id, caller_taints)
            except Exception as exc:
                self._metrics.write_failed("update_model_taints", exc)
                raise

    def _store_taints(self, model_id: ModelCardInstanceId, caller_taints: frozenset[str]) -> Model:
        """Under the API lock: :meth:`update_model_taints` of checked taints."""
        if self._cohort is not None:
            self._cohort.check()
        endpoint_models = Query.models(model_id.namespace, model_id.component, model_id.endpoint)
        with self._store_lock(RecordKind.MODEL, endpoint_models.key_prefix()):
            existing = self._get(model_id)
            if not isinstance(existing, Model):
                raise NotFoundError(f"model card {model_id.to_path()} is not registered")
            card = with_taints(existing.card_json, caller_taints)
            updated = stored_form(dataclasses.replace(existing, card_json=card))
            if taints_of(updated.card_json) == taints_of(existing.card_json):
                return existing
            self._replace(updated)
            self._owned[model_id] = updated
            return updated

    def owned(self) -> tuple[DiscoveryInstance, ...]:
        """The records this client registered and has not unregistered."""
        with self._api_lock:
            if self._cohort is not None and self._cohort.replaced is not None:
                return ()
            return ordered(self._owned.values())

    def lease_endpoint(self, spec: EndpointSpec) -> EndpointLease:
        """A lease of an endpoint registration shared by every part of the process serving it.

        The first lease of an endpoint id registers the endpoint; later leases share that
        registration, which is removed once the last lease is released (``release()`` or the
        end of a ``with`` block). A lease with a different value for a leased id raises
        ConflictError and leaves the other leases alone.

        A registration stored before the first lease with the same value (made by this client's
        ``register()``, or by another client with the same instance id) is borrowed: it stays
        when every lease is released. A different stored value raises ConflictError.

        While leases hold the registration, ``unregister()`` of it raises ConflictError: release
        them instead. A lease of a held registration checks that its record is still stored and
        registers it again when it vanished by another route (deleted in the store, swept).

        The last release retries a failing unregister with backoff (50 ms doubling to 5 s) until
        it succeeds, the record is gone, a new lease takes the registration, or the client shuts
        down. A lease taken while it retries shares the record still stored (the release then
        returns), or raises BackendUnavailable saying why it cannot. A lease taken after a
        release registers again even while a listing still shows the removed record. A lease
        waits at most 30 s (``endpoint_leases.WAIT_TIMEOUT``) for another thread's store call
        on the same endpoint, then raises BackendUnavailable.

        Only an EndpointSpec can be leased (ValidationError otherwise); ClientClosed after shutdown().
        """
        self._check_writable("lease endpoints")
        if self._cohort is not None:
            self._cohort.check()
        return self._endpoint_leases.acquire(spec)

    # -- reading ----------------------------------------------------------------------------------
    def get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        """The record stored under ``instance_id`` now (see :func:`~discovery_sync.id_from_key`
        for store keys), or None when there is none."""
        if not isinstance(instance_id, DiscoveryInstanceId):
            raise ValidationError(
                f"get() takes an instance id (e.g. EndpointInstanceId), got {type(instance_id).__name__}"
            )
        self._check_open()
        return self._get(instance_id)

    def list(self, query: Query[R]) -> builtins.list[R]:
        """The records matching ``query`` now, in a stable order (of its kind: ``list(Query.endpoints())``
        is a ``list[Endpoint]``)."""
        _check_query(query)
        self._check_open()
        return cast("builtins.list[R]", self._list_ordered(query))  # matched by the query: of its kind

    def _list_ordered(self, query: Query) -> builtins.list[DiscoveryInstance]:
        """:meth:`list` of a checked query: :meth:`_list` filtered and ordered (a backend that
        keeps ordered results overrides this)."""
        return list(ordered(i for i in self._list(query) if query.matches(i)))

    def list_and_watch(self, query: Query[R], *, queue_size: int = DEFAULT_WATCH_QUEUE_SIZE) -> Watch[R]:
        """Watch ``query``; returns once the watch is established.

        The watch yields one Added per matching record, then one Resync with all of them, then
        every later change. After falling behind it yields the missed changes and a Resync.
        ``watch.close()`` releases what the watch holds; an unclosed one lasts until ``shutdown()``.
        The watch of a ``Query[R]`` is a ``Watch[R]``: its ``Added`` events carry an ``R``.
        """
        _check_query(query)
        self._check_open()
        feed = WatchFeed(query, maxsize=queue_size)
        self._open_feed(feed)
        self._metrics.watch_opened(feed)
        return Watch(feed)

    # live_view()'s types. The value: what extract returns, else the card_type, else the record.
    # extract takes a model card's card (a dict, or a card_type) and any other record whole (a
    # query of several kinds or of unknown kind: either). The key: what key returns, else the
    # instance id (an int). Every type variable of an overload is bound by the arguments it
    # requires (an unbound one makes mypy infer lambdas from the upper bounds): hence a variant
    # without key and one with it.
    @overload
    def live_view(
        self,
        query: Query[Model],
        extract: Callable[[dict[str, Any]], _V],
        *,
        base_models_only: bool = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _V], WatchEvent[Model]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[int, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[Model],
        extract: Callable[[dict[str, Any]], _V],
        *,
        base_models_only: bool = False,
        key: Callable[[Model], _K],
        on_change: Callable[[Mapping[_K, _V], WatchEvent[Model]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[_K, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[Model],
        extract: Callable[[_C], _V],
        *,
        base_models_only: bool = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _V], WatchEvent[Model]], None] | None = None,
        card_type: type[_C],
    ) -> LiveView[int, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[Model],
        extract: Callable[[_C], _V],
        *,
        base_models_only: bool = False,
        key: Callable[[Model], _K],
        on_change: Callable[[Mapping[_K, _V], WatchEvent[Model]], None] | None = None,
        card_type: type[_C],
    ) -> LiveView[_K, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_N],
        extract: Callable[[_N], _V],
        *,
        base_models_only: Literal[False] = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _V], WatchEvent[_N]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[int, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_N],
        extract: Callable[[_N], _V],
        *,
        base_models_only: Literal[False] = False,
        key: Callable[[_N], _K],
        on_change: Callable[[Mapping[_K, _V], WatchEvent[_N]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[_K, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: Callable[[_U | dict[str, Any]], _V],
        *,
        base_models_only: bool = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _V], WatchEvent[_U]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[int, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: Callable[[_U | dict[str, Any]], _V],
        *,
        base_models_only: bool = False,
        key: Callable[[_U], _K],
        on_change: Callable[[Mapping[_K, _V], WatchEvent[_U]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[_K, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: Callable[[_U | _C], _V],
        *,
        base_models_only: bool = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _V], WatchEvent[_U]], None] | None = None,
        card_type: type[_C],
    ) -> LiveView[int, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: Callable[[_U | _C], _V],
        *,
        base_models_only: bool = False,
        key: Callable[[_U], _K],
        on_change: Callable[[Mapping[_K, _V], WatchEvent[_U]], None] | None = None,
        card_type: type[_C],
    ) -> LiveView[_K, _V]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: None = None,
        *,
        base_models_only: bool = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _C], WatchEvent[_U]], None] | None = None,
        card_type: type[_C],
    ) -> LiveView[int, _C]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: None = None,
        *,
        base_models_only: bool = False,
        key: Callable[[_U], _K],
        on_change: Callable[[Mapping[_K, _C], WatchEvent[_U]], None] | None = None,
        card_type: type[_C],
    ) -> LiveView[_K, _C]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: None = None,
        *,
        base_models_only: bool = False,
        key: None = None,
        on_change: Callable[[Mapping[int, _U], WatchEvent[_U]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[int, _U]: ...
    @overload
    def live_view(
        self,
        query: Query[_U],
        extract: None = None,
        *,
        base_models_only: bool = False,
        key: Callable[[_U], _K],
        on_change: Callable[[Mapping[_K, _U], WatchEvent[_U]], None] | None = None,
        card_type: None = None,
    ) -> LiveView[_K, _U]: ...
    def live_view(
        self,
        query: Query[DiscoveryInstance],
        extract: Callable[[Any], Any] | None = None,
        *,
        base_models_only: bool = False,
        key: Callable[[Any], Any] | None = None,
        on_change: Callable[[Mapping[Any, Any], Any], None] | None = None,
        card_type: type[Any] | None = None,
    ) -> LiveView[Any, Any]:
        """A read-only mapping ``key → extract(record)`` of the records matching ``query``, kept
        current by a background thread (the reference's ``watch_and_extract_field``; with
        ``base_models_only``, its ``watch_and_extract_base_model_field``). ``extract`` receives
        a model card's ``card_json`` (as a ``card_type``, e.g. a dataclass, when one is given)
        and other records whole; keys are instance ids unless ``key`` says otherwise. Complete
        when it returns; see :class:`LiveView` for the rules.
        ``view.close()`` or this client's ``shutdown()`` stops it.

        To a type checker the view is a ``LiveView[key, value]``: ``live_view(Query.models(),
        card_type=Card)`` a ``LiveView[int, Card]``, ``live_view(Query.endpoints(), lambda e:
        e.namespace, key=lambda e: e.id())`` a ``LiveView[EndpointInstanceId, str]``.
        """
        from .live_view import LiveView

        _check_query(query)
        self._check_open()
        return LiveView(
            self, query, extract, base_models_only=base_models_only, key=key, on_change=on_change, card_type=card_type
        )

    def check_connection(self) -> None:
        """Probe the store without registering anything; BackendUnavailable when it fails."""
        self._check_open()
        self._probe()

    def diagnose(self) -> dict[str, Any]:
        """A JSON-ready health report of the store; ``problems`` lists what is wrong (empty: healthy)."""
        self._check_open()
        report: dict[str, Any] = {"backend": self.backend_name, "read_only": self.read_only, "problems": []}
        instance_id = self._reported_instance_id()
        if instance_id is not None:
            report["instance_id"] = instance_id
        try:
            self._probe()
        except DiscoveryError as exc:
            report["problems"].append(str(exc))
            return report
        self._diagnose(report)
        return report

    def collect_garbage(
        self, *, dry_run: bool = False, progress: Callable[[float, float], None] | None = None
    ) -> CollectedGarbage:
        """Remove records whose owners died and return their store keys (a list; its
        ``not_removed`` maps the keys of dead records that could not be removed to the reason).

        ``dry_run``: remove nothing and return the keys that would be removed (a read-only
        client may only dry-run). ``progress(elapsed, total)``, in seconds, is called a few
        times a second while the backend waits to judge liveness (the file store watches for a
        TTL). Backends whose store expires records by itself (leases) return an empty list.
        """
        if not isinstance(dry_run, bool):
            raise ValidationError(f"dry_run must be True or False, got {type(dry_run).__name__}")
        if progress is not None and not callable(progress):
            raise ValidationError(f"progress must be a callable (elapsed, total), got {type(progress).__name__}")
        if not dry_run:
            self._check_writable("remove dead records (use dry_run=True)")
        self._check_open()
        return self._collect_garbage(dry_run, progress)

    def _collect_garbage(self, dry_run: bool, progress: Callable[[float, float], None] | None) -> CollectedGarbage:
        """Find (and unless ``dry_run`` remove) dead records; nothing to do by default."""
        return CollectedGarbage()

    def _diagnose(self, report: dict[str, Any]) -> None:
        """Add backend details and problems to ``report`` (nothing by default)."""
        return None

    def _reported_instance_id(self) -> str | None:
        """The instance id as ``diagnose()`` shows it, in hex; None for a read-only client, whose
        id names nothing in the store. (A backend that would have to create it to read it says so.)"""
        return None if self.read_only else f"{self.instance_id:x}"

    # -- lifecycle --------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Remove every record this client owns, close its watches and stop its threads. Idempotent.

        From the call on, the connection state changes only to CLOSED: a SUSPENDED or LOST client
        goes straight to CLOSED, whatever its threads see while they stop."""
        if not self._closed:
            self._connection.closing()
            self._interrupt()
        with self._api_lock:
            if self._closed:
                return
            self._closed = True
            self._endpoint_leases.cancel()  # a release retrying its unregister returns
            owned, self._owned = self._owned, {}
            if self._cohort is not None and self._cohort.replaced is not None:
                owned = {}  # a successor took them over: they are not this client's to remove
            self._remove_at_shutdown(list(owned))
            for lock in self._failover_locks:  # after the records: a standby takes over what is left
                lock.close()
            self._close()
        self._connection.close()

    def _interrupt(self) -> None:
        """Shutdown begins: make the calls under way that could hang return soon, before shutdown
        waits for the client's lock (nothing by default)."""
        return None

    def _remove_at_shutdown(self, owned: builtins.list[DiscoveryInstanceId]) -> None:
        """Remove the records this client owned (under the client's lock; one by one by default)."""
        for instance_id in owned:
            try:
                self._delete(instance_id)
            except InstanceReplaced:
                break  # a successor took over meanwhile: nothing more is this client's to remove
            except Exception as exc:
                self._metrics.write_failed("shutdown", exc)
                log.exception("could not remove %s during shutdown", _describe(instance_id))

    # -- connection state (docs/design.md §5.5) ------------------------------------------------------
    @property
    def state(self) -> ConnectionState:
        """How this client's link to its store is doing: CONNECTED, SUSPENDED (writes or reads
        fail; its records are at risk), LOST (its records are gone or a successor took them
        over) or CLOSED. Never RECONNECTED: that is a change listeners are told of."""
        return self._connection.state

    def add_state_listener(self, listener: StateListener) -> None:
        """Call ``listener(change)`` (a :class:`~discovery_sync.StateChange`) for every later
        change of :attr:`state`, in order, from one thread of this client
        (``discovery-sync-state``), never while a lock of the client is held. A listener that
        raises is logged and stays registered. CLOSED is the last change."""
        self._connection.add_listener(listener)

    def remove_state_listener(self, listener: StateListener) -> None:
        """Stop calling ``listener``; ValidationError when it is not registered."""
        self._connection.remove_listener(listener)

    close = shutdown

    @property
    def closed(self) -> bool:
        return self._closed

    def status(self) -> dict[str, Any]:
        """How this client is doing, as a plain mapping (for logs and ``discovery-sync status``):
        ``backend``, ``read_only``, ``closed``, ``records`` (this client's, 0 once replaced),
        ``logical_instance_id``, ``replaced`` (who took over, or None) and ``connection`` (the
        :attr:`state`'s value, e.g. ``"connected"``), then what the backend
        knows of its store and its threads (file: ``connected``, heartbeat and rescan health;
        etcd: the lease; Kubernetes: the pod's resource and the watch daemon). Asking changes
        nothing (an etcd client that has no lease yet is not granted one)."""
        replaced = self.replaced
        return {
            "backend": self.backend_name,
            "read_only": self.read_only,
            "closed": self._closed,
            "records": 0 if replaced is not None else len(self._owned),
            "logical_instance_id": self._logical_instance_id,
            "replaced": None if replaced is None else str(replaced),
            "connection": self._connection.state.value,
        }

    # -- metrics (discovery_sync.metrics) ------------------------------------------------------------------
    def metrics(self) -> Metrics:
        """This client's counters and gauges as a plain mapping (:class:`~discovery_sync.metrics.Metrics`;
        :data:`~discovery_sync.metrics.METRICS` says what each figure means): its watches (open,
        lagging, events delivered by kind, Resyncs, queue depths), records owned, failed writes,
        connection state changes, crashed and restarted threads, and what the backend measures
        (heartbeat or keep-alive durations, rescans, records swept). Reading them changes nothing
        and costs the client's hot paths nothing; it works after shutdown() too."""
        replaced = self.replaced is not None
        # not under the API lock, which a write to a stalled store holds: dict() copies atomically
        failed_writes = {operation: dict(errors) for operation, errors in dict(self._metrics.failed_writes).items()}
        return collect(
            self._metrics,
            backend=self.backend_name,
            worker_id=self._metric_worker_id(),
            state=self._connection.state.value,
            state_changes={state.value: count for state, count in dict(self._connection.counts).items()},
            records_owned=0 if replaced else len(self._owned),
            failed_writes=failed_writes,
            figures=self._backend_metrics(),
        )

    def _metric_worker_id(self) -> str:
        """The instance id as the ``worker_id`` label shows it (hex), asking for nothing (an etcd
        client without a lease yet: empty)."""
        reported = self._reported_instance_id()
        if reported is None:  # a read-only client: its id is its own, and reading it costs nothing
            return f"{self.instance_id:x}"
        return reported if all(c in "0123456789abcdef" for c in reported) else ""

    def _backend_metrics(self) -> BackendFigures:
        """What the backend measures itself (:class:`~discovery_sync.metrics.BackendFigures`; nothing by default)."""
        return BackendFigures()

    # -- failover cohorts (docs/design.md §4.1) ---------------------------------------------------------
    @property
    def replaced(self) -> Replacement | None:
        """How a successor with this client's logical instance id replaced it (None: it did not,
        or this client is no cohort member). A replaced client owns no record any more: its
        writes raise InstanceReplaced and its shutdown removes nothing."""
        return None if self._cohort is None else self._cohort.replaced

    def wait_replaced(self, timeout: float | None = None) -> bool:
        """Block until a successor replaces this cohort member (True) or ``timeout`` seconds pass
        (False; None waits without limit). ValidationError for a client without a logical id."""
        return self._membership("wait_replaced").wait(timeout)

    def on_replaced(self, callback: Callable[[Replacement], None]) -> None:
        """Call ``callback(replacement)`` once, on a thread of its own, when a successor replaces
        this cohort member (at once if it already did): a worker exits there. A callback that
        raises is logged. ValidationError for a client without a logical id."""
        self._membership("on_replaced").on_replaced(callback)

    def _taken_by_cohort(self, holder: str) -> None:
        """A failover cohort claims this client's instance id as its logical id (``holder``: who):
        the records under it are the cohort's now. This client, outside the cohort, keeps none of
        them (it touches, writes back and deletes none) and is LOST for good."""
        with self._api_lock:
            taken = sorted(_describe(instance_id) for instance_id in self._owned)
            self._owned.clear()
        reason = f"its instance id {self.instance_id:x} was claimed as a failover cohort's logical id by {holder}"
        if taken:
            log.error(
                "this client's %s: its records (%s) are the cohort's now and it keeps none of them; connect again "
                "with another instance_id",
                reason,
                ", ".join(taken),
            )
        self._connection.lose(reason, final=True)

    def _membership(self, method: str) -> CohortMembership:
        if self._cohort is None:
            raise ValidationError(
                f"{method}() is for failover-cohort members: connect with a logical instance id "
                "(DYN_DISCOVERY_LOGICAL_INSTANCE_ID or _KEY, or the logical_instance_id / logical_instance_key options)"
            )
        return self._cohort

    def failover_lock(self, name: str, *, stale_after: float | None = None) -> FailoverLock:
        """The failover lock ``name`` of this store (see :class:`~discovery_sync.failover.FailoverLock`):
        the lock a cohort's primary holds while it registers and its standby waits for
        (``lock.acquire()``). It is freed when its holder dies (kill -9 frees it at once on a
        local file store, after ``stale_after`` on a shared one) and broken when its holder
        freezes longer than ``stale_after`` seconds (default: the store's ``lock_stale``, 10 s);
        the frozen holder learns it (``lock.on_lost``). ``shutdown()`` releases it after removing
        this client's records. ValidationError on backends without one (etcd, Kubernetes: no
        cohort), for a read-only client, for a bad name, or for a ``stale_after`` that is not a
        number of seconds above 0 and at most a week (the error names ``stale_after``)."""
        self._check_writable("take a failover lock")
        check_lock_name(name)
        with self._api_lock:
            self._check_open()
            lock = self._failover_lock(name, stale_after)
            self._failover_locks.append(lock)
            return lock

    def _failover_lock(self, name: str, stale_after: float | None) -> FailoverLock:
        raise ValidationError(
            f"the {self.backend_name} backend has no failover lock: failover cohorts use the file backend "
            "(or memory://, in one process)"
        )

    def _fence(self, by: str, seen: str) -> None:
        """A successor replaced this cohort member (seen by a backend): it owns nothing from now on."""
        if self._cohort is not None:
            self._cohort.mark_replaced(Replacement(self._cohort.logical_instance_id, by, seen))

    def __enter__(self) -> Discovery:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed(f"this {self.backend_name} discovery client was shut down; connect() again")

    def _check_writable(self, action: str) -> None:
        if self.read_only:
            raise ValidationError(
                f"this {self.backend_name} discovery client is read-only (read_only=true): it cannot {action}; "
                "connect without read_only to write"
            )

    # -- backend primitives -------------------------------------------------------------------------
    @abc.abstractmethod
    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        """The stored (valid) record with this id, or None."""

    @abc.abstractmethod
    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        """Create the record if its key is absent: None when created, else the stored record."""

    @abc.abstractmethod
    def _replace(self, instance: DiscoveryInstance) -> None:
        """Overwrite the record (it exists and is owned by this client)."""

    @abc.abstractmethod
    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        """Remove the record; a record already gone is not an error. A cohort member removes
        only its own write, and raises InstanceReplaced (removing nothing) once replaced."""

    @abc.abstractmethod
    def _list(self, query: Query) -> builtins.list[DiscoveryInstance]:
        """Valid stored records under ``query.key_prefix()`` (the caller filters with matches)."""

    def _list_models(self, query: Query) -> builtins.list[Model]:
        """:meth:`_list` of a models query (which holds model cards only)."""
        return [model for model in self._list(query) if isinstance(model, Model)]

    def _store_lock(self, kind: RecordKind, key: str) -> contextlib.AbstractContextManager[Any]:
        """A lock serialising read-modify-write sequences on ``key`` (a record or key prefix of
        ``kind``) across all clients of the store; it may cover more than ``key``."""
        return contextlib.nullcontext()

    def _claim(self, cohort: CohortMembership) -> None:
        """Under the store lock of a record about to be written: make this cohort member the
        logical id's current writer, or raise InstanceReplaced when a successor took over since
        it claimed. Backends that host cohorts implement it."""
        raise ValidationError(f"the {self.backend_name} backend cannot host a failover cohort")

    def _take_over(self, instance: DiscoveryInstance) -> None:
        """Under the store lock: store ``instance`` whatever is stored under its id, as a new
        write of this client (what it refreshes and may delete from now on)."""
        raise ValidationError(f"the {self.backend_name} backend cannot host a failover cohort")

    @abc.abstractmethod
    def _open_feed(self, feed: WatchFeed) -> None:
        """Start feeding ``feed``: call ``feed.start(snapshot)`` before returning, then changes."""

    @abc.abstractmethod
    def _probe(self) -> None:
        """Raise BackendUnavailable when the store cannot be used."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Stop threads and close watches (owned records are already removed)."""


def _stored_model(stored: DiscoveryInstance | None) -> Model | None:
    """What ``_get`` or ``_create`` returned for a model card's id: backends read a key as its kind's record."""
    if stored is None or isinstance(stored, Model):
        return stored
    raise DiscoveryError(f"the store holds a {stored.kind.value} under the key of a model card")


def _check_query(query: Any) -> None:
    if not isinstance(query, Query):
        raise ValidationError(f"expected a Query (e.g. Query.endpoints()), got {type(query).__name__}")


def _describe(instance_id: Any) -> str:
    try:
        return f"{instance_id.kind.value} {instance_id.to_path()}"
    except AttributeError:
        return repr(instance_id)
