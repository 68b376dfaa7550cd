"""Strategies, settings and checks shared by the property tests of the parsers.

Every test decorated with ``FUZZ`` runs a bounded, derandomised number of examples, so the
whole directory stays well under a minute and never flakes. ``DISCOVERY_SYNC_FUZZ_PROFILE=fuzz-long``
runs many more random examples for a deeper local search.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import math
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.jsonsafe import changed_number

settings.register_profile(
    "fuzz",
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("fuzz-long", settings.get_profile("fuzz"), max_examples=5000, derandomize=False)
FUZZ = settings(settings.get_profile(os.environ.get("DISCOVERY_SYNC_FUZZ_PROFILE", "fuzz")))
#: for a test parametrized over many cases: a sixth of the examples for each
FUZZ_PER_CASE = settings(FUZZ, max_examples=max(10, FUZZ.max_examples // 6))

T = TypeVar("T")


def only_discovery_errors(call: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``call(*args, **kwargs)``, or None when it raised a DiscoveryError; any other exception fails the test."""
    try:
        return call(*args, **kwargs)
    except ds.DiscoveryError:
        return None


# -- JSON ------------------------------------------------------------------------------------------
#: text that JSON can carry (no lone surrogates), biased towards the characters paths care about
json_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", "/", "%", "%2F", "%zz", ".", "..", "topic", "namespace", "component", "endpoint", "2a", "Endpoint", "Model"]
)
#: numbers register() stores: those no store changes (jsonsafe.numbers_kept); readers may see more
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda number: changed_number(number) is None)
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_text, children, max_size=4),
    max_leaves=12,
)


def as_tuples(value: Any, draw_flag: Callable[[], bool]) -> Any:
    """``value`` with some of its lists turned into tuples (chosen by ``draw_flag``)."""
    if isinstance(value, list):
        items = [as_tuples(item, draw_flag) for item in value]
        return tuple(items) if draw_flag() else items
    if isinstance(value, dict):
        return {key: as_tuples(item, draw_flag) for key, item in value.items()}
    return value


def as_lists(value: Any) -> Any:
    """``value`` as a reader parses it back: tuples become lists."""
    if isinstance(value, (list, tuple)):
        return [as_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: as_lists(item) for key, item in value.items()}
    return value


# -- numbers as text ---------------------------------------------------------------------------------
#: pieces of text that break naive number parsers (Python's int() and float() read other scripts'
#: digits, underscores and surrounding whitespace; str.isdigit() is true for superscripts): joined
#: in any order by :data:`number_text`
PIECES = [
    *"0123456789",
    *("+", "-", ".", "_", "e", "E", "x", "X", "a", "f"),
    *(" ", "\t", "\n", "\u00a0", "\u2003", "\u3000", "\u200b"),  # ASCII and Unicode spaces, a zero-width one
    *("²", "³", "¹", "\u0663", "\u06f5", "\uff11", "\u0e53", "\u1045", "\U0001d7d9", "\u2155", "\u216b"),
    *("inf", "nan", "Infinity", "none", "None", "0x", "0b1", "0o7", "1_000", "9" * 5000),
]
#: text an option parser may be given where a number is expected
number_text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join) | st.sampled_from(
    ["²", "٣", "\uff11", " 1 ", "1 0", "+1", "-1", "+-1", "--1", "1_000", "0x1_0", "1e3", "1.5e-3", ".5", "5.", "."]
)


# -- values that cannot be stored ------------------------------------------------------------------
class Colour(enum.Enum):
    RED = "red"


class Float(float):
    """A float subclass, as NumPy's float64 is: orjson refuses it."""


class Key(str):
    """A str subclass: fine as a value, refused as an object key by orjson."""


@dataclasses.dataclass
class Point:
    x: int = 1


Pair = collections.namedtuple("Pair", "a b")


def _self_containing() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


