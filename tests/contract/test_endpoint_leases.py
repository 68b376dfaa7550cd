"""Shared endpoint registrations: leases of one endpoint share a registration that goes with
the last of them, borrowed registrations stay, releases end, and the bookkeeping holds under
contention (the reference runtime's ``EndpointRegistrationLease`` rules)."""

from __future__ import annotations

import contextlib
import gc
import random
import threading
import time
import uuid

import pytest

import discovery_sync as ds
from testrigs.helpers import endpoint_spec, in_thread, model_spec

NAMESPACE = "ns"
PROMPTLY = 2.0  # a release that has nothing left to retry, or is cancelled, is done within this
RETRY_BOUND = 6.0  # the longest wait between two attempts of a release (5 s, +20 % jitter)


def wait_for_endpoints(observer: ds.Discovery, expected: list[ds.Endpoint], timeout: float) -> None:
    """Block until ``observer.list()`` of the namespace's endpoints is ``expected``: woken by
    the watch's events, rechecked at least every 0.1 s for a listing that lags its watch."""
    query = ds.Query.endpoints(NAMESPACE)
    wanted = sorted(expected, key=lambda e: e.id().to_path())
    deadline = time.monotonic() + timeout
    with observer.list_and_watch(query) as watch:
        while (listed := observer.list(query)) != wanted:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the endpoints did not converge: listed {listed}, expected {wanted}"
            with contextlib.suppress(ds.WatchTimeout):
                watch.get(timeout=min(remaining, 0.1))


def timed_release(lease: ds.EndpointLease) -> float:
    started = time.monotonic()
    lease.release()
    return time.monotonic() - started


def test_an_endpoint_stays_registered_until_its_last_lease_is_released(rig):
    lessee, observer = rig.client(), rig.client()
    first = lessee.lease_endpoint(endpoint_spec())
    second = lessee.lease_endpoint(endpoint_spec())
    assert first.instance == second.instance == endpoint_spec().to_instance(lessee.instance_id)
    assert repr(first) == f"<EndpointLease {first.id.to_path()} held>"
    wait_for_endpoints(observer, [first.instance], rig.event_timeout)

    first.release()
    first.release()  # idempotent
    assert first.released and not second.released
    assert repr(first).endswith(" released>")
    assert lessee.owned() == (second.instance,)
    assert observer.list(ds.Query.endpoints()) == [second.instance]

    second.release()
    assert lessee.owned() == ()
    wait_for_endpoints(observer, [], rig.event_timeout)

    with lessee.lease_endpoint(endpoint_spec()) as lease:
        wait_for_endpoints(observer, [lease.instance], rig.event_timeout)
    assert lease.released
    wait_for_endpoints(observer, [], rig.event_timeout)


def test_a_registration_made_before_the_first_lease_is_borrowed_and_kept(rig):
    client, observer = rig.client(), rig.client()
    stored = client.register(endpoint_spec())
    for _ in range(2):  # the second round must not have taken ownership in the first
        lease = client.lease_endpoint(endpoint_spec())
        assert lease.instance == stored
        lease.release()
        assert client.owned() == (stored,)
        assert observer.list(ds.Query.endpoints()) == [stored]
    with pytest.raises(ds.ConflictError, match="before the first lease"):
        client.lease_endpoint(endpoint_spec(port=9001))
    assert observer.list(ds.Query.endpoints()) == [stored]
    assert client._endpoint_leases._slots == {}  # a failed lease leaves nothing behind


def test_a_lease_with_another_value_conflicts_and_leaves_the_held_lease_alone(rig):
    lessee, observer = rig.client(), rig.client()
    held = lessee.lease_endpoint(endpoint_spec(port=9001))
    with pytest.raises(ds.ConflictError, match="held by another lease"):
        lessee.lease_endpoint(endpoint_spec(port=9002))
    assert not held.released
    assert observer.list(ds.Query.endpoints()) == [held.instance]
    held.release()
    wait_for_endpoints(observer, [], rig.event_timeout)
    with lessee.lease_endpoint(endpoint_spec(port=9002)) as replacement:  # nothing holds the id any more
        wait_for_endpoints(observer, [replacement.instance], rig.event_timeout)


