"""Liveness of the kube backend: which workers are served (ready and owned), with which records: pure rules.

A worker (one DynamoWorkerMetadata) is served only when it is ready, its CR exists and the CR's
Pod ownerReference uid equals the ready pod's uid. Readiness comes from EndpointSlices in pod
mode (an endpoint with ``conditions.ready`` true and a complete ``targetRef``) and from Pod
container statuses in container mode. Two ready uids for one CR name (a stale slice during a pod
restart) exclude it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from discovery_sync.identity import DiscoveryInstanceId
from discovery_sync.model import DiscoveryInstance

from .identity import cr_name_for
from .layout import Slot, parse_data

if TYPE_CHECKING:
    from .summary import ObjectSummary


def parse_rv(value: Any) -> int | None:
    """A resourceVersion as an integer (what etcd-backed servers use), or None when it is not one."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


#: CR name -> uids of the ready pods that may own it
Readiness = dict[str, set[str]]


def ready_from_slices(slices: Iterable[Mapping[str, Any]]) -> Readiness:
    """Pod mode: the pods EndpointSlices list as ready, by pod name (= CR name)."""
    ready: Readiness = {}
    for item in slices:
        for endpoint in item.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            conditions = endpoint.get("conditions") or {}
            if (
                conditions.get("ready") is True
                and ref.get("name")
                and ref.get("uid")
                and ref.get("kind", "Pod") == "Pod"
            ):
                ready.setdefault(ref["name"], set()).add(ref["uid"])
    return ready


def ready_from_pods(pods: Iterable[Mapping[str, Any]]) -> Readiness:
    """Container mode: every ready container of a pod, by its CR name (``{pod}[-{container}]``)."""
    ready: Readiness = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not meta.get("name") or not meta.get("uid"):
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("ready") is True and status.get("name"):
                ready.setdefault(cr_name_for(meta["name"], status["name"]), set()).add(meta["uid"])
    return ready


def pod_owner_uid(cr: Mapping[str, Any]) -> str | None:
    """The uid of the Pod the CR's ownerReferences name (None without one)."""
    for ref in (cr.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and ref.get("apiVersion", "v1") == "v1" and ref.get("uid"):
            uid: str = ref["uid"]
            return uid
    return None


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One DynamoWorkerMetadata as a reader knows it: its last valid records and when each appeared."""

    name: str
    uid: str | None
    owner_uid: str | None
    resource_version: str
    slots: dict[Slot, DiscoveryInstance] = field(default_factory=dict)
    records: dict[DiscoveryInstanceId, DiscoveryInstance] = field(default_factory=dict)
    #: the CR resourceVersion at which each record first appeared in this CR (None: not comparable)
    first_seen: dict[DiscoveryInstanceId, int | None] = field(default_factory=dict)


def update_entry(previous: WorkerEntry | None, cr: ObjectSummary | Mapping[str, Any]) -> WorkerEntry:
    """The entry for a new version of a CR (its :class:`~.summary.ObjectSummary`, or the object).

    While the CR uid and owner uid are unchanged, a ``spec.data`` that is null or unparsable keeps
    the last valid records, and records keep the version they first appeared at.
    """
    from .summary import summarize_cr  # (it reads this module's rules)

    summary = summarize_cr(cr) if isinstance(cr, Mapping) else cr
    name, uid, owner, version = summary.name, summary.uid, summary.owner, summary.resource_version
    same = previous is not None and (previous.uid, previous.owner_uid) == (uid, owner)
    if same and previous is not None and previous.resource_version == version:
        return previous
    kept = previous.slots if same and previous is not None else {}
    parsed = parse_data(summary.payload, kept, f"DynamoWorkerMetadata {name}")
    slots = kept if parsed is None else parsed
    records: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
    for record in slots.values():
        records.setdefault(record.id(), record)
    rv = parse_rv(version)
    seen = previous.first_seen if same and previous is not None else {}
    first_seen = {key: seen.get(key, rv) for key in records}
    return WorkerEntry(name, uid, owner, version, dict(slots), records, first_seen)


def is_served(entry: WorkerEntry, ready: Readiness) -> bool:
    uids = ready.get(entry.name)
    return uids is not None and len(uids) == 1 and entry.owner_uid in uids
