"""Key layout of the kube backend: a CR's ``spec.data``, four maps keyed by identity path, valued by instance JSON.

Writers (this pod) build it from their records with :func:`spec_data` and send the whole CR,
shaped by :func:`worker_metadata_body`. Readers use the values, not the keys, and accept the
older v1.2 shape (no ``event_sources`` map, ``model_suffix: null``, event channels with
``namespace``/``component`` instead of ``scope``) — :func:`parse_data`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from discovery_sync.errors import UnknownRecordType, ValidationError
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance, instance_from_dict
from discovery_sync.unknown_kinds import skip_unknown

from .identity import PodIdentity
from .wire import API_VERSION, KIND

log = logging.getLogger("discovery_sync.backends.kube")

#: the spec.data map holding each kind of record, in the reference's order
MAPS: dict[RecordKind, str] = {
    RecordKind.ENDPOINT: "endpoints",
    RecordKind.MODEL: "model_cards",
    RecordKind.EVENT_CHANNEL: "event_channels",
    RecordKind.EVENT_SOURCE: "event_sources",
}
_KINDS = {name: kind for kind, name in MAPS.items()}

#: a record's place in spec.data: (map name, key)
Slot = tuple[str, str]


def spec_data(records: Iterable[DiscoveryInstance]) -> dict[str, dict[str, Any]]:
    """The four maps (all present, possibly empty) for ``records``."""
    data: dict[str, dict[str, Any]] = {name: {} for name in MAPS.values()}
    for record in records:
        data[MAPS[record.kind]][record.id().to_path()] = record.to_dict()
    return data


def worker_metadata_body(identity: PodIdentity, records: Iterable[DiscoveryInstance]) -> dict[str, Any]:
    """The whole CR as this worker applies it (docs/design.md §8): name, Pod ownerReference, spec.data."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": identity.cr_name, "ownerReferences": [identity.owner_reference()]},
        "spec": {"data": spec_data(records)},
    }


def parse_data(
    data: Any, previous: Mapping[Slot, DiscoveryInstance], where: str
) -> dict[Slot, DiscoveryInstance] | None:
    """The records of one ``spec.data``; None when it is not a set of maps at all (null, a list, …).

    A map that is absent or null holds no records: server-side apply stores ``null`` for a map its
    manager emptied (``{}`` sent for a map it had filled; the next identical apply stores ``{}``),
    and the reference reads null as empty. A record that does not parse (or sits in the wrong
    map) keeps its ``previous`` value, if any, and is skipped otherwise, with a warning; one of a
    type this version does not know (a newer runtime's kind) likewise, said once at INFO
    (:mod:`discovery_sync.unknown_kinds`). Maps of other names (a newer runtime's, such as
    ``velo_peers``) are never read, whatever they hold.
    """
    if not isinstance(data, dict) or any(
        not isinstance(data.get(name, {}), (dict, type(None))) for name in MAPS.values()
    ):
        return None
    records: dict[Slot, DiscoveryInstance] = {}
    for name, kind in _KINDS.items():
        for key, value in (data.get(name) or {}).items():
            slot = (name, key)
            kept = previous.get(slot)
            record = _record(value, kind, slot, where, kept=kept is not None) or kept
            if record is not None:
                records[slot] = record
    return records


def _record(value: Any, kind: RecordKind, slot: Slot, where: str, *, kept: bool) -> DiscoveryInstance | None:
    """The record stored at ``slot`` (map name, key), or None when it is not one of ``kind``
    (said: a warning, or for an unknown type one INFO line per type). ``kept``: the slot's last
    valid value stays (the warning says so)."""
    name, key = slot
    try:
        record = instance_from_dict(value)
        if record.kind is not kind:
            raise ValidationError(f"a {record.kind.value} record does not belong in {name}")
    except UnknownRecordType as exc:
        skip_unknown(log, f"the {name} map of DynamoWorkerMetadata CRs", f"{where}: {key!r}", exc)
        return None
    except ValidationError as exc:
        log.warning(
            "%s: skipping unreadable %s record %r (%s)%s",
            where,
            name,
            key,
            exc,
            "; keeping its last valid value" if kept else "",
        )
        return None
    return record