def test_only_endpoint_specs_can_be_leased(rig):
    client = rig.client()
    for bad in (model_spec(), endpoint_spec().to_instance(client.instance_id), {"type": "Endpoint"}):
        with pytest.raises(ds.ValidationError, match="EndpointSpec"):
            client.lease_endpoint(bad)
    with pytest.raises(ds.ValidationError):
        client.lease_endpoint(endpoint_spec(component="a/b"))
    assert client.list(ds.Query.endpoints()) == []
    assert client.list(ds.Query.models()) == []


def test_a_lease_after_a_release_registers_again_despite_a_stale_listing(rig, monkeypatch):
    lessee, observer = rig.client(), rig.client()
    original = lessee.lease_endpoint(endpoint_spec())
    original.release()
    wait_for_endpoints(observer, [], rig.event_timeout)

    # fault injection: this client's listing still shows the record it has just removed
    monkeypatch.setattr(lessee, "list", lambda query: [original.instance])
    replacement = lessee.lease_endpoint(endpoint_spec())
    monkeypatch.undo()
    assert replacement.instance == original.instance
    wait_for_endpoints(observer, [replacement.instance], rig.event_timeout)
    replacement.release()
    wait_for_endpoints(observer, [], rig.event_timeout)


def test_release_ends_when_another_path_removed_the_record_and_the_next_lease_registers_again(rig):
    lessee, observer = rig.client(), rig.client()
    lease = lessee.lease_endpoint(endpoint_spec(port=9001))
    lessee._delete(lease.id)  # fault injection: the record deleted in the store by hand
    wait_for_endpoints(observer, [], rig.event_timeout)
    assert timed_release(lease) < PROMPTLY

    with lessee.lease_endpoint(endpoint_spec(port=9002)) as replacement:
        wait_for_endpoints(observer, [replacement.instance], rig.event_timeout)
    wait_for_endpoints(observer, [], rig.event_timeout)


def test_unregister_of_a_leased_endpoint_is_refused_naming_its_leases(rig):
    lessee, observer = rig.client(), rig.client()
    leases = [lessee.lease_endpoint(endpoint_spec()) for _ in range(2)]
    with pytest.raises(ds.ConflictError, match=r"2 leases of this client hold it .*release them instead"):
        lessee.unregister(leases[0].id)
    leases.append(lessee.lease_endpoint(endpoint_spec()))
    wait_for_endpoints(observer, [leases[0].instance], rig.event_timeout)
    for lease in leases[1:]:
        lease.release()
    with pytest.raises(ds.ConflictError, match=r"1 lease of this client holds it .*the last release removes it"):
        lessee.unregister(leases[0].instance)
    assert lessee.owned() == (leases[0].instance,)
    leases[0].release()
    wait_for_endpoints(observer, [], rig.event_timeout)
    with pytest.raises(ds.NotFoundError):
        lessee.unregister(leases[0].id)


def test_unregister_of_a_borrowed_registration_waits_for_its_leases_to_be_released(rig):
    client, observer = rig.client(), rig.client()
    stored = client.register(endpoint_spec())
    lease = client.lease_endpoint(endpoint_spec())
    with pytest.raises(ds.ConflictError, match=r"release them instead, then unregister\(\) it"):
        client.unregister(stored)
    lease.release()
    assert observer.list(ds.Query.endpoints()) == [stored]
    client.unregister(stored)
    wait_for_endpoints(observer, [], rig.event_timeout)


def test_a_lease_registers_again_a_shared_registration_whose_record_vanished(rig):
    lessee, observer = rig.client(), rig.client()
    leases = [lessee.lease_endpoint(endpoint_spec()) for _ in range(2)]
    lessee._delete(leases[0].id)  # fault injection: the record deleted in the store by hand
    wait_for_endpoints(observer, [], rig.event_timeout)
    leases.append(lessee.lease_endpoint(endpoint_spec()))
    # stored when the lease returns (the file store's heartbeat would write it back only later)
    assert lessee.get(leases[0].id) == leases[0].instance
    wait_for_endpoints(observer, [leases[0].instance], rig.event_timeout)
    for lease in leases:
        wait_for_endpoints(observer, [lease.instance], rig.event_timeout)
        lease.release()
    wait_for_endpoints(observer, [], rig.event_timeout)


