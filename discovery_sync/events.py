"""Watch events.

A watch first yields one :class:`Added` per matching record and then one :class:`Resync` with
all of them; afterwards it yields changes as they happen. Whenever the backend fell behind it
yields the changes it missed and then a fresh :class:`Resync`: consumers replace their state
with the Resync's set every time one arrives.

``Added`` and ``Resync`` carry the kind of record of their watch to a type checker: a watch of
``Query.endpoints()`` yields :data:`WatchEvent` ``[Endpoint]`` events, whose ``Added.instance``
is an ``Endpoint``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic

from .identity import DiscoveryInstanceId, ModelCardInstanceId
from .model import R


def _id_to_dict(instance_id: Any) -> dict[str, Any]:
    return {"kind": instance_id.kind.value, "path": instance_id.to_path()}


@dataclass(frozen=True, slots=True)
class Added(Generic[R]):
    """A record appeared, or an endpoint record was replaced with a new value."""

    instance: R

    def to_dict(self) -> dict[str, Any]:
        return {"event": "Added", "instance": self.instance.to_dict()}


@dataclass(frozen=True, slots=True)
class Removed:
    """A record disappeared (unregistered, its owner shut down, or its lease expired)."""

    id: DiscoveryInstanceId

    def to_dict(self) -> dict[str, Any]:
        return {"event": "Removed", "id": _id_to_dict(self.id)}


@dataclass(frozen=True, slots=True)
class ModelTaintsUpdated:
    """A model card changed only in its routing taints; ``taints`` is sorted."""

    id: ModelCardInstanceId
    taints: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"event": "ModelTaintsUpdated", "id": _id_to_dict(self.id), "taints": list(self.taints)}


@dataclass(frozen=True, slots=True)
class Resync(Generic[R]):
    """The complete current set of matching records; replace your state with it."""

    instances: tuple[R, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"event": "Resync", "instances": [i.to_dict() for i in self.instances]}


DiscoveryEvent = Added | Removed | ModelTaintsUpdated | Resync
"""Any watch's event (``Added`` and ``Resync`` of any kind of record)."""

WatchEvent = Added[R] | Removed | ModelTaintsUpdated | Resync[R]
"""The events of a watch on records ``R``: ``Watch[R].get()`` returns a ``WatchEvent[R]``."""
