"""Per-client metrics: what :meth:`Discovery.metrics() <discovery_sync.Discovery.metrics>` returns,
and (with the ``prometheus`` extra) :func:`register`, which shows them to a Prometheus registry.

Every figure is defined once, in :data:`METRICS` (its key in the mapping, its Prometheus name,
kind, labels and meaning). Names follow the reference runtime's conventions
(``lib/runtime/src/metrics/prometheus_names.rs``): the prefix ``dynamo_discovery_``, snake_case,
``_total`` for counters, ``_seconds`` for durations, no suffix for gauges; every sample carries
the labels ``backend`` and ``worker_id`` (the client's instance id in hex, as the reference's
``worker_id``; empty for an etcd client that has no lease yet).

Cost: nothing is computed for a metric until it is read. The counters of a watch are plain
integers of its feed, incremented by the producer under the feed's lock, which it holds already
(:class:`~discovery_sync.watch.WatchFeed`); the events a consumer has taken are those handed to it
less those still queued, counted when read, so ``get()`` does no more than before. Failed writes
are counted under the client's API lock, held already. Only rare events (a thread that crashed)
and durations measured off the hot paths (a heartbeat, a rescan) take a lock of their own.
"""

from __future__ import annotations

import bisect
import enum
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from .errors import ValidationError

if TYPE_CHECKING:
    from .discovery import Discovery
    from .watch import WatchFeed

PREFIX = "dynamo_discovery_"
#: the labels of every sample: the backend (``file``, ``etcd``...) and the client's instance id in hex
COMMON_LABELS = ("backend", "worker_id")
#: upper bounds (seconds) of the duration histograms' buckets
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: the kinds of events a watch delivers, as the ``kind`` label names them
EVENT_KINDS = ("added", "removed", "model_taints_updated", "resync")
#: the connection states ``dynamo_discovery_connection_state`` has a sample for
STATES = ("connected", "suspended", "lost", "closed")
#: the states a change shows to listeners (``dynamo_discovery_state_changes_total``'s)
SHOWN_STATES = ("suspended", "reconnected", "lost", "closed")


class DurationFigures(TypedDict):
    """A duration histogram: how many were measured, their sum and the longest (seconds), and the
    cumulative count at each upper bound of :data:`DURATION_BUCKETS` (then infinity)."""

    count: int
    sum: float
    max: float
    buckets: tuple[tuple[float, int], ...]


class Metrics(TypedDict):
    """What ``client.metrics()`` returns: a plain mapping (see :data:`METRICS` for each key's meaning)."""

    backend: str
    worker_id: str
    state: str
    watches_open: int
    watches_lagging: int
    watch_lags: int
    watch_queue_depth: int
    watch_queue_depth_max: int
    events_delivered: dict[str, int]
    resyncs: int
    records_owned: int
    failed_writes: dict[str, dict[str, int]]
    state_changes: dict[str, int]
    thread_crashes: int
    thread_restarts: int
    heartbeat: DurationFigures | None
    rescans: dict[str, DurationFigures]
    records_swept: dict[str, int]