def refuse_unregister(monkeypatch, client: ds.Discovery) -> None:
    """Fault injection: the store refuses this client's unregister (a read-only or full store)."""

    def refused(instance):
        raise ds.BackendUnavailable("injected: the store refuses writes")

    monkeypatch.setattr(client, "unregister", refused)


def test_a_lease_taken_while_the_last_release_retries_reuses_the_registration(rig, monkeypatch, thread_log):
    lessee, observer = rig.client(), rig.client()
    first = lessee.lease_endpoint(endpoint_spec())
    refuse_unregister(monkeypatch, lessee)
    releaser, _ = in_thread("test-releaser", first.release)
    assert thread_log.count("releasing the endpoint registration", at_least=2) >= 2  # 50 ms, then 100 ms
    started = time.monotonic()
    taker, taken = in_thread("test-lessee", lambda: lessee.lease_endpoint(endpoint_spec()))
    taker.join(PROMPTLY)
    releaser.join(PROMPTLY)
    monkeypatch.undo()  # the store takes writes again (a lease still blocked would now go on)
    assert not taker.is_alive(), "a lease waited for a release that retries its unregister"
    assert time.monotonic() - started < PROMPTLY
    assert not releaser.is_alive(), "the release went on retrying after a lease took the registration again"
    second = taken[0]
    assert isinstance(second, ds.EndpointLease) and second.instance == first.instance
    assert first.released
    wait_for_endpoints(observer, [second.instance], rig.event_timeout)
    second.release()
    wait_for_endpoints(observer, [], rig.event_timeout)


def test_a_lease_that_cannot_take_over_a_retrying_release_says_why(rig, monkeypatch, thread_log):
    lessee, observer = rig.client(), rig.client()
    first = lessee.lease_endpoint(endpoint_spec())
    refuse_unregister(monkeypatch, lessee)
    releaser, _ = in_thread("test-releaser", first.release)
    assert thread_log.count("releasing the endpoint registration", at_least=1) >= 1
    lessee._delete(first.id)  # fault injection: the record deleted in the store by hand ...

    def refused(spec):
        raise ds.BackendUnavailable("injected: the store refuses writes")

    monkeypatch.setattr(lessee, "register", refused)  # ... which refuses to store it again
    started = time.monotonic()
    taker, taken = in_thread("test-lessee", lambda: lessee.lease_endpoint(endpoint_spec()))
    taker.join(PROMPTLY)
    monkeypatch.undo()
    assert not taker.is_alive(), "a lease waited for a release that retries its unregister"
    assert time.monotonic() - started < PROMPTLY
    failure = taken[0]
    assert isinstance(failure, ds.BackendUnavailable), failure
    assert "the release of its last lease is still retrying to remove it" in str(failure)
    assert "injected: the store refuses writes" in str(failure)
    releaser.join(PROMPTLY + RETRY_BOUND)  # its next attempt succeeds (NotFound: the record is gone)
    assert not releaser.is_alive()
    wait_for_endpoints(observer, [], rig.event_timeout)
    with lessee.lease_endpoint(endpoint_spec()) as lease:
        wait_for_endpoints(observer, [lease.instance], rig.event_timeout)


def test_a_lease_waits_for_another_threads_lease_of_the_endpoint_at_most_its_bound(rig, monkeypatch):
    from discovery_sync import endpoint_leases

    lessee, observer = rig.client(), rig.client()
    entered, go_on = threading.Event(), threading.Event()
    register = lessee.register

    def stuck_register(spec):  # fault injection: a store that takes its time to answer
        entered.set()
        go_on.wait(30)
        return register(spec)

    monkeypatch.setattr(lessee, "register", stuck_register)
    monkeypatch.setattr(endpoint_leases, "WAIT_TIMEOUT", 0.5)
    first, first_outcome = in_thread("test-first-lessee", lambda: lessee.lease_endpoint(endpoint_spec()))
    assert entered.wait(rig.event_timeout)
    started = time.monotonic()
    second, second_outcome = in_thread("test-second-lessee", lambda: lessee.lease_endpoint(endpoint_spec()))
    second.join(PROMPTLY)
    waited, still_waiting = time.monotonic() - started, second.is_alive()
    go_on.set()
    first.join(rig.event_timeout)
    assert not still_waiting, "a lease waited without limit for another thread's lease of the endpoint"
    assert 0.5 <= waited < PROMPTLY
    failure = second_outcome[0]
    assert isinstance(failure, ds.BackendUnavailable), failure
    assert "waited 0.5 s for another thread" in str(failure) and "registering it" in str(failure)
    lease = first_outcome[0]
    assert isinstance(lease, ds.EndpointLease)
    wait_for_endpoints(observer, [lease.instance], rig.event_timeout)
    lease.release()
    assert lessee._endpoint_leases._slots == {}


