"""What ``discovery-sync get KEY`` looks for: the ID a table shows (the instance id in hex, or a
unique prefix of it), an id path ``ns/component/endpoint/ID`` (a prefix of the id there too), or
a store key as ``list -o wide`` shows it (exact).

A store key, and an id path given with ``--kind``, are read directly first; anything else is
matched against the records listed. No match is a miss (exit 1, saying what was looked for);
more than one is a ValidationError listing them and saying how to choose.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

import discovery_sync as ds
from discovery_sync.validation import printable

from .output import KIND_LABELS, store_key
from .store import KINDS

_HEX_ID = re.compile(r"[0-9a-fA-F]{1,16}")
MAX_CANDIDATES = 10  # an ambiguous id names this many of its records
_BUCKETS = ", ".join(f"{kind.bucket}/" for kind in ds.RecordKind)
_FORMS = (
    "give the ID that 'discovery-sync list' shows (hex as store keys hold it, or enough of its first digits "
    "to be unique), "
    f"ns/component/endpoint/ID, or a store key (starting with one of {_BUCKETS}) as 'list -o wide' shows it"
)
_NAMED_KINDS = (ds.RecordKind.ENDPOINT, ds.RecordKind.MODEL)  # their id paths start ns/component/endpoint
_KIND_WORDS = {
    ds.RecordKind.ENDPOINT: "endpoints",
    ds.RecordKind.MODEL: "models",
    ds.RecordKind.EVENT_CHANNEL: "event channels",
    ds.RecordKind.EVENT_SOURCE: "event sources",
}


@dataclasses.dataclass(frozen=True)
class Wanted:
    """A parsed ``get`` argument: where to look and how a record is recognised."""

    text: str  # as given (stripped), for messages
    kinds: tuple[ds.RecordKind, ...]  # the kinds to look among
    exact: ds.DiscoveryInstanceId | None = None  # read directly first
    prefix_allowed: bool = True  # False: a store key, matched exactly
    narrow: ds.DiscoveryInstanceId | None = None  # an id path's identity: list only its endpoint's records

    def queries(self) -> list[ds.Query]:
        """What to list: each kind, narrowed to the endpoint an id path names."""
        found = []
        for kind in self.kinds:
            data: dict[str, object] = {"kind": _query_kind(kind)}
            names = self.narrow
            if isinstance(names, (ds.EndpointInstanceId, ds.ModelCardInstanceId)) and kind in _NAMED_KINDS:
                data.update(namespace=names.namespace, component=names.component, endpoint=names.endpoint)
            found.append(ds.Query.from_dict(data))
        return found

    def matches(self, instance: ds.DiscoveryInstance) -> bool:
        identity = instance.id()
        if identity.kind not in self.kinds:
            return False
        if "/" not in self.text:
            return _id_matches(self.text, identity_hex(identity))
        head, hex_id, tail = _split(identity)
        if not self.text.startswith(head + "/"):
            return False
        given_id, _, given_tail = self.text[len(head) + 1 :].partition("/")
        return _id_matches(given_id, hex_id) and given_tail in ("", tail)

    def exactly(self, instance: ds.DiscoveryInstance) -> bool:
        """Whether the id given is the whole id of a record it matches (not a prefix of it)."""
        head, hex_id, _ = _split(instance.id())
        given = self.text[len(head) + 1 :].partition("/")[0] if "/" in self.text else self.text
        return given.lower() in (hex_id, hex_id.zfill(16))

    def miss(self, store: str) -> str:
        """What was looked for and not found, and what to do."""
        where = f"among the {_kind_list(self.kinds)} of {store}"
        if not self.prefix_allowed:  # a store key names one record, whole
            return f"no record {printable(self.text)} in {store}; 'discovery-sync list -o wide' shows the keys there"
        if "/" not in self.text:
            looked = f"no record has an instance id starting with {printable(self.text)} {where}"
        else:
            looked = f"no record matches the id path {printable(self.text)} {where}"
        return f"{looked}; 'discovery-sync list' shows the records there"

    def ambiguous(self, found: list[ds.DiscoveryInstance]) -> str:
        keys = sorted(store_key(instance.id()) for instance in found)
        shown = ", ".join(printable(key) for key in keys[:MAX_CANDIDATES])
        more = f" and {len(keys) - MAX_CANDIDATES} more" if len(keys) > MAX_CANDIDATES else ""
        labels = sorted({KIND_LABELS[instance.kind] for instance in found})
        choices = ["one of these store keys"]
        if len({identity_hex(instance.id()) for instance in found}) > 1:
            choices.insert(0, "more of the id")
        if len(labels) > 1:
            choices.append("--kind " + " or --kind ".join(f"{label}s" for label in labels))
        hint = "give " + ", or ".join(choices)
        return f"'{printable(self.text)}' matches {len(found)} records: {shown}{more}; {hint}"


def identity_hex(identity: ds.DiscoveryInstanceId) -> str:
    """The id of a record's identity in hex, as its store key and the tables show it."""
    return _split(identity)[1]