#: (label, value) of every kind of value the store refuses, as it may sit anywhere in a card
UNSTORABLE: list[tuple[str, Any]] = [
    ("2**64", 2**64),
    ("-2**63-1", -(2**63) - 1),
    ("10**30", 10**30),
    ("set", {1, 2}),
    ("frozenset", frozenset({"a"})),
    ("bytes", b"\x00\xff"),
    ("bytearray", bytearray(b"x")),
    ("nan", math.nan),
    ("inf", math.inf),
    ("-inf", -math.inf),
    ("object", object()),
    ("datetime", datetime.datetime(2024, 1, 2, 3, 4, 5)),
    ("date", datetime.date(2024, 1, 2)),
    ("uuid", uuid.UUID(int=42)),
    ("decimal", decimal.Decimal("1.5")),
    ("complex", 1j),
    ("enum", Colour.RED),
    ("dataclass", Point()),
    ("float-subclass", Float(1.5)),
    ("namedtuple", Pair(1, 2)),
    ("lone-surrogate", "a\ud800b"),
    ("int-key", {1: "a"}),
    ("none-key", {None: "a"}),
    ("tuple-key", {(1, 2): "a"}),
    ("str-subclass-key", {Key("k"): 1}),
    ("surrogate-key", {"\udcff": 1}),
    ("too-deep", _nested(120)),
    ("self-containing", _self_containing()),
    ("fragment", orjson.Fragment(b"[1,")),
]

#: key names along the planted path: printable, so the expected path is easy to write out
path_keys = st.text(alphabet="abcxyz_-.0123 é", min_size=1, max_size=6)


def path_text(path: list[str | int]) -> str:
    """The path of a card field as error messages write it: ``card_json["a"][0]``."""
    return "card_json" + "".join(f"[{orjson.dumps(step).decode()}]" for step in path)


@st.composite
def card_with_planted(draw: st.DrawFn, value: Any) -> tuple[dict[str, Any], list[str | int]]:
    """A storable model card with ``value`` planted up to four levels deep in it, among storable
    siblings, and the path to it."""
    card: dict[str, Any] = {"display_name": draw(json_text)}
    path: list[str | int] = []
    container: Any = card
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        child: Any = {} if draw(st.booleans()) else []
        path.append(_add(draw, container, child))
        container = child
    path.append(_add(draw, container, value))
    return card, path


def _add(draw: st.DrawFn, container: Any, child: Any) -> str | int:
    """Add ``child`` (after a few storable siblings) to a dict or list; return its key or index."""
    if isinstance(container, dict):
        container.update(draw(st.dictionaries(path_keys, json_values, max_size=2)))
        key = draw(path_keys.filter(lambda k: k not in container))
        container[key] = child
        return key
    container.extend(draw(st.lists(json_values, max_size=2)))
    container.append(child)
    return len(container) - 1


# -- names, scopes, transports, instances ------------------------------------------------------------
def _fits_name(text: str) -> bool:
    return bool(text) and len(text.encode("utf-8")) <= 255


names = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=10).filter(_fits_name)
plain_names = names.filter(lambda n: "/" not in n)  # endpoint and model names are unencoded path segments
ids = st.integers(min_value=0, max_value=2**64 - 1)

scopes = st.one_of(
    st.builds(ds.EventScope.for_namespace, names),
    st.builds(ds.EventScope.for_component, names, names),
    st.builds(ds.EventScope, names, names, names),
)
request_transports = st.one_of(
    st.builds(ds.Transport.tcp, json_text),
    st.builds(ds.Transport.http, json_text),
    st.builds(ds.Transport.nats_tcp, json_text),
    st.builds(ds.Transport, st.sampled_from(["quic", "grpc_v9"]), json_values),
)
event_transports = st.one_of(
    st.builds(ds.NatsTransport, json_text),
    st.builds(ds.ZmqTransport, json_text),
    st.builds(
        ds.ZmqBrokerTransport,
        st.lists(json_text, min_size=1, max_size=3).map(tuple),
        st.lists(json_text, max_size=3).map(tuple),
    ),
)
cards = st.builds(
    lambda name, extra: {"display_name": name, **extra},
    json_text,
    st.dictionaries(json_text.filter(lambda k: k not in ("display_name", "runtime_config")), json_values, max_size=4),
)

endpoints = st.builds(
    ds.Endpoint,
    plain_names,
    plain_names,
    plain_names,
    ids,
    request_transports,
    st.none() | json_values,
    st.sampled_from([None, "json", "msgpack"]),
)
models = st.builds(ds.Model, plain_names, plain_names, plain_names, ids, cards, st.none() | names)
event_channels = st.builds(ds.EventChannel, scopes, names, ids, event_transports)
event_sources = st.builds(ds.EventSource, scopes, names, ids, st.dictionaries(json_text, json_values, max_size=4))
instances = st.one_of(endpoints, models, event_channels, event_sources)

# -- the reference documents -----------------------------------------------------------------------
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

