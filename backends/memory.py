"""In-process backend: clients that share a :class:`MemoryRegistry` see each other's records.

Meant for users' own unit tests and for single-process programs. ``memory://`` uses one
process-wide default registry; ``memory://NAME`` a separate registry per name.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Iterable
from typing import Any

from discovery_sync.broadcast import FeedSet
from discovery_sync.cohort import CohortMembership, Replacement
from discovery_sync.discovery import Discovery
from discovery_sync.events import Removed
from discovery_sync.failover import FailoverLock, MemoryFailoverLock, check_stale_after
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.logical_id import PARSERS, from_options, member_instance_id
from discovery_sync.model import DiscoveryInstance, Endpoint, Model
from discovery_sync.options import SERVER_ONLY, OptionSet, boolean, optional, uint64
from discovery_sync.queries import Query
from discovery_sync.reconcile import apply
from discovery_sync.watch import WatchFeed


class MemoryRegistry:
    """The shared store of in-process clients; every operation is atomic under one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._records: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        # the same records by kind, and by endpoint (or event scope and topic): a query names one
        # of these, so list() and a watch's start cost what they return, not the registry's size
        self._by_kind: dict[RecordKind, dict[DiscoveryInstanceId, DiscoveryInstance]] = {k: {} for k in RecordKind}
        self._by_group: dict[tuple[Any, ...], dict[DiscoveryInstanceId, DiscoveryInstance]] = {}
        self._feeds = FeedSet()
        # failover cohorts (docs/design.md §4.1): each logical id's current writer, and the cohort
        # member that wrote each cohort record
        self._claims: dict[int, CohortMembership] = {}
        self._writers: dict[DiscoveryInstanceId, CohortMembership] = {}

    def get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        with self.lock:
            return self._records.get(instance_id)

    def create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        with self.lock:
            existing = self._records.get(instance.id())
            if existing is None:
                self._store(None, instance)
            return existing

    def replace(self, instance: DiscoveryInstance) -> None:
        with self.lock:
            self._store(self._records.get(instance.id()), instance)

    def _store(self, old: DiscoveryInstance | None, new: DiscoveryInstance) -> None:
        instance_id = new.id()
        stored, events, _ = apply(old, new)
        self._records[instance_id] = self._by_kind[new.kind][instance_id] = stored
        self._by_group.setdefault(_group_of(new), {})[instance_id] = stored
        for event in events:
            self._feeds.publish(event, stored)

    def claim(self, member: CohortMembership) -> None:
        """Make ``member`` its logical id's current writer (a predecessor is told at once that it
        was replaced), or raise InstanceReplaced when a successor replaced it since it claimed."""
        with self.lock:
            current = self._claims.get(member.logical_instance_id)
            if current is member:
                return
            if member.claimed:  # a successor claimed since: it marked this member replaced
                member.check()
            self._claims[member.logical_instance_id] = member
        if current is not None:
            current.mark_replaced(
                Replacement(member.logical_instance_id, "another client of this process", "a takeover")
            )

    def take_over(self, instance: DiscoveryInstance, member: CohortMembership) -> None:
        """Store ``instance`` whatever is stored under its id, as ``member``'s write."""
        with self.lock:
            member.check()
            self.replace(instance)
            self._writers[instance.id()] = member

    def current(self, instance_id: DiscoveryInstanceId, member: CohortMembership) -> bool:
        """Whether ``member`` may still change ``instance_id``: it is still its logical id's
        writer (or never wrote) and no other member wrote the record since."""
        with self.lock:
            if member.replaced is not None:
                return False
            writer = self._writers.get(instance_id)
            return writer is None or writer is member

    def delete_written(self, instance_id: DiscoveryInstanceId, member: CohortMembership) -> None:
        """Delete the record only while it is ``member``'s write (else InstanceReplaced)."""
        with self.lock:
            if not self.current(instance_id, member):
                member.check()
                return  # another member's write, though this one was not replaced: not ours to remove
            self.delete(instance_id)

    def delete(self, instance_id: DiscoveryInstanceId) -> None:
        with self.lock:
            self._writers.pop(instance_id, None)
            instance = self._records.pop(instance_id, None)
            if instance is None:
                return
            del self._by_kind[instance.kind][instance_id]
            group = _group_of(instance)
            members = self._by_group[group]
            del members[instance_id]
            if not members:
                del self._by_group[group]
            self._feeds.publish(Removed(instance_id), None)

    def list(self, query: Query) -> list[DiscoveryInstance]:
        with self.lock:
            return [i for i in self._candidates(query) if query.matches(i)]

    def open_feed(self, feed: WatchFeed) -> None:
        with self.lock:
            feed.start(self._candidates(feed.query))
            self._feeds.add(feed)

    def _candidates(self, query: Query) -> Iterable[DiscoveryInstance]:
        """The records ``query`` may match: one group when it names one, else its kind's."""
        group = _group_of_query(query)
        if group is not None:
            return self._by_group.get(group, {}).values()
        return self._by_kind[query.kind].values()

    def __len__(self) -> int:
        with self.lock:
            return len(self._records)


