"""Change classification and snapshot reconciliation, shared by every backend.

Rules (docs/design.md §4): a new id is ``Added``; the same value is nothing; a model change that only
alters its taints (as a set) is ``ModelTaintsUpdated``; any other model change is rejected and
the last valid value kept; an endpoint change is ``Added`` (a replacement); same-id changes of
event channels and sources are ignored.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ValidationError
from .events import Added, DiscoveryEvent, ModelTaintsUpdated, Removed
from .identity import DiscoveryInstanceId
from .model import DiscoveryInstance, Endpoint, Model
from .taints import card_without_taints, taints_of


class Change(enum.Enum):
    NONE = "none"  # same value
    ADDED = "added"  # new id, or a replaced endpoint
    TAINTS = "taints"  # model taints changed, nothing else
    REJECTED = "rejected"  # a model changed in more than its taints: keep the old value
    IGNORED = "ignored"  # same-id change of an event channel/source: keep the old value


def classify(old: DiscoveryInstance | None, new: DiscoveryInstance) -> Change:
    """How a stored value ``new`` relates to the last valid value ``old`` of the same id."""
    if old is None:
        return Change.ADDED
    if old == new:
        return Change.NONE
    if isinstance(new, Endpoint):
        return Change.ADDED
    if isinstance(new, Model) and isinstance(old, Model):
        if card_without_taints(old.card_json) != card_without_taints(new.card_json):
            return Change.REJECTED
        if set(taints_of(old.card_json)) == set(taints_of(new.card_json)):
            return Change.NONE
        return Change.TAINTS
    return Change.IGNORED


def event_for(change: Change, instance: DiscoveryInstance) -> DiscoveryEvent | None:
    """The event a classified change produces, if any."""
    if change is Change.ADDED:
        return Added(instance)
    if change is Change.TAINTS and isinstance(instance, Model):  # classify() says TAINTS of models only
        return ModelTaintsUpdated(instance.id(), tuple(sorted(set(taints_of(instance.card_json)))))
    return None


def accepted(change: Change) -> bool:
    """True when the new value replaces the old one in a view."""
    return change in (Change.ADDED, Change.TAINTS)


def apply(
    old: DiscoveryInstance | None, new: DiscoveryInstance
) -> tuple[DiscoveryInstance, DiscoveryEvent | None, Change]:
    """Classify ``new`` against ``old``: the value now valid, the event to publish, the change."""
    try:
        change = classify(old, new)
    except ValidationError:  # malformed taints in the new value: a rejected model change
        change = Change.REJECTED
    valid = new if old is None or accepted(change) else old
    return valid, event_for(change, new), change


def diff(
    old: Mapping[DiscoveryInstanceId, DiscoveryInstance],
    new: Mapping[DiscoveryInstanceId, DiscoveryInstance],
) -> tuple[list[DiscoveryEvent], dict[DiscoveryInstanceId, DiscoveryInstance]]:
    """Events that turn view ``old`` into snapshot ``new``, and the resulting view.

    Values the rules reject keep their old value in the resulting view.
    """
    events: list[DiscoveryEvent] = []
    result: dict[DiscoveryInstanceId, Any] = {}
    for key, value in new.items():
        result[key], event, _ = apply(old.get(key), value)
        if event is not None:
            events.append(event)
    for key in old.keys() - new.keys():
        events.append(Removed(key))
    return events, result


def ordered(instances: Iterable[DiscoveryInstance]) -> tuple[DiscoveryInstance, ...]:
    """A stable order for Resync payloads and list results: by kind, then identity path."""
    return tuple(sorted(instances, key=lambda i: (i.kind.value, i.id().to_path())))