def test_release_ends_after_shutdown_removed_the_record(rig):
    lessee, observer = rig.client(), rig.client()
    lease = lessee.lease_endpoint(endpoint_spec())
    lessee.shutdown()
    wait_for_endpoints(observer, [], rig.event_timeout)
    assert timed_release(lease) < PROMPTLY
    assert lease.released
    with pytest.raises(ds.ClientClosed):
        lessee.lease_endpoint(endpoint_spec())


def test_shutdown_stops_a_release_that_retries_its_unregister(rig, monkeypatch, thread_log):
    lessee, observer = rig.client(), rig.client()
    lease = lessee.lease_endpoint(endpoint_spec())

    def unavailable(instance):
        raise ds.BackendUnavailable("injected: the store is unreachable")

    monkeypatch.setattr(lessee, "unregister", unavailable)
    releaser = threading.Thread(target=lease.release, name="test-releaser")
    releaser.start()
    assert thread_log.count("releasing the endpoint registration", at_least=2) >= 2  # 50 ms, then 100 ms
    assert releaser.is_alive()
    started = time.monotonic()
    lessee.shutdown()
    releaser.join(PROMPTLY)
    assert not releaser.is_alive()
    assert time.monotonic() - started < PROMPTLY
    assert lease.released
    wait_for_endpoints(observer, [], rig.event_timeout)  # shutdown removed it


THREADS = 16
STEPS = 8
ENDPOINTS = 3


def test_leases_taken_and_released_by_many_threads_end_with_the_endpoints_still_leased(rig):
    lessee, observer = rig.client(), rig.client()
    specs = [endpoint_spec(endpoint=f"e{i}") for i in range(ENDPOINTS)]
    held: list[list[ds.EndpointLease]] = [[] for _ in range(THREADS)]
    failures: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(index: int) -> None:
        rng = random.Random(f"leases-{index}")  # each thread's own sequence, whatever the interleaving
        mine = held[index]
        try:
            barrier.wait()
            for _ in range(STEPS):
                if mine and rng.random() < 0.4:
                    mine.pop(rng.randrange(len(mine))).release()
                else:
                    mine.append(lessee.lease_endpoint(rng.choice(specs)))
            for lease in [lease for lease in mine if lease.id.endpoint == "e2"]:  # e2 ends unleased
                mine.remove(lease)
                lease.release()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), name=f"lessee-{i}") for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    still_held = {lease.id: lease.instance for leases in held for lease in leases}
    assert {i.endpoint for i in still_held} == {"e0", "e1"}
    wait_for_endpoints(observer, list(still_held.values()), rig.event_timeout)

    for leases in held:
        for lease in leases:
            lease.release()
    wait_for_endpoints(observer, [], rig.event_timeout)
    assert lessee._endpoint_leases._slots == {}  # a slot goes once no lease holds it


def test_a_registration_of_another_client_with_the_same_instance_id_is_borrowed():
    url = f"memory://leases-{uuid.uuid4().hex}?instance_id=7"
    with ds.connect(url) as owner, ds.connect(url) as sharer:
        stored = owner.register(endpoint_spec())
        for _ in range(2):
            with sharer.lease_endpoint(endpoint_spec()) as lease:
                assert lease.instance == stored
            assert sharer.list(ds.Query.endpoints()) == [stored]
        with pytest.raises(ds.ConflictError, match="before the first lease"):
            sharer.lease_endpoint(endpoint_spec(port=9001))


def test_a_lease_collected_unreleased_is_released_in_the_background():
    with ds.connect(f"memory://leases-{uuid.uuid4().hex}") as client:
        with pytest.warns(ResourceWarning, match="without release"):
            lease = client.lease_endpoint(endpoint_spec())
            del lease
            gc.collect()
        wait_for_endpoints(client, [], 10.0)