def _group_of(instance: DiscoveryInstance) -> tuple[Any, ...]:
    if isinstance(instance, (Endpoint, Model)):
        return (instance.kind, instance.namespace, instance.component, instance.endpoint)
    return (instance.kind, instance.scope, instance.topic)


def _group_of_query(query: Query) -> tuple[Any, ...] | None:
    """The group holding every record ``query`` selects, when it names a whole one."""
    if query.kind in (RecordKind.ENDPOINT, RecordKind.MODEL):
        names = (query.namespace, query.component, query.endpoint)
        return (query.kind, *names) if None not in names else None
    return (query.kind, query.scope, query.topic) if query.scope is not None and query.topic is not None else None


_registries: dict[str, MemoryRegistry] = {}
_registries_lock = threading.Lock()


def named_registry(name: str = "") -> MemoryRegistry:
    """The process-wide registry called ``name`` (created on first use)."""
    with _registries_lock:
        return _registries.setdefault(name, MemoryRegistry())


class MemoryDiscovery(Discovery):
    """A client of a :class:`MemoryRegistry`. Its instance id is its logical instance id, else a random u64."""

    backend_name = "memory"

    def __init__(
        self,
        registry: MemoryRegistry | None = None,
        *,
        instance_id: int | None = None,
        read_only: bool = False,
        logical_instance_id: int | None = None,
    ) -> None:
        read_only = OPTIONS.check("read_only", read_only)
        logical_instance_id = OPTIONS.check("logical_instance_id", logical_instance_id)
        instance_id = member_instance_id(
            OPTIONS.check("instance_id", instance_id), logical_instance_id, read_only=read_only, owner=OPTIONS.owner
        )
        super().__init__(read_only=read_only, logical_instance_id=logical_instance_id)
        self.registry = registry if registry is not None else named_registry()
        self._instance_id = instance_id if instance_id is not None else secrets.randbits(64)
        self._watches = FeedSet()  # this client's open feeds, for shutdown(); a closed feed leaves it

    @property
    def instance_id(self) -> int:
        return self._instance_id

    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        return self.registry.get(instance_id)

    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        return self.registry.create(instance)

    def _replace(self, instance: DiscoveryInstance) -> None:
        if self._cohort is None:
            self.registry.replace(instance)
            return
        with self.registry.lock:
            if not self.registry.current(instance.id(), self._cohort):
                self._cohort.check()
            self.registry.take_over(instance, self._cohort)

    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        if self._cohort is None:
            self.registry.delete(instance_id)
        else:
            self.registry.delete_written(instance_id, self._cohort)

    def _failover_lock(self, name: str, stale_after: float | None) -> FailoverLock:
        if stale_after is not None:
            check_stale_after(stale_after)
        return MemoryFailoverLock(name, self.registry)  # in-process: never stale

    def _claim(self, cohort: CohortMembership) -> None:
        self.registry.claim(cohort)

    def _take_over(self, instance: DiscoveryInstance) -> None:
        assert self._cohort is not None
        self.registry.take_over(instance, self._cohort)

    def _list(self, query: Query) -> list[DiscoveryInstance]:
        return self.registry.list(query)

    def _store_lock(self, kind: RecordKind, key: str) -> contextlib.AbstractContextManager[Any]:
        return self.registry.lock

    def _open_feed(self, feed: WatchFeed) -> None:
        self.registry.open_feed(feed)
        self._watches.add(feed)
        if self.closed:  # shutdown() closed this client's feeds before this one joined them
            feed.close()
            self._check_open()

    def _probe(self) -> None:
        return None

    def _close(self) -> None:
        self._watches.close_all()


OPTIONS = OptionSet("memory", {"instance_id": optional(uint64), "read_only": boolean, **PARSERS}, refused=SERVER_ONLY)


def from_url(netloc: str, path: str, options: dict[str, Any]) -> MemoryDiscovery:
    """``memory://[NAME][?instance_id=N]``: a client of the named in-process registry; a logical
    instance id (options or environment, :mod:`discovery_sync.logical_id`) is its instance id."""
    logical_instance_id = from_options(options, OPTIONS)
    return MemoryDiscovery(
        named_registry(netloc or path.strip("/")), logical_instance_id=logical_instance_id, **OPTIONS.parse(options)
    )
