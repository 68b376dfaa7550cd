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

from discovery_sync.errors import ValidationError
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance, instance_from_dict

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
    map) keeps its ``previous`` value, if any, and is skipped otherwise; unknown maps are ignored.
    """
    if not isinstance(data, dict) or any(
        not isinstance(data.get(name, {}), (dict, type(None))) for name in MAPS.values()
    ):
        return None
    records: dict[Slot, DiscoveryInstance] = {}
    for name, kind in _KINDS.items():
        for key, value in (data.get(name) or {}).items():
            slot = (name, key)
            try:
                record = instance_from_dict(value)
                if record.kind is not kind:
                    raise ValidationError(f"a {record.kind.value} record does not belong in {name}")
            except ValidationError as exc:
                kept = previous.get(slot)
                log.warning(
                    "%s: skipping unreadable %s record %r (%s)%s",
                    where,
                    name,
                    key,
                    exc,
                    "; keeping its last valid value" if kept is not None else "",
                )
                if kept is not None:
                    records[slot] = kept
                continue
            records[slot] = record
    return records