#: an Endpoint record exactly as the reference runtime (v1.6) writes it
REFERENCE_ENDPOINT = (
    b'{"type":"Endpoint","component":"backend","endpoint":"generate","namespace":"pyns",'
    b'"instance_id":10173651931486282114,'
    b'"transport":{"tcp":"127.0.0.1:34553/8d30128784b4e182/pyns/backend/generate"},'
    b'"device_type":"cuda","request_plane_codec":"msgpack"}'
)


def reference_records() -> list[dict[str, Any]]:
    """Every record of the stored reference documents (tests/fixtures), as parsed JSON."""
    data = orjson.loads((FIXTURES / "legacy_v1_2_worker_metadata.json").read_bytes())["spec"]["data"]
    records = [record for section in data.values() for record in section.values()]
    return [*records, orjson.loads(REFERENCE_ENDPOINT)]


def library_records() -> list[dict[str, Any]]:
    """One record of every kind and shape the library writes itself."""
    scope = ds.EventScope.for_component("ns", "comp")
    endpoint_scope = ds.EventScope.for_endpoint(ds.EndpointId("ns", "comp", "ep"))
    card = {"display_name": "m", "runtime_config": {"taints": ["a"], "topology_domains": {"zone": "z"}}}
    return [
        instance.to_dict()
        for instance in (
            ds.Endpoint("ns", "comp", "ep", 42, ds.Transport.tcp("127.0.0.1:9000"), "cuda", "json"),
            ds.Endpoint("ns", "comp", "ep", 2**64 - 1, ds.Transport("quic", {"host": "h", "ports": [1]})),
            ds.Model("ns", "comp", "ep", 42, card),
            ds.Model("ns", "comp", "ep", 0, {"display_name": "m", "lora": {"name": "x"}}, "x/y"),
            ds.EventChannel(ds.EventScope.for_namespace("ns"), "kv-events", 42, ds.NatsTransport("namespace.ns")),
            ds.EventChannel(scope, "kv/events é", 42, ds.ZmqTransport("tcp://127.0.0.1:5557")),
            ds.EventChannel(endpoint_scope, "t", 42, ds.ZmqBrokerTransport(("tcp://a:1",), ("tcp://a:2",))),
            ds.EventSource(scope, "kv-events", 7, {"worker": "w0", "ranks": [0, 1]}),
            ds.EventSource(endpoint_scope, "t", 2**64 - 1),
        )
    ]


VALID_RECORDS = reference_records() + library_records()


# -- mutations ---------------------------------------------------------------------------------------
def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (the empty path included)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        root = root[step]
    return root


@st.composite
def mutated_records(draw: st.DrawFn, records: st.SearchStrategy[dict[str, Any]]) -> Any:
    """A valid record with one to three of its values deleted, replaced by random JSON, or
    given a random sibling; now and then the whole record replaced."""
    record = orjson.loads(orjson.dumps(draw(records)))  # a private deep copy
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(record)))
        if not path:
            record = draw(json_values) if draw(st.integers(0, 9)) == 0 else record
            continue
        parent, step = _parent(record, path), path[-1]
        action = draw(st.sampled_from(["delete", "replace", "replace", "add"]))
        if action == "delete":
            del parent[step]
        elif action == "replace":
            parent[step] = draw(json_values | st.sampled_from([None, "", 0, -1, 2**64 - 1, [], {}]))
        elif isinstance(parent, dict):
            parent[draw(json_text)] = draw(json_values)
        else:
            parent.insert(draw(st.integers(0, len(parent))), draw(json_values))
    return record


@st.composite
def damaged_bytes(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` truncated, with bytes flipped, or with bytes inserted."""
    data = bytearray(raw)
    action = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if action == "truncate":
        return bytes(data[: draw(st.integers(0, len(data)))])
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        index = draw(st.integers(0, max(len(data) - 1, 0)))
        byte = draw(st.integers(0, 255) | st.sampled_from(list(b'{}[]",:\\0-e.n')) | st.sampled_from(list(b"az09%/")))
        if action == "flip" and data:
            data[index] = byte
        else:
            data.insert(index, byte)
    return bytes(data)


#: Python values of every sort, for constructor arguments a user might pass by mistake
any_values = st.one_of(
    json_values,
    names,
    ids,
    st.sampled_from([value for _, value in UNSTORABLE]),
    st.sampled_from([True, -1, 2**64, 1.5, b"ns", ["ns"], ("ns",), {"ns": 1}, "a/b", "", "\ud800"]),
)