def _split(identity: ds.DiscoveryInstanceId) -> tuple[str, str, str]:
    """An identity path as (before the id, the id in hex, after it): ``("ns/c/e", "2a", "my-lora")``."""
    path = identity.to_path()
    if isinstance(identity, (ds.EndpointInstanceId, ds.ModelCardInstanceId)):  # names hold no '/' there
        parts = path.split("/", 4)
        return "/".join(parts[:3]), parts[3], "/".join(parts[4:])
    head, _, hex_id = path.rpartition("/")  # scopes and topics are percent-encoded: the id is last
    return head, hex_id, ""


def _id_matches(given: str, hex_id: str) -> bool:
    given = given.lower()
    return bool(_HEX_ID.fullmatch(given)) and (hex_id.startswith(given) or hex_id.zfill(16).startswith(given))


def _query_kind(kind: ds.RecordKind) -> str:
    return next(name for name, each in KINDS.items() if each is kind)


def _kind_list(kinds: Iterable[ds.RecordKind]) -> str:
    words = [_KIND_WORDS[kind] for kind in kinds]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def wanted(text: str, kind: str | None) -> Wanted:
    """Parse ``get``'s argument (``kind``: a --kind query kind name, or None); a ValidationError
    saying which forms there are when it is none of them."""
    key = text.strip().strip("/")
    bucket = next((k for k in ds.RecordKind if key.startswith(k.bucket + "/")), None)
    if bucket is not None:  # a store key: exact, and of the kind its bucket says
        identity = ds.id_from_key(key)
        if kind is not None and KINDS[kind] is not bucket:
            raise ds.ValidationError(f"{key!r} is a store key of {_KIND_WORDS[bucket]}, not of {kind}: drop --kind")
        return Wanted(key, (bucket,), identity, prefix_allowed=False)
    if "/" not in key:
        if not _HEX_ID.fullmatch(key):
            raise ds.ValidationError(f"{text!r} is not a store key, an id path or an instance id: {_FORMS}")
        return Wanted(key, (KINDS[kind],) if kind is not None else tuple(ds.RecordKind))
    if kind is not None:  # an id path of that kind: its error says what such a path looks like
        identity = ds.id_from_path(KINDS[kind], key)
        return Wanted(key, (KINDS[kind],), identity, narrow=identity)
    kinds = tuple(k for k in ds.RecordKind if _parses(k, key))
    if not kinds:
        raise ds.ValidationError(f"{text!r} is not a store key, an id path or an instance id: {_FORMS}")
    narrow = ds.id_from_path(kinds[0], key)
    return Wanted(key, kinds, narrow if len(kinds) == 1 else None, narrow=narrow)


def _parses(kind: ds.RecordKind, path: str) -> bool:
    try:
        ds.id_from_path(kind, path)
    except ds.ValidationError:
        return False
    return True


def find(client: ds.Discovery, target: Wanted) -> list[ds.DiscoveryInstance]:
    """The records ``target`` names: the one read directly, else those listed that match (the
    ones whose whole id was given, when there are such)."""
    if target.exact is not None:
        instance = client.get(target.exact)
        if instance is not None or not target.prefix_allowed:
            return [instance] if instance is not None else []
    found = [each for query in target.queries() for each in client.list(query) if target.matches(each)]
    whole = [each for each in found if target.exactly(each)]
    return whole or found
