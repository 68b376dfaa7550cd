"""Shared endpoint registrations: every part of a process serving an endpoint holds a lease.

The first lease of an endpoint registers it, later leases share that registration, and the
registration is removed when the last lease is released (the reference runtime's
``EndpointRegistrationLease``). Rules:

* An endpoint id (namespace, component, endpoint and the client's instance id) has one
  registration per client; a lease with a different value for an id that is held raises
  ConflictError and leaves the held leases as they are.
* A registration that exists before the first lease (made by the client's own ``register()``,
  or by another client with the same instance id) is borrowed: releasing every lease keeps it.
  A different value stored under the id raises ConflictError.
* While leases hold a registration, the client's ``unregister()`` of it raises ConflictError
  naming them: a plain call never pulls the record from under live leases.
* Every lease of a held registration reads the record: one that vanished by another route (deleted
  in the store, swept as dead) is registered again rather than counted on.
* The last release of a registration the leases made unregisters it, retrying with backoff
  until it succeeds, the record is gone already, a lease takes the registration again, or the
  client shuts down. Between attempts the endpoint is free: a lease taken meanwhile shares the
  record still stored (the release then returns), or says why it cannot. A removed id is then
  "retired": the next lease registers it again without asking a listing, which may still show
  the removed record.
* Every endpoint id has its own lock: leases of different endpoints never wait for each other.
  Its holder makes one store call at a time under it, which the backend's own timeouts bound; a
  lease waits for it at most ``WAIT_TIMEOUT`` seconds, then raises BackendUnavailable saying what
  the other thread is doing.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from .errors import BackendUnavailable, ClientClosed, ConflictError, InstanceReplaced, NotFoundError, ValidationError
from .identity import DiscoveryInstanceId, EndpointInstanceId
from .model import DiscoveryInstance, Endpoint, stored_form
from .queries import Query
from .retry import Retry
from .specs import EndpointSpec
from .threads import log_retry, start_thread

if TYPE_CHECKING:
    from .discovery import Discovery

# the reference's retry delays for an unregister that failed
RETRY_START = 0.05
RETRY_MAXIMUM = 5.0
#: seconds a lease waits for another thread's store call on the same endpoint (registering it,
#: removing it, checking that it is stored): longer than such a call takes by default on any
#: backend (etcd request_timeout and Kubernetes write_timeout: 10 s; the file store's endpoint
#: writes take no store lock), so that it fires only on a store that does not answer
WAIT_TIMEOUT = 30.0


@dataclass
class _Registration:
    """The registration the leases of one endpoint id share."""

    instance: Endpoint
    leases: int  # 0: its last release is removing it
    owned: bool  # made by the leases (removed by the last release), not borrowed
    revivals: int = 0  # leases taken while it was being removed: that removal stops
    release_failure: BaseException | None = None  # why its removal failed, while it retries


@dataclass
class _Slot:
    """One endpoint id's lock and registration; ``users`` counts the threads inside ``lock``
    or waiting for it, so that the slot is dropped only when nobody can still touch it;
    ``doing`` says what the thread holding ``lock`` does in the store."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    registration: _Registration | None = None
    users: int = 0
    doing: str = ""


