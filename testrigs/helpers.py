"""Small builders and watch helpers shared by the test suites: specs with defaults, reading and
folding a watch's events, a log catcher, a thread runner."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import discovery_sync as ds

EVENT_TIMEOUT = 10.0
# what a watch describes: id -> instance (see fold)
State = dict[ds.DiscoveryInstanceId, ds.DiscoveryInstance]


def endpoint_spec(
    namespace: str = "ns", component: str = "backend", endpoint: str = "generate", port: int = 9000
) -> ds.EndpointSpec:
    """A TCP endpoint on 127.0.0.1:``port`` (device ``cuda``, codec ``msgpack``)."""
    return ds.EndpointSpec(namespace, component, endpoint, ds.Transport.tcp(f"127.0.0.1:{port}"), "cuda", "msgpack")


def model_spec(
    name: str = "Qwen/Qwen3-0.6B",
    namespace: str = "ns",
    component: str = "backend",
    endpoint: str = "generate",
    *,
    taints: list[str] | None = None,
    topology: dict[str, str] | None = None,
    suffix: str | None = None,
    **card: Any,
) -> ds.ModelSpec:
    """A model card ``{"display_name": name, "runtime_config": {...}, **card}`` on the endpoint;
    ``taints`` and ``topology`` go into its runtime config only when given."""
    runtime_config: dict[str, Any] = {}
    if taints is not None:
        runtime_config["taints"] = taints
    if topology is not None:
        runtime_config["topology_domains"] = topology
    card_json = {"display_name": name, "runtime_config": runtime_config, **card}
    return ds.ModelSpec(namespace, component, endpoint, card_json, suffix)


def next_event(watch: ds.Watch, timeout: float = EVENT_TIMEOUT) -> ds.DiscoveryEvent:
    """The next event of ``watch``; ``ds.WatchTimeout`` if none comes within ``timeout`` seconds."""
    return watch.get(timeout=timeout)


def initial_state(watch: ds.Watch, timeout: float = EVENT_TIMEOUT) -> tuple[list[ds.DiscoveryEvent], ds.Resync]:
    """Consume the start of a watch: the Added events and the first Resync."""
    added: list[ds.DiscoveryEvent] = []
    while True:
        event = watch.get(timeout=timeout)
        if isinstance(event, ds.Resync):
            return added, event
        added.append(event)


def assert_quiet(watch: ds.Watch, period: float) -> None:
    """Nothing arrives on the watch for ``period`` seconds."""
    try:
        event = watch.get(timeout=period)
    except ds.WatchTimeout:
        return
    raise AssertionError(f"unexpected event {event!r}")


def fold(state: State, event: ds.DiscoveryEvent) -> State:
    """``state`` (id -> instance) after ``event``: a Resync replaces it, Added and Removed change it."""
    if isinstance(event, ds.Resync):
        return {i.id(): i for i in event.instances}
    if isinstance(event, ds.Added):
        state[event.instance.id()] = event.instance
    elif isinstance(event, ds.Removed):
        state.pop(event.id, None)
    return state


def fold_until_resynced(watch: ds.Watch, state: State, expected: State, timeout: float = 30) -> State:
    """Fold ``watch``'s events into ``state`` until a Resync has come and the state is ``expected``."""
    resynced = False
    while not (resynced and state == expected):
        event = next_event(watch, timeout=timeout)
        resynced |= isinstance(event, ds.Resync)
        state = fold(state, event)
    return state


def ids(instances: Iterable[ds.DiscoveryInstance]) -> set[ds.DiscoveryInstanceId]:
    """The ids of ``instances``."""
    return {i.id() for i in instances}


def race_conflicting_models(clients: list[ds.Discovery]) -> list[ds.Model]:
    """Every client registers a different model on one endpoint at the same moment; return the
    winners after checking that the store holds exactly them."""
    barrier = threading.Barrier(len(clients))
    outcomes: list[object] = [None] * len(clients)

    def race(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = clients[index].register(model_spec(f"model-{index}"))
        except ds.ConflictError as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=race, args=(i,), name=f"race-{i}") for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [o for o in outcomes if isinstance(o, ds.Model)]
    assert clients[0].list(ds.Query.models()) == winners
    return winners


class LogCatcher(logging.Handler):
    """Collects log messages (warnings and worse by default); ``wait_for`` blocks until a
    matching one arrives."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.messages: list[str] = []
        self.levels: list[int] = []  # the level of each message
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._changed:
            self.levels.append(record.levelno)
            self.messages.append(record.getMessage())
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 10.0) -> list[str]:
        """The messages holding ``text``, once there is one (empty if none came within ``timeout``)."""
        with self._changed:
            self._changed.wait_for(lambda: any(text in m for m in self.messages), timeout)
            return [m for m in self.messages if text in m]

    def count(self, text: str, at_least: int, timeout: float = 10.0) -> int:
        """How many warnings hold ``text``, once at least ``at_least`` do (or at the timeout)."""
        with self._changed:
            self._changed.wait_for(lambda: sum(text in m for m in self.messages) >= at_least, timeout)
            return sum(text in m for m in self.messages)

    def matching(self, text: str) -> list[str]:
        """The messages holding ``text`` now (nothing is waited for)."""
        with self._changed:
            return [m for m in self.messages if text in m]


@contextlib.contextmanager
def caught_logs(logger_name: str, level: int = logging.WARNING) -> Iterator[LogCatcher]:
    """A LogCatcher attached to the logger ``logger_name`` while the block runs."""
    catcher = LogCatcher(level)
    logger = logging.getLogger(logger_name)
    logger.addHandler(catcher)
    try:
        yield catcher
    finally:
        logger.removeHandler(catcher)


def in_thread(name: str, call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``call`` on a thread named ``name``; the list gets what it returned or raised."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, outcome
