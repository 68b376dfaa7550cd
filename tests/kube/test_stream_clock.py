"""A Kubernetes list+watch stream backs off on its clock and stop() ends its wait: on a manual clock
the retries follow advance() (250 ms doubling, ±20 %), with no real waiting."""

from __future__ import annotations

from typing import Any

from discovery_sync.backends.kube.watcher import Message, ResourceStream, Trouble
from discovery_sync.backends.kube.wire import Resource

from discovery_sync.testing import ManualClock

WAIT = 10.0


class RefusingApi:
    """An API server that is never reachable; counts the lists asked of it."""

    server = "https://203.0.113.1:6443"

    def __init__(self) -> None:
        self.lists = 0

    def list_all(self, resource: Resource, summarize: Any) -> Any:
        self.lists += 1
        raise ConnectionRefusedError("connection refused")


def test_the_stream_retries_by_its_clock_and_stop_ends_its_wait() -> None:
    clock = ManualClock()
    api = RefusingApi()
    posted: list[Message] = []
    stream = ResourceStream(api, Resource("pods", lambda **kwargs: None), posted.append, clock=clock)
    clock.enroll(stream._thread)  # the fake never blocks: the thread only waits on the clock
    stream.start()
    clock.settle()
    assert api.lists == 1
    clock.advance(0.3)  # the first delay: 0.25 s ± 20 %
    assert api.lists == 2
    clock.advance(0.25)  # the second is at least 0.4 s
    assert api.lists == 2
    clock.advance(0.35)  # and at most 0.6 s
    assert api.lists == 3
    assert all(isinstance(m, Trouble) and "listing pods failed" in m.message for m in posted)
    stream.stop(WAIT)  # its wait (at least 0.8 s of a clock that stands still) ends at once
    assert not stream.is_alive() and api.lists == 3  # woken, it saw the stop: no more attempt