class Kind(str, enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Metric:
    """One figure: its ``key`` in :class:`Metrics`, Prometheus ``name``, ``kind``, the ``labels``
    its nested mappings are keyed by (outermost first; ``state``: one sample per state, 1 for
    the current one) and what it means (``help``)."""

    key: str
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()


METRICS: tuple[Metric, ...] = (
    Metric("events_delivered", PREFIX + "watch_events_total", Kind.COUNTER,
           "Events the consumers of this client's watches have taken, by kind", ("kind",)),
    Metric("resyncs", PREFIX + "watch_resyncs_total", Kind.COUNTER,
           "Resyncs delivered after a watch's initial one (after a lag, a rescan that found missed changes, "
           "a reconnection)"),
    Metric("watches_open", PREFIX + "open_watches", Kind.GAUGE, "Watches of this client that are open"),
    Metric("watches_lagging", PREFIX + "lagging_watches", Kind.GAUGE,
           "Open watches that fell a full queue behind and will resync once their consumer drains them"),
    Metric("watch_lags", PREFIX + "watch_lags_total", Kind.COUNTER,
           "Times a watch of this client fell a full queue behind (its consumer too slow)"),
    Metric("watch_queue_depth", PREFIX + "watch_queue_depth", Kind.GAUGE,
           "Events queued for the consumers of the open watches, not yet taken"),
    Metric("watch_queue_depth_max", PREFIX + "watch_queue_depth_max", Kind.GAUGE,
           "The most events one watch of this client ever had queued (high-water mark)"),
    Metric("records_owned", PREFIX + "owned_records", Kind.GAUGE,
           "Records this client registered and has not unregistered (0 once a successor replaced it)"),
    Metric("failed_writes", PREFIX + "failed_writes_total", Kind.COUNTER,
           "Writes of this client that raised, by operation and error class", ("operation", "error")),
    Metric("state_changes", PREFIX + "state_changes_total", Kind.COUNTER,
           "Changes of the connection state, by the state shown to listeners", ("state",)),
    Metric("state", PREFIX + "connection_state", Kind.GAUGE,
           "The connection state: 1 for the current one, 0 for the others", ("state",)),
    Metric("thread_crashes", PREFIX + "thread_crashes_total", Kind.COUNTER,
           "Background threads of this client stopped by an unexpected error (logged with a traceback)"),
    Metric("thread_restarts", PREFIX + "thread_restarts_total", Kind.COUNTER,
           "Background threads restarted after they stopped (the file store's observer)"),
    Metric("heartbeat", PREFIX + "heartbeat_duration_seconds", Kind.HISTOGRAM,
           "Duration of a liveness round: a file-store heartbeat touching this client's files, an etcd lease "
           "keep-alive"),
    Metric("rescans", PREFIX + "rescan_duration_seconds", Kind.HISTOGRAM,
           "Duration of a file-store rescan, by scan (its count is the number of rescans)", ("scan",)),
    Metric("records_swept", PREFIX + "swept_records_total", Kind.COUNTER,
           "Dead records this client removed from the file store (rescans and collect_garbage), by kind", ("kind",)),
)  # fmt: skip


# -- what backends measure -------------------------------------------------------------------------
class Durations:
    """A histogram of durations in seconds; thread-safe (a lock per observation: for paths that
    run a few times a second at most)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = [0] * (len(DURATION_BUCKETS) + 1)
        self._sum = 0.0
        self._max = 0.0

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(DURATION_BUCKETS, seconds)
        with self._lock:
            self._counts[index] += 1
            self._sum += seconds
            self._max = max(self._max, seconds)

    def timing(self, job: Callable[[], None]) -> Callable[[], None]:
        """``job``, observed each time it runs (also when it raises), on the real clock."""

        def timed() -> None:
            started = time.perf_counter()
            try:
                job()
            finally:
                self.observe(time.perf_counter() - started)

        return timed

    def figures(self) -> DurationFigures:
        with self._lock:
            counts, total, longest = list(self._counts), self._sum, self._max
        cumulative, buckets = 0, []
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        return {"count": cumulative, "sum": total, "max": longest, "buckets": tuple(buckets)}


class Crashes(Protocol):
    """Whatever counts the crashes of its thread (:class:`~discovery_sync.periodic.PeriodicThread`)."""

    crashes: int


@dataclass(frozen=True)
class BackendFigures:
    """What a backend measures itself, read when metrics are asked for: the durations of its
    liveness rounds (None: it has none) and of its rescans (by scan), the records it swept (by
    kind's bucket name), the threads whose crashes count, and how often it restarted one."""

    heartbeat: Durations | None = None
    rescans: Mapping[str, Durations] = field(default_factory=dict)
    swept: Mapping[str, int] = field(default_factory=dict)
    threads: Sequence[Crashes] = ()
    restarts: int = 0


# -- one client's collector ------------------------------------------------------------------------
class _WatchSums:
    """Figures summed over watches: events delivered by kind, Resyncs beyond each watch's first,
    lags, and the highest queue depth any reached."""

    def __init__(self) -> None:
        self.delivered = [0] * len(EVENT_KINDS)
        self.resyncs = self.lags = self.high_water = 0

    def copy(self) -> _WatchSums:
        sums = _WatchSums()
        sums.delivered, sums.resyncs = list(self.delivered), self.resyncs
        sums.lags, sums.high_water = self.lags, self.high_water
        return sums

    def add(self, feed: WatchFeed[Any], delivered: Sequence[int]) -> None:
        """Add ``feed``'s figures (``delivered``: its :meth:`~WatchFeed.delivered`)."""
        for index, count in enumerate(delivered):
            self.delivered[index] += count
        self.resyncs += max(0, delivered[-1] - 1)
        self.lags += feed.lags
        self.high_water = max(self.high_water, feed.high_water)


class Recorder:
    """The counters of one client that no backend keeps: its watches (open, and the sums of
    those closed), failed writes (counted under the client's API lock) and crashed threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # open feeds and the closed ones' sums (then a feed's lock may be taken)
        self._feeds: set[WatchFeed[Any]] = set()
        self._closed = _WatchSums()  # of the watches closed
        self._crashes = 0
        #: operation -> error class name -> count; changed only under the client's API lock
        self.failed_writes: dict[str, dict[str, int]] = {}

    def watch_opened(self, feed: WatchFeed[Any]) -> None:
        """Count ``feed``'s events from now on, and add them to the closed watches' once it closes."""
        with self._lock:
            self._feeds.add(feed)
        feed.add_close_callback(lambda: self._watch_closed(feed))

    def _watch_closed(self, feed: WatchFeed[Any]) -> None:
        # after close() no event is taken from the feed any more (WatchFeed._take): its counts are final
        delivered = feed.delivered()
        with self._lock:
            if feed not in self._feeds:
                return
            self._feeds.discard(feed)
            self._closed.add(feed, delivered)

    def write_failed(self, operation: str, error: BaseException) -> None:
        """A write raised (call it holding the client's API lock)."""
        errors = self.failed_writes.setdefault(operation, {})
        name = type(error).__name__
        errors[name] = errors.get(name, 0) + 1

    def thread_crashed(self) -> None:
        with self._lock:
            self._crashes += 1

    def watch_figures(self) -> dict[str, Any]:
        """The watch part of :class:`Metrics`, and ``thread_crashes`` (this recorder's part)."""
        with self._lock:
            feeds, sums, crashes = list(self._feeds), self._closed.copy(), self._crashes
            # read under this lock: a feed closing now is added to the sums once, after this
            for feed in feeds:
                sums.add(feed, feed.delivered())
            lagging, depth = sum(feed.lagging for feed in feeds), sum(feed.depth for feed in feeds)
        return {
            "watches_open": len(feeds),
            "watches_lagging": lagging,
            "watch_lags": sums.lags,
            "watch_queue_depth": depth,
            "watch_queue_depth_max": sums.high_water,
            "events_delivered": dict(zip(EVENT_KINDS, sums.delivered, strict=True)),
            "resyncs": sums.resyncs,
            "thread_crashes": crashes,
        }


def collect(
    recorder: Recorder,
    *,
    backend: str,
    worker_id: str,
    state: str,
    state_changes: Mapping[str, int],
    records_owned: int,
    failed_writes: dict[str, dict[str, int]],
    figures: BackendFigures,
) -> Metrics:
    """The :class:`Metrics` of a client (:meth:`Discovery.metrics` gathers the arguments;
    ``failed_writes`` is its own copy, kept as it is)."""
    watches = recorder.watch_figures()
    return {
        "backend": backend,
        "worker_id": worker_id,
        "state": state,
        "watches_open": watches["watches_open"],
        "watches_lagging": watches["watches_lagging"],
        "watch_lags": watches["watch_lags"],
        "watch_queue_depth": watches["watch_queue_depth"],
        "watch_queue_depth_max": watches["watch_queue_depth_max"],
        "events_delivered": watches["events_delivered"],
        "resyncs": watches["resyncs"],
        "records_owned": records_owned,
        "failed_writes": failed_writes,
        "state_changes": {**dict.fromkeys(SHOWN_STATES, 0), **state_changes},
        "thread_crashes": watches["thread_crashes"] + sum(thread.crashes for thread in figures.threads),
        "thread_restarts": figures.restarts,
        "heartbeat": None if figures.heartbeat is None else figures.heartbeat.figures(),
        "rescans": {scan: durations.figures() for scan, durations in figures.rescans.items()},
        "records_swept": dict(figures.swept),
    }


# -- the samples of a metric ---------------------------------------------------------------------------
def samples(metric: Metric, figures: Metrics) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(label values, value)`` of each sample of ``metric`` in ``figures`` (values: numbers, or
    :class:`DurationFigures` for a histogram), the common labels not included."""
    value: Any = figures[metric.key]  # type: ignore[literal-required]
    if metric.key == "state":
        for state in STATES:
            yield (state,), int(state == value)
        return
    yield from _flattened(value, len(metric.labels), ())


def _flattened(value: Any, depth: int, labels: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    if depth == 0:
        if value is not None:
            yield labels, value
        return
    for label, inner in value.items():
        yield from _flattened(inner, depth - 1, (*labels, str(label)))


# -- Prometheus (the ``prometheus`` extra) ---------------------------------------------------------------
# id(registry) -> the registry (kept: its id stays its own) and its collector
_collectors: dict[int, tuple[Any, _Collector]] = {}
_collectors_lock = threading.Lock()


def _prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as exc:
        raise ValidationError(
            "Prometheus metrics need the prometheus_client package: pip install 'discovery-sync[prometheus]'"
        ) from exc
    return prometheus_client


class _Collector:
    """A custom Prometheus collector of the clients registered with one registry: it reads their
    :meth:`Discovery.metrics` at scrape time (nothing is done on their hot paths)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: list[Discovery] = []

    def add(self, client: Discovery) -> None:
        with self._lock:
            if client not in self._clients:
                self._clients.append(client)

    def remove(self, client: Discovery) -> bool:
        """Forget ``client``; True when no client is left."""
        with self._lock:
            if client in self._clients:
                self._clients.remove(client)
            return not self._clients

    def describe(self) -> list[Any]:
        return [_family(metric) for metric in METRICS]

    def collect(self) -> list[Any]:
        with self._lock:
            clients = list(self._clients)
        families = {metric.key: _family(metric) for metric in METRICS}
        for client in clients:
            figures = client.metrics()
            common = [figures["backend"], figures["worker_id"]]
            for metric in METRICS:
                family = families[metric.key]
                for labels, value in samples(metric, figures):
                    _add_sample(family, metric, [*common, *labels], value)
        return list(families.values())


def _family(metric: Metric) -> Any:
    core = _prometheus().core
    labels = [*COMMON_LABELS, *metric.labels]
    name = metric.name.removesuffix("_total") if metric.kind is Kind.COUNTER else metric.name
    family_type = {
        Kind.COUNTER: core.CounterMetricFamily,
        Kind.GAUGE: core.GaugeMetricFamily,
        Kind.HISTOGRAM: core.HistogramMetricFamily,
    }[metric.kind]
    return family_type(name, metric.help, labels=labels)


def _add_sample(family: Any, metric: Metric, labels: list[str], value: Any) -> None:
    if metric.kind is Kind.HISTOGRAM:
        buckets = [(_bound(bound), count) for bound, count in value["buckets"]]
        family.add_metric(labels, buckets, value["sum"])
    else:
        family.add_metric(labels, value)


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def register(client: Discovery, registry: Any = None) -> None:
    """Show ``client``'s metrics (:data:`METRICS`) in ``registry`` (default:
    ``prometheus_client.REGISTRY``), read at each scrape. Several clients may share a registry:
    their samples differ by ``backend`` and ``worker_id``. Registering a client twice changes
    nothing; :func:`unregister` undoes it (a shut-down client's figures stay until then).
    ValidationError without the ``prometheus_client`` package (``pip install 'discovery-sync[prometheus]'``)."""
    from .discovery import Discovery

    prometheus_client = _prometheus()
    if not isinstance(client, Discovery):
        raise ValidationError(f"register() takes a discovery client, got {type(client).__name__}")
    registry = prometheus_client.REGISTRY if registry is None else registry
    with _collectors_lock:
        if id(registry) in _collectors:
            _collectors[id(registry)][1].add(client)
            return
        collector = _Collector()
        collector.add(client)
        registry.register(collector)  # may raise (names taken by another collector): nothing is kept then
        _collectors[id(registry)] = (registry, collector)


def unregister(client: Discovery, registry: Any = None) -> None:
    """Stop showing ``client``'s metrics in ``registry`` (default: ``prometheus_client.REGISTRY``);
    nothing happens when they were not shown there."""
    prometheus_client = _prometheus()
    registry = prometheus_client.REGISTRY if registry is None else registry
    with _collectors_lock:
        if id(registry) not in _collectors:
            return
        collector = _collectors[id(registry)][1]
        if collector.remove(client):
            registry.unregister(collector)
            del _collectors[id(registry)]
