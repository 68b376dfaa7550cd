"""Change classification and snapshot reconciliation, shared by every backend.

Rules (docs/design.md §4): a new id is ``Added``; the same value is nothing; a model change that only
alters its taints (as a set) is ``ModelTaintsUpdated``; any other model change replaces the card,
as ``Removed`` then ``Added`` (newer references do the same; a model whose new taints cannot be
read keeps its last valid value); an endpoint change is ``Added`` (a replacement); same-id changes
of event channels and sources are ``Removed`` then ``Added`` too.
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
    REPLACED = "replaced"  # another value under the same id: Removed, then Added
    REJECTED = "rejected"  # a model whose new taints are malformed: keep the old value


def classify(old: DiscoveryInstance | None, new: DiscoveryInstance) -> Change:
    """How a stored value ``new`` relates to the last valid value ``old`` of the same id."""
    if old is None:
        return Change.ADDED
    if old == new:
        return Change.NONE
    if isinstance(new, Endpoint):
        return Change.ADDED
    if isinstance(new, Model) and isinstance(old, Model):
        if old.model_suffix != new.model_suffix:
            return Change.REPLACED
        if card_without_taints(old.card_json) != card_without_taints(new.card_json):
            return Change.REPLACED
        if set(taints_of(old.card_json)) == set(taints_of(new.card_json)):
            return Change.NONE
        return Change.TAINTS
    return Change.REPLACED


def events_for(change: Change, instance: DiscoveryInstance) -> tuple[DiscoveryEvent, ...]:
    """The events a classified change produces, in order (none for NONE and REJECTED)."""
    if change is Change.ADDED:
        return (Added(instance),)
    if change is Change.REPLACED:
        return Removed(instance.id()), Added(instance)
    if change is Change.TAINTS and isinstance(instance, Model):  # classify() says TAINTS of models only
        return (ModelTaintsUpdated(instance.id(), tuple(sorted(set(taints_of(instance.card_json))))),)
    return ()


def apply(
    old: DiscoveryInstance | None, new: DiscoveryInstance
) -> tuple[DiscoveryInstance, tuple[DiscoveryEvent, ...], Change]:
    """Classify ``new`` against ``old``: the value now valid, the events to publish, the change."""
    try:
        change = classify(old, new)
    except ValidationError:  # malformed taints in the new value: keep the last valid card
        change = Change.REJECTED
    valid = old if old is not None and change in (Change.NONE, Change.REJECTED) else new
    return valid, events_for(change, new), change


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
        result[key], found, _ = apply(old.get(key), value)
        events.extend(found)
    for key in old.keys() - new.keys():
        events.append(Removed(key))
    return events, result


def ordered(instances: Iterable[DiscoveryInstance]) -> tuple[DiscoveryInstance, ...]:
    """A stable order for Resync payloads and list results: by kind, then identity path."""
    return tuple(sorted(instances, key=_order_key))


def _order_key(instance: DiscoveryInstance) -> str:
    # one str, not a (kind, path) tuple: no object per record for the collector to trace at 50k
    # records; "\0" sorts below every character, so the order is the tuple's
    return f"{instance.kind.value}\0{instance.id().to_path()}"