class EndpointLeases:
    """The lease manager of one client (``Discovery.lease_endpoint`` uses it)."""

    def __init__(self, client: Discovery) -> None:
        self._client = client
        self._lock = threading.Lock()  # guards _slots and _retired, never held while blocking
        self._changed = threading.Condition(self._lock)  # a revival or cancel(): a retrying release looks
        self._slots: dict[EndpointInstanceId, _Slot] = {}
        self._retired: set[EndpointInstanceId] = set()
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop retrying: a release waiting between attempts returns (the client shuts down)."""
        with self._changed:
            self.cancelled.set()
            self._changed.notify_all()

    def check_unleased(self, instance_id: DiscoveryInstanceId) -> None:
        """ConflictError when leases hold ``instance_id``'s registration (the client's
        ``unregister()`` asks, under its API lock: the first lease of an id is counted under it)."""
        if not isinstance(instance_id, EndpointInstanceId):
            return
        with self._lock:
            slot = self._slots.get(instance_id)
            registration = slot.registration if slot is not None else None
            if registration is None or not registration.leases:
                return
            held, owned = registration.leases, registration.owned
        endpoint_id = registration.instance.id()
        count = "1 lease of this client holds it" if held == 1 else f"{held} leases of this client hold it"
        then = (
            "the last release removes it"
            if owned
            else "then unregister() it: it was registered before the first lease, so the last release keeps it"
        )
        raise ConflictError(
            f"cannot unregister endpoint {endpoint_id.to_path()}: {count} (lease_endpoint()), and unregister() "
            f"would remove the record from under them; release them instead, {then}"
        )

    # -- taking a lease -----------------------------------------------------------------------------
    def acquire(self, spec: EndpointSpec) -> EndpointLease:
        """A lease of ``spec``'s endpoint, registering it unless it is held or already stored."""
        if not isinstance(spec, EndpointSpec):
            raise ValidationError(f"lease_endpoint() takes an EndpointSpec, got {type(spec).__name__}")
        candidate = stored_form(spec.to_instance(self._client.instance_id))
        self._check_open()
        endpoint_id = candidate.id()
        slot = self._enter(endpoint_id)
        try:
            if not slot.lock.acquire(timeout=WAIT_TIMEOUT):
                raise BackendUnavailable(self._busy(slot, endpoint_id))
            try:
                registration = slot.registration
                if registration is None:
                    slot.doing = "registering it"
                    self._register(spec, candidate, slot)
                else:
                    self._join(spec, candidate, slot, registration)
                return EndpointLease(self, candidate)
            finally:
                slot.doing = ""
                slot.lock.release()
        finally:
            self._leave(endpoint_id, slot)

    def _register(self, spec: EndpointSpec, candidate: Endpoint, slot: _Slot) -> None:
        """The first lease: borrow the stored registration or make one (slot lock held)."""
        endpoint_id = candidate.id()
        with self._lock:
            retired = endpoint_id in self._retired
        listed = None
        if not retired and self._own_registration(endpoint_id) is None:
            listed = self._listed_registration(candidate)
        with self._client._api_lock:  # unregister() of the client's own record counts the leases under it
            existing = self._own_registration(endpoint_id) or listed
            if existing is not None:
                _check_same(existing, candidate, "was registered before the first lease")
                slot.registration = _Registration(candidate, 1, owned=False)
            else:
                stored = self._client.register(spec)
                # a record this listing missed was kept by register(): it is not the leases' to remove
                _check_same(stored, candidate, "is already stored")
                slot.registration = _Registration(candidate, 1, owned=True)
        with self._lock:
            self._retired.discard(endpoint_id)

    def _join(self, spec: EndpointSpec, candidate: Endpoint, slot: _Slot, registration: _Registration) -> None:
        """A lease of a held registration, or of one its last release is removing (slot lock
        held): check that its record is still stored, and register it again if it vanished."""
        endpoint_id = candidate.id()
        removing = registration.leases == 0
        if removing and stored_form(registration.instance) != candidate:
            raise ConflictError(
                f"endpoint {endpoint_id.to_path()} is still stored with a different value, "
                f"{registration.instance.to_dict()}: the release of its last lease is removing it"
                f"{_failed(registration)}; lease it once it is gone (this lease asks for {candidate.to_dict()})"
            )
        _check_same(registration.instance, candidate, "is held by another lease")
        try:
            slot.doing = "checking that it is still stored"
            stored = self._client.get(endpoint_id)
            if stored is not None:
                _check_same(stored, candidate, "is stored now")
            with self._client._api_lock:  # as in _register: unregister() sees this lease
                ours = self._own_registration(endpoint_id) is not None
                if stored is None or (registration.owned and not ours):
                    slot.doing = "registering it again, its record having vanished"
                    _check_same(self._client.register(spec), candidate, "is stored now")
                    registration.owned = registration.owned or not ours
                registration.leases += 1
        except BackendUnavailable as exc:
            if not removing or registration.release_failure is None:
                raise
            raise type(exc)(
                f"cannot lease endpoint {endpoint_id.to_path()}: the release of its last lease is still retrying to "
                f"remove it{_failed(registration)}, and {slot.doing} failed too ({exc}); retry once the store "
                "takes writes again"
            ) from exc
        if removing:
            with self._changed:
                registration.revivals += 1
                registration.release_failure = None
                self._changed.notify_all()

    def _busy(self, slot: _Slot, endpoint_id: EndpointInstanceId) -> str:
        """Why a lease gave up waiting for ``endpoint_id``'s lock."""
        registration = slot.registration
        doing = (slot.doing or "using it") + (_failed(registration) if registration is not None else "")
        return (
            f"cannot lease endpoint {endpoint_id.to_path()}: waited {WAIT_TIMEOUT:g} s for another thread of this "
            f"client that is {doing}; the store answers too slowly or not at all: check it (diagnose()) and retry"
        )

    def _own_registration(self, endpoint_id: EndpointInstanceId) -> DiscoveryInstance | None:
        """The client's own record with this id (its ``register()``): no listing can be stale about it."""
        with self._client._api_lock:
            return self._client._owned.get(endpoint_id)

    def _listed_registration(self, candidate: Endpoint) -> DiscoveryInstance | None:
        query = Query.endpoints(candidate.namespace, candidate.component, candidate.endpoint)
        return next((i for i in self._client.list(query) if i.id() == candidate.id()), None)

    # -- releasing a lease ----------------------------------------------------------------------------
    def release(self, endpoint_id: EndpointInstanceId) -> None:
        """Give back one lease of ``endpoint_id``; the last one unregisters an owned registration."""
        slot = self._enter_existing(endpoint_id)
        if slot is None:
            return
        try:
            with slot.lock:
                registration = slot.registration
                if registration is None:
                    return
                registration.leases = max(registration.leases - 1, 0)
                if registration.leases:
                    return
                if not registration.owned:
                    slot.registration = None
                    return
                revivals = registration.revivals
            self._remove(endpoint_id, slot, registration, revivals)
        finally:
            self._leave(endpoint_id, slot)

    def release_abandoned(self, endpoint_id: EndpointInstanceId) -> None:
        """The release of a lease collected unreleased: on a thread of its own, since a
        finalizer may run anywhere (even in a thread holding this endpoint's lock)."""
        warnings.warn(
            f"an EndpointLease of {endpoint_id.to_path()} was garbage-collected without release(); "
            "releasing it in the background",
            ResourceWarning,
            stacklevel=2,
        )
        start_thread(f"discovery-sync-lease-release-{endpoint_id.to_path()}", partial(self.release, endpoint_id))

    def _remove(self, endpoint_id: EndpointInstanceId, slot: _Slot, registration: _Registration, revivals: int) -> None:
        """Unregister the leases' registration after its last release, retrying with backoff
        until it is gone, a lease takes it again (``revivals`` changes) or the client shuts down
        (it removes its records itself). The slot lock is held during each attempt only."""
        retry = Retry(RETRY_START, RETRY_MAXIMUM)  # delays only: waits are on _changed, which a lease wakes
        while True:
            with slot.lock:
                if slot.registration is not registration or registration.revivals != revivals:
                    return  # leased again (its next last release removes it), or removed already
                if self.cancelled.is_set():
                    slot.registration = None
                    return
                slot.doing = "removing it after its last release"
                try:
                    outcome = self._unregister_once(endpoint_id)
                finally:
                    slot.doing = ""
                if isinstance(outcome, bool):
                    slot.registration = None
                    if outcome:
                        with self._lock:
                            self._retired.add(endpoint_id)
                    return
                registration.release_failure = outcome
                delay = retry.next_delay()
                log_retry(f"releasing the endpoint registration {endpoint_id.to_path()}", outcome, delay)
            with self._changed:
                self._changed.wait_for(lambda: self.cancelled.is_set() or registration.revivals != revivals, delay)

    def _unregister_once(self, endpoint_id: EndpointInstanceId) -> bool | Exception:
        """One attempt: True when the record is gone, False when the client shut down first
        (it removes its records itself), the error when it failed."""
        try:
            self._client.unregister(endpoint_id)
        except (NotFoundError, InstanceReplaced):  # removed already, or a cohort successor's now: not ours to remove
            return True
        except ClientClosed:
            return False
        except Exception as exc:
            return exc
        return True

    # -- slots ----------------------------------------------------------------------------------------
    def _enter(self, endpoint_id: EndpointInstanceId) -> _Slot:
        """The slot of ``endpoint_id`` (created if absent), counted as used until ``_leave``."""
        with self._lock:
            slot = self._slots.get(endpoint_id)
            if slot is None:
                slot = self._slots[endpoint_id] = _Slot()
            slot.users += 1
            return slot

    def _enter_existing(self, endpoint_id: EndpointInstanceId) -> _Slot | None:
        with self._lock:
            slot = self._slots.get(endpoint_id)
            if slot is not None:
                slot.users += 1
            return slot

    def _leave(self, endpoint_id: EndpointInstanceId, slot: _Slot) -> None:
        """Drop the slot once no lease holds it and no other thread uses it (a failed
        registration leaves nothing behind)."""
        with self._lock:
            slot.users -= 1
            if slot.users == 0 and slot.registration is None and self._slots.get(endpoint_id) is slot:
                del self._slots[endpoint_id]

    def _check_open(self) -> None:
        if self._client.closed or self.cancelled.is_set():
            raise ClientClosed("this discovery client was shut down; connect() again")


