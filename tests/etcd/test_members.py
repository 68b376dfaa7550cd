"""Which etcd member a client asks, and how long it waits for one (docs/design.md §7): patience
derived from the TTL, members set aside in order, connections cut under a hung request, and the
gateway moving on from a member that accepts connections and never answers (``silent_port``)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import requests

from backends.etcd.deadlines import Patience
from backends.etcd.members import SET_ASIDE, Members
from backends.etcd.wire import EtcdGateway
from discovery_sync.testing import ManualClock

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"


@pytest.mark.parametrize(
    ("ttl", "request_timeout", "expected"),
    [
        (10, 10.0, Patience(keepalive=1.0, write=10 / 3, read=5.0, confirm=1.0)),
        (5, 10.0, Patience(keepalive=1.0, write=5 / 3, read=5.0, confirm=1.0)),
        (1, 10.0, Patience(keepalive=1 / 3, write=1.0, read=5.0, confirm=1.0)),
        (60, 10.0, Patience(keepalive=1.0, write=10.0, read=10.0, confirm=1.0)),
        (10, 0.5, Patience(keepalive=0.5, write=0.5, read=0.5, confirm=0.5)),
        (10, 0.05, Patience(keepalive=0.1, write=0.1, read=0.1, confirm=0.1)),
    ],
)
def test_patience_follows_the_ttl_within_the_request_timeout(ttl, request_timeout, expected):
    assert Patience.for_ttl(ttl, request_timeout) == expected


def test_members_are_asked_current_first_and_set_aside_ones_last_until_their_time_is_up():
    clock = ManualClock()
    members = Members([A, B, C], clock=clock)
    assert members.order() == [A, B, C]
    assert members.set_aside(A, "no reply") is True
    assert members.set_aside(A, "no reply again") is False  # already aside: its time starts again
    assert members.order() == [B, C, A]
    clock.advance(1)
    members.set_aside(B, "refused")
    assert members.order() == [C, A, B]  # the one whose time is up soonest first
    members.answered(C)
    assert (members.current, members.preferred()) == (C, C)
    assert members.status() == {"member": C, "set_aside": {A: SET_ASIDE - 1, B: SET_ASIDE}}
    clock.advance(SET_ASIDE - 1)
    assert members.order() == [C, A, B]  # A's time is up: an ordinary member again, after the current
    members.answered(B)  # a member set aside that answers after all is taken back
    assert (members.order(), members.is_aside(B)) == ([B, C, A], False)


def test_a_lone_member_is_never_set_aside_out_of_reach():
    members = Members([A])
    members.set_aside(A, "no reply")
    assert members.order() == [A]


def _post_in_thread(session: requests.Session, url: str) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def post() -> None:
        started = time.monotonic()
        try:
            session.post(url, json={}, timeout=30)
        except requests.RequestException as exc:
            outcome.append((type(exc), time.monotonic() - started))

    thread = threading.Thread(target=post, name="test-post")
    thread.start()
    return thread, outcome


def test_setting_a_member_aside_cuts_the_requests_hung_on_it_and_no_others(silent_port):
    other = socket.create_server(("127.0.0.1", 0))  # a second silent member
    hung, elsewhere = f"http://127.0.0.1:{silent_port}", f"http://127.0.0.1:{other.getsockname()[1]}"
    members = Members([hung, elsewhere])
    session = requests.Session()
    session.mount("http://", members.connections.adapter())
    try:
        cut, cut_outcome = _post_in_thread(session, hung + "/v3/kv/range")
        spared, spared_outcome = _post_in_thread(requests.Session(), elsewhere + "/v3/kv/range")
        kept, kept_outcome = _post_in_thread(session, elsewhere + "/v3/kv/put")
        time.sleep(0.3)  # the requests are sent and waiting for their answers
        members.set_aside(hung, "no reply within 1 s")
        cut.join(5)
        assert not cut.is_alive() and cut_outcome and cut_outcome[0][1] < 5  # type: ignore[index]
        assert spared.is_alive() and kept.is_alive()  # another member's requests wait on
        assert members.connections.cut(elsewhere) == 1  # the tracked one only, not another session's
        kept.join(5)
        assert kept_outcome
    finally:
        other.close()
        session.close()
        spared.join(35)
    assert spared_outcome  # the silent server closed under it


def test_a_request_moves_on_from_a_member_that_never_answers_within_its_patience(silent_port, etcd_server, prefix):
    hung = f"http://127.0.0.1:{silent_port}"
    gateway = EtcdGateway([hung, etcd_server.url], patience=Patience.for_ttl(3, 10.0))
    overdue: list[tuple[str, str]] = []
    started = time.monotonic()
    lease_id, _ = gateway.lease_grant(3)  # a write: one second on the silent member, then the next
    assert 1.0 <= time.monotonic() - started < 2.5
    assert gateway.members.status()["member"] == etcd_server.url and hung in gateway.members.status()["set_aside"]
    gateway.members.answered(hung)  # taken back: the keep-alive asks it first again
    started = time.monotonic()
    assert gateway.lease_keepalive(lease_id, on_overdue=lambda member, cause: overdue.append((member, cause))) > 0
    assert 1.0 <= time.monotonic() - started < 2.5
    assert overdue == [(hung, "no reply within 1 s")]
    gateway.lease_revoke(lease_id)


def test_a_read_hung_on_a_member_moves_on_as_soon_as_it_is_set_aside(silent_port, etcd_server, prefix):
    hung = f"http://127.0.0.1:{silent_port}"
    gateway = EtcdGateway([hung, etcd_server.url])  # a read may wait 5 s on one member
    key = f"{prefix}/k".encode()
    gateway.members.answered(etcd_server.url)
    gateway.put(key, b"v")
    gateway.members.answered(hung)
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(gateway.range(key)), name="test-read")
    started = time.monotonic()
    reader.start()
    time.sleep(0.3)  # the read waits on the silent member
    gateway.members.set_aside(hung, "the keep-alive found it hung")
    reader.join(5)
    assert time.monotonic() - started < 1.5
    ((kv,), _) = found[0]  # type: ignore[misc]
    assert (kv.key, kv.value) == (key, b"v")
