"""Live-view rules that need a fault or an event the stores do not produce on demand (a Resync
out of the blue, a failed watch), injected into the watch feed of a memory client."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator

import pytest

import discovery_sync as ds
from discovery_sync.events import Resync
from testrigs.helpers import caught_logs, endpoint_spec

WAIT = 10.0


@pytest.fixture
def url() -> str:
    return f"memory://live-view-{uuid.uuid4().hex}"


@pytest.fixture
def client(url: str) -> Iterator[ds.Discovery]:
    with ds.connect(url) as client:
        yield client


def test_a_resync_replaces_the_whole_map(client):
    a = client.register(endpoint_spec(endpoint="a"))
    with client.live_view(ds.Query.endpoints(), lambda e: e.endpoint, key=lambda i: i.id()) as view:
        assert dict(view) == {a.id(): "a"}
        b = ds.Endpoint("ns", "backend", "b", 7, ds.Transport.tcp("x:1"))
        view._watch._feed._emit_event(Resync((b,)))  # what a backend sends after a lag or reconnect
        assert view.wait_for(lambda m: a.id() not in m, WAIT) == {b.id(): "b"}


def test_a_failed_watch_makes_every_read_raise_watch_failed(client):
    view = client.live_view(ds.Query.endpoints())
    waiting: list[BaseException] = []
    blocked = threading.Thread(target=lambda: waiting.append(_raised(lambda: view.wait_for(lambda m: False))))
    blocked.start()
    view._watch._feed.fail(RuntimeError("the store went away"))
    blocked.join(WAIT)
    assert [type(e) for e in waiting] == [ds.WatchFailed]
    for read in (
        view.snapshot,
        lambda: view.get(1),
        lambda: len(view),
        lambda: list(view),
        lambda: view.wait_changed(0),
    ):
        with pytest.raises(ds.WatchFailed) as failed:
            read()
        assert "the store went away" in repr(failed.value.__cause__.__cause__ or failed.value.__cause__)
    view.close()  # still idempotent, and the failure stays
    with pytest.raises(ds.WatchFailed):
        len(view)


def _raised(call) -> BaseException | None:
    try:
        call()
    except BaseException as exc:
        return exc
    return None


def test_a_record_whose_extract_fails_is_skipped_with_a_warning(client):
    client.register(endpoint_spec(endpoint="a"))
    with caught_logs("discovery_sync") as logs:
        view = client.live_view(ds.Query.endpoints(), lambda e: {"a": 1}[e.endpoint])
        with view:
            assert dict(view) == {client.instance_id: 1}
            client.register(endpoint_spec(endpoint="b"))  # same worker: the key keeps its value
            assert logs.wait_for("live view of endpoints(all) skips ns/backend/b/")
            assert view[client.instance_id] == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.live_view("endpoints"), "expected a Query"),
        (lambda c: c.live_view(ds.Query.endpoints(), base_models_only=True), "base_models_only applies to model"),
        (lambda c: c.live_view(ds.Query.endpoints(), extract=42), "extract must be callable"),
        (lambda c: c.live_view(ds.Query.endpoints(), key="id"), "key must be callable"),
    ],
)
def test_bad_arguments_are_validation_errors(client, call, message):
    with pytest.raises(ds.ValidationError, match=message):
        call(client)


def test_wait_timeouts_are_checked(client):
    with client.live_view(ds.Query.endpoints()) as view:
        with pytest.raises(ds.WatchTimeout):
            view.wait_for(lambda m: len(m) > 0, timeout=0.01)
        with pytest.raises(ds.ValidationError, match="timeout"):
            view.wait_changed(0, timeout=float("nan"))


@dataclasses.dataclass
class RuntimeCard:
    display_name: str
    runtime_config: dict


def test_cards_can_be_read_as_a_type_and_those_that_do_not_fit_are_skipped(client, url):
    other = ds.connect(url)
    with other, caught_logs("discovery_sync") as logs:
        client.register(ds.ModelSpec("ns", "c", "e", {"display_name": "m", "runtime_config": {"x": 1}}))
        other.register(ds.ModelSpec("ns", "c", "e", {"display_name": "m"}))  # no runtime_config: does not fit
        view = client.live_view(ds.Query.models(), lambda card: card.runtime_config["x"], card_type=RuntimeCard)
        with view:
            assert dict(view) == {client.instance_id: 1}
            assert logs.wait_for("skips ns/c/e/")
        whole = client.live_view(ds.Query.models(), card_type=RuntimeCard, key=lambda m: m.id())
        with whole:
            assert list(whole.values()) == [RuntimeCard("m", {"x": 1})]
    with pytest.raises(ds.ValidationError, match="card_type applies to model queries"):
        client.live_view(ds.Query.endpoints(), card_type=RuntimeCard)


def live_view_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("discovery-sync-live-view-")]


def test_the_views_of_a_client_share_one_thread_and_a_change_reaches_them_all(client, url):
    """Issue 37: 300 views made 314 threads; now every view of a client is drained by one."""
    views = [client.live_view(ds.Query.endpoints(), key=lambda i: i.id()) for _ in range(100)]
    [pump] = {id(view._pump.thread): view._pump.thread for view in views}.values()
    assert pump is not None and pump in live_view_threads()
    with ds.connect(url) as writer:
        added = writer.register(endpoint_spec(endpoint="fanout"))
        for view in views:
            assert added.id() in view.wait_for(lambda m: added.id() in m, WAIT)
    for view in views:
        view.close()
    pump.join(WAIT)
    assert not pump.is_alive()  # the last view's close ends the thread


def test_a_callback_that_raises_system_exit_ends_its_own_view_and_no_other(client, url):
    def leave(snapshot: object, event: object) -> None:
        raise SystemExit(3)

    with caught_logs("discovery_sync.live_view") as logs:
        doomed = client.live_view(ds.Query.endpoints(), on_change=leave)
        other = client.live_view(ds.Query.endpoints(), key=lambda i: i.id())
        with ds.connect(url) as writer:
            first = writer.register(endpoint_spec(endpoint="first"))
            with pytest.raises(ds.WatchFailed) as failed:
                doomed.wait_for(lambda m: False, WAIT)
            assert isinstance(failed.value.__cause__, SystemExit)
            assert first.id() in other.wait_for(lambda m: first.id() in m, WAIT)
            second = writer.register(endpoint_spec(endpoint="second"))
            assert second.id() in other.wait_for(lambda m: second.id() in m, WAIT)  # the pump goes on
        assert logs.matching("ended")
        other.close()
        doomed.close()