def _failed(registration: _Registration) -> str:
    """Why the removal of ``registration`` failed last, for a message ("" when it has not)."""
    failure = registration.release_failure
    return "" if failure is None else f" (its last attempt failed: {failure})"


def _check_same(existing: DiscoveryInstance, candidate: Endpoint, how: str) -> None:
    """ConflictError unless ``existing`` (compared in stored form) is ``candidate``."""
    if stored_form(existing) != candidate:
        raise ConflictError(
            f"endpoint {candidate.id().to_path()} {how} with a different value: "
            f"{existing.to_dict()} (this lease asks for {candidate.to_dict()})"
        )


class EndpointLease:
    """One holder's share of an endpoint registration (see :meth:`Discovery.lease_endpoint`).

    ``release()`` gives it back; the registration goes with the last lease if the leases made
    it. Use it as a context manager to release on exit. A lease garbage-collected unreleased
    is released on a background thread, with a ResourceWarning.
    """

    def __init__(self, manager: EndpointLeases, instance: Endpoint) -> None:
        self._manager = manager
        self._instance = instance
        self._lock = threading.Lock()  # a second release() waits for the first to finish
        self._released = False
        self._finalizer = weakref.finalize(self, manager.release_abandoned, instance.id())
        self._finalizer.atexit = False  # at exit the client's shutdown removes its records

    @property
    def instance(self) -> Endpoint:
        """The registered endpoint, as stored."""
        return self._instance

    @property
    def id(self) -> EndpointInstanceId:
        return self._instance.id()

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the lease back and return once that is done: after removing the registration if
        this was its last lease and the leases made it, or once another lease took it again while
        the removal was retrying. Idempotent; never raises for a client that was shut down."""
        with self._lock:
            if self._released:
                return
            self._finalizer.detach()
            try:
                self._manager.release(self._instance.id())
            finally:
                # even when interrupted: releasing twice could remove a registration still leased
                self._released = True

    def __enter__(self) -> EndpointLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<EndpointLease {self._instance.id().to_path()} {state}>"
