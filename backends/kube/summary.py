"""What a reader keeps of a listed or watched object: the few fields the view needs, not the object.

A DynamoWorkerMetadata, a Pod or an EndpointSlice as the API server sends it carries
``managedFields``, annotations, status and spec fields that discovery never reads; keeping them
cost a reader about 14 kB per worker. The streams turn every object into an
:class:`ObjectSummary` as it arrives (a list page at a time), so the raw JSON is freed at once:

* a DynamoWorkerMetadata: name, uid, resourceVersion, its Pod owner's uid and ``spec.data``
  (parsed into records by :func:`~.liveness.update_entry`, which the view then drops);
* an EndpointSlice: the ``(pod name, pod uid)`` pairs it lists as ready;
* a Pod: the ``(CR name, pod uid)`` pairs of its ready containers.

Names and uids are interned: each appears in several indexes of the view.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .liveness import Readiness, pod_owner_uid, ready_from_pods, ready_from_slices

#: a readiness object's contribution: (CR name, ready pod uid) pairs
ReadyPairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ObjectSummary:
    """One object as the view keeps it. ``payload``: a CR's ``spec.data`` (None once parsed), or a
    readiness object's :data:`ReadyPairs`."""

    name: str
    uid: str | None
    resource_version: str
    owner: str | None = None
    payload: Any = None


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def _head(obj: Mapping[str, Any]) -> tuple[str, str | None, str]:
    meta = obj.get("metadata") or {}
    return _interned(meta.get("name", "")), _interned(meta.get("uid")), str(meta.get("resourceVersion", ""))


def versioned(obj: Mapping[str, Any]) -> ObjectSummary:
    """Name, uid and resourceVersion alone (what the read barrier compares)."""
    return ObjectSummary(*_head(obj))


def summarize_cr(obj: Mapping[str, Any]) -> ObjectSummary:
    """A DynamoWorkerMetadata: its identity, Pod owner and ``spec.data``."""
    spec = obj.get("spec")
    data = spec.get("data") if isinstance(spec, dict) else None
    return ObjectSummary(*_head(obj), owner=_interned(pod_owner_uid(obj)), payload=data)


def _pairs(ready: Readiness) -> ReadyPairs:
    return tuple((sys.intern(name), sys.intern(uid)) for name, uids in ready.items() for uid in sorted(uids))


def summarize_slice(obj: Mapping[str, Any]) -> ObjectSummary:
    """An EndpointSlice: the pods it lists as ready (:func:`~.liveness.ready_from_slices`)."""
    return ObjectSummary(*_head(obj), payload=_pairs(ready_from_slices([obj])))


def summarize_pod(obj: Mapping[str, Any]) -> ObjectSummary:
    """A Pod: its ready containers' CR names (:func:`~.liveness.ready_from_pods`)."""
    return ObjectSummary(*_head(obj), payload=_pairs(ready_from_pods([obj])))


def readiness(summaries: Any) -> Readiness:
    """CR name -> ready pod uids, from the summaries of every readiness object."""
    ready: Readiness = {}
    for summary in summaries:
        for name, uid in summary.payload or ():
            ready.setdefault(name, set()).add(uid)
    return ready


Summarize = Callable[[Mapping[str, Any]], ObjectSummary]
