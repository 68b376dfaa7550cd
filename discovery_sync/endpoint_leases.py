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
* The last release of a registration the leases made unregisters it, retrying with backoff
  until it succeeds, the record is gone already, or the client shuts down. A released id is
  then "retired": the next lease registers it again without asking a listing, which may still
  show the removed record.
* Every endpoint id has its own lock: leases of different endpoints never wait for each other.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from .errors import ClientClosed, ConflictError, NotFoundError, ValidationError
from .identity import EndpointInstanceId
from .model import DiscoveryInstance, Endpoint, stored_form
from .queries import Query
from .specs import EndpointSpec
from .threads import Backoff, log_retry, start_thread

if TYPE_CHECKING:
    from .discovery import Discovery

# the reference's retry delays for an unregister that failed
RETRY_START = 0.05
RETRY_MAXIMUM = 5.0


@dataclass
class _Registration:
    """The registration the leases of one endpoint id share."""

    instance: Endpoint
    leases: int
    owned: bool  # made by the leases (removed by the last release), not borrowed


@dataclass
class _Slot:
    """One endpoint id's lock and registration; ``users`` counts the threads inside ``lock``
    or waiting for it, so that the slot is dropped only when nobody can still touch it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    registration: _Registration | None = None
    users: int = 0


class EndpointLeases:
    """The lease manager of one client (``Discovery.lease_endpoint`` creates it on first use)."""

    def __init__(self, client: Discovery) -> None:
        self._client = client
        self._lock = threading.Lock()  # guards _slots and _retired, never held while blocking
        self._slots: dict[EndpointInstanceId, _Slot] = {}
        self._retired: set[EndpointInstanceId] = set()
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop retrying: a release waiting between attempts returns (the client shuts down)."""
        self.cancelled.set()

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
            with slot.lock:
                if slot.registration is None:
                    slot.registration = self._register(spec, candidate)
                else:
                    _check_same(slot.registration.instance, candidate, "is held by another lease")
                    slot.registration.leases += 1
                return EndpointLease(self, slot.registration.instance)
        finally:
            self._leave(endpoint_id, slot)

    def _register(self, spec: EndpointSpec, candidate: Endpoint) -> _Registration:
        """The first lease: borrow the stored registration or make one (slot lock held)."""
        endpoint_id = candidate.id()
        with self._lock:
            retired = endpoint_id in self._retired
        existing = self._own_registration(endpoint_id)
        if existing is None and not retired:
            existing = self._listed_registration(candidate)
        if existing is not None:
            _check_same(existing, candidate, "was registered before the first lease")
            registration = _Registration(candidate, 1, owned=False)
        else:
            stored = self._client.register(spec)
            # a record this listing missed was kept by register(): it is not the leases' to remove
            _check_same(stored, candidate, "is already stored")
            registration = _Registration(candidate, 1, owned=True)
        with self._lock:
            self._retired.discard(endpoint_id)
        return registration

    def _own_registration(self, endpoint_id: EndpointInstanceId) -> DiscoveryInstance | None:
        """The client's own record with this id (its ``register()``): no listing can be stale about it."""
        return next((i for i in self._client.owned() if i.id() == endpoint_id), None)

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
                if registration.owned and self._unregister(registration.instance):
                    with self._lock:
                        self._retired.add(endpoint_id)
                slot.registration = None
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

    def _unregister(self, instance: Endpoint) -> bool:
        """Remove the leases' registration, retrying with backoff; False when the client shut
        down first (it removes its records itself)."""
        backoff = Backoff(RETRY_START, RETRY_MAXIMUM)
        while not self.cancelled.is_set():
            try:
                self._client.unregister(instance.id())
                return True
            except NotFoundError:  # the client's unregister() removed it already
                return True
            except ClientClosed:
                return False
            except Exception as exc:
                delay = backoff.next()
                log_retry(f"releasing the endpoint registration {instance.id().to_path()}", exc, delay)
                self.cancelled.wait(delay)
        return False

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
        """Give the lease back and return once that is done (after removing the registration if
        this was its last lease). Idempotent; never raises for a client that was shut down."""
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
