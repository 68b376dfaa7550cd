"""A model card that changes under one record name, made visible to reference frontends (issue 38).

A reference reader (1.6.1) takes the card stored under a name as one immutable worker
incarnation: another card put under a name it knows is refused ("Rejecting immutable discovery
model-card mutation", ``lib/runtime/src/discovery/mod.rs``; its frontend's controller refuses it
too, ``lib/llm/src/discovery/controller.rs``), and the frontend keeps listing the old model. It
must see the name removed first, and its store watcher drops a removal when the name exists
again by the time it handles the event ("Suppressing stale FileStore remove event for a
recreated key", ``lib/runtime/src/storage/kv/file.rs`` in the 1.6.1 binary: it stats the name).
Nothing outside that process tells when it handled the event, so a different card is written
only after the name stayed absent for :data:`REMOVAL_HOLD` (docs/interop.md, "A card replaced
under one name"). What reference readers take in place is written at once: the same card, a
card that differs only in its taints (their taint update), and records of other kinds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from discovery_sync.errors import ValidationError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance, Model
from discovery_sync.reconcile import Change, classify

from .own import OwnFiles

# seconds a removed name stays absent before another card is written there; reference watchers
# took 0.3-0.7 ms at idle and up to ~70 ms with the CPUs oversubscribed twice (docs/interop.md)
REMOVAL_HOLD = 0.2


class CardChanges:
    """Writes and deletes of this client's records (through ``own``) that keep a changed model
    card visible: a model card removed here is remembered for :data:`REMOVAL_HOLD` with the
    value it had, and a different card for the same id waits out the rest of that time.

    The hold bounds another process's scheduling delay, so it runs on the real monotonic clock
    (not the client's, which tests may stop). Callers hold the client's API lock."""

    def __init__(self, own: OwnFiles) -> None:
        self._own = own
        self._removed: dict[DiscoveryInstanceId, tuple[DiscoveryInstance | None, float]] = {}

    def unlink(self, instance_id: DiscoveryInstanceId, stored: DiscoveryInstance | None) -> None:
        """Delete this client's record ``instance_id`` whose value was ``stored`` (None: not
        known, any card written next under the id counts as different)."""
        self._own.unlink(instance_id)
        if instance_id.kind is RecordKind.MODEL:
            now = time.monotonic()
            self._removed = {i: kept for i, kept in self._removed.items() if now - kept[1] < REMOVAL_HOLD}
            self._removed[instance_id] = (stored, now)

    def settle(self, instance: DiscoveryInstance) -> None:
        """Before ``instance`` is written where nothing is stored: when it is a model card other
        than the one this client removed under its id less than :data:`REMOVAL_HOLD` ago, wait
        out the rest of that time."""
        if not self._removed:  # the common case: nothing removed lately
            return
        removed = self._removed.pop(instance.id(), None)
        if removed is not None and not seen_in_place(removed[0], instance):
            _hold(removed[1])

    def take_over(self, instance: DiscoveryInstance, stored: Callable[[DiscoveryInstanceId], object]) -> None:
        """Write ``instance`` over whatever is stored under its id (a cohort member's takeover).
        A model card other than the one ``stored(id)`` reads there is not renamed over it: that
        one is removed, and ``instance`` written after :data:`REMOVAL_HOLD`."""
        instance_id = instance.id()
        if instance_id.kind is RecordKind.MODEL:
            previous = stored(instance_id)
            if previous is not None and not seen_in_place(previous, instance):
                self._own.unlink(instance_id)
                _hold(time.monotonic())
            self.settle(instance)
        self._own.write(instance, create_only=False)


def seen_in_place(before: object, after: DiscoveryInstance) -> bool:
    """Whether reference readers take ``after`` written over ``before`` (the same id) as it is:
    the same record, or what our readers too take as a taint update (:func:`~discovery_sync.reconcile.classify`)
    where both cards have a ``runtime_config`` object, as the reference asks
    (``validate_model_taint_update`` in ``lib/runtime/src/discovery/mod.rs``)."""
    if before == after:
        return True
    if not isinstance(before, Model) or not isinstance(after, Model):
        return False
    if not all(isinstance(model.card_json.get("runtime_config"), dict) for model in (before, after)):
        return False
    try:
        return classify(before, after) in (Change.NONE, Change.TAINTS)
    except ValidationError:  # malformed taints, and nothing else changed: still only a taint update
        return True


def _hold(removed_at: float) -> None:
    """Return once :data:`REMOVAL_HOLD` seconds passed since ``removed_at`` (``time.monotonic``)."""
    remaining = removed_at + REMOVAL_HOLD - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)  # nothing to wait on: the readers are other processes
