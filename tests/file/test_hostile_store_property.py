"""Property: the file store stays correct, and harmless, whatever junk appears in its directories.

Hypothesis interleaves real registrations, unregistrations and taint updates of one or two owner
clients with junk planted in the buckets (and in ``.locks``, ``v1`` and the root): files with
random, badly escaped, non-UTF-8, dot, leftover and record-like names holding random bytes or
copies of real records; FIFOs, unix sockets, mode-000 files, huge sparse files, subdirectories,
and symlinks to a sentinel directory outside the store whose files have old mtimes. Junk gets
old mtimes (an hour ago) or fresh ones. A reader client watches endpoints and models throughout.

For every generated run this proves:

1. no thread of the clients dies, raises or blocks: every ``discovery-sync-*`` thread started by
   the run is alive at the end, nothing reached ``threading.excepthook``, no background error was
   logged, each problem was warned about at most once per client, and ``shutdown()`` returns
   within a bound and stops those threads;
2. nothing outside the store root is touched: the sentinel's listing, contents and mtimes are
   unchanged;
3. only regular files with a canonical record name of their bucket, or leftover dot files, are
   ever deleted, and never before they stood for a TTL on the reader's clock; every other junk
   entry is still there, unchanged (inode, type, mtime);
4. junk is never served: no event of the watches opened at the start carries a record no owner
   registered; with the junk present and after it is removed, those watches converge to the
   records the owners hold, ``list()`` equals them, and so does the first ``Resync`` of a fresh
   watch.

Some runs wait, with junk of old mtimes in place, until canary files (a leftover and a record-named
garbage file per bucket, planted after all other junk) have been swept: a sweep has then judged
every junk entry dead, so property 3 is not vacuous.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import discovery_sync as ds
from discovery_sync.taints import with_taints
from testrigs.helpers import initial_state
from tests.file.junk import Outside, within

TTL = 2.0
RESCAN = 0.2
MAX_RECORD_BYTES = 64 * 1024
HUGE = 64 * 1024 * 1024
CONVERGE = 5.0  # seconds a watch may take to reflect the store
SWEEP_BOUND = TTL + 5.0  # seconds the canaries may take to be swept
SHUTDOWN_BOUND = 10.0
TICK = 2 * RESCAN  # a pause between operations that lets rescans run
URL_OPTIONS = f"ttl={TTL}&rescan_interval={RESCAN}&max_record_bytes={MAX_RECORD_BYTES}&uniform_ttl=true"

BUCKETS = {kind.bucket: kind for kind in ds.RecordKind}
LOCATIONS = (*BUCKETS, ".locks", "v1", "")
LEFTOVER_PREFIXES = (b".tmp_", b".fuse_hidden", b".nfs")
_ALNUM = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_RECORD_ALPHABET = re.compile(rb"[A-Za-z0-9%]+")

#: a record no owner ever holds, as the content of junk (its endpoint name is used by no junk name)
GHOST = ds.Endpoint("ns", "backend", "copied", 0xC0FFEE, ds.Transport.tcp("127.0.0.1:1"))
GHOST_MODEL = ds.Model("ns", "backend", "copied", 0xC0FFEE, {"display_name": "ghost"})
#: a valid record in the sentinel directory, under its own record name: a followed symlink of that
#: name in the instances bucket would serve it
OUTSIDE_RECORD = Outside.RECORD


def encode_name(path: str) -> bytes:
    """A record's file name, independently of the library: every byte but ASCII letters and digits as ``%XX``."""
    return b"".join(bytes([b]) if b in _ALNUM else b"%%%02X" % b for b in path.encode("utf-8"))


OUTSIDE_RECORD_NAME = encode_name(OUTSIDE_RECORD.id().to_path())


def deletable(location: str, name: bytes, st_: os.stat_result) -> bool:
    """Whether the rules let a sweeper delete this entry: a regular file in a bucket, named as a
    leftover or with the canonical record name of an identity of the bucket's kind."""
    kind = BUCKETS.get(location)
    if kind is None or not stat.S_ISREG(st_.st_mode):
        return False
    if name.startswith(LEFTOVER_PREFIXES):
        return True
    if not _RECORD_ALPHABET.fullmatch(name):
        return False
    try:
        instance_id = ds.id_from_path(kind, urllib.parse.unquote_to_bytes(name).decode("utf-8"))
    except (UnicodeDecodeError, ds.ValidationError):
        return False
    return encode_name(instance_id.to_path()) == name


# -- operations -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Toggle:
    """Register the record of ``slot`` for an owner, or unregister it when the owner holds it."""

    owner: int
    model: bool
    slot: int


@dataclasses.dataclass(frozen=True)
class Taint:
    owner: int
    slot: int
    taints: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Tick:
    """Let rescans run between two operations."""


@dataclasses.dataclass(frozen=True)
class Content:
    kind: str  # raw | ghost | other_kind | copy | torn (half a copy)
    data: bytes = b""
    index: int = 0  # which owned record a copy is of (of the bucket's kind, when there is one)


@dataclasses.dataclass(frozen=True)
class Junk:
    location: str  # relative to the store root
    name: bytes
    entry: str  # see ENTRIES
    content: Content
    old: bool  # mtime an hour ago, else now


Operation = Toggle | Taint | Tick | Junk

ENTRIES = (
    "file",
    "file",
    "mode000",
    "huge",
    "fifo",
    "socket",
    "subdir",
    "symlink_file",
    "symlink_record",
    "symlink_dir",
    "symlink_dangling",
    "symlink_inside",
)


def _ghost_ids() -> st.SearchStrategy[ds.DiscoveryInstanceId]:
    number = st.integers(1, 0xFFF)  # owners have random 64-bit ids: no junk name is an owner's
    endpoint = st.sampled_from(["ghost", "ep0", "ep1", "outside"])
    scope = ds.EventScope("ns")
    return st.one_of(
        st.builds(lambda e, n: ds.EndpointInstanceId("ns", "backend", e, n), endpoint, number),
        st.builds(
            lambda e, n, s: ds.ModelCardInstanceId("ns", "backend", e, n, s),
            endpoint,
            number,
            st.sampled_from([None, "lora"]),
        ),
        st.builds(lambda n: ds.EventChannelInstanceId(scope, "topic", n), number),
        st.builds(lambda n: ds.EventSourceInstanceId(scope, "topic", n), number),
    )


def _mangle(name: bytes, how: str) -> bytes:
    """A near miss of a record name: decodable, or nearly, but not canonical."""
    last = name.rfind(b"%2F") + 3
    return {
        "lower": name.replace(b"%2F", b"%2f"),
        "upper_id": name[:last] + name[last:].upper(),
        "leading_zero": name[:last] + b"0" + name[last:],
        "escaped_letter": name.replace(b"n", b"%6E", 1),
        "trailing_percent": name + b"%",
        "trailing_slash": name + b"%2F",
    }[how]


_record_names = _ghost_ids().map(lambda i: encode_name(i.to_path()))
_record_like_names = st.one_of(
    _record_names,
    st.builds(
        _mangle,
        _record_names,
        st.sampled_from(["lower", "upper_id", "leading_zero", "escaped_letter", "trailing_percent", "trailing_slash"]),
    ),
)
_names = st.one_of(
    _record_like_names,
    st.sampled_from(
        [OUTSIDE_RECORD_NAME, b"x%ZZ", b"abc%FF", b"%", b"%2", b"%C3%28", b"ns%2Fbackend", b"..%2F..%2Fetc", b"v1"]
    ),
    st.text(alphabet="abXY019%", min_size=1, max_size=16).map(str.encode),
    st.text(st.characters(exclude_characters="/\x00"), min_size=1, max_size=16).map(os.fsencode),
    st.builds(
        lambda prefix, rest: prefix + b"\xff" + rest,
        st.sampled_from([b"", b".", b".tmp_", b"ns%2F"]),
        st.binary(max_size=8).filter(lambda b: b"/" not in b and b"\x00" not in b),
    ),
    st.builds(
        lambda prefix, rest: prefix + rest.encode(),
        st.sampled_from([b".tmp_", b".fuse_hidden", b".nfs", b".", b".hidden", b".lock"]),
        st.text(alphabet="0123456789abcdef", max_size=16),
    ),
).filter(lambda name: name not in (b".", b"..") and len(name) <= 200)

_valid_contents = st.sampled_from([Content("ghost"), Content("other_kind"), Content("copy"), Content("copy", index=1)])
_contents = st.one_of(
    st.binary(max_size=64).map(lambda data: Content("raw", data)),
    _valid_contents,
    st.builds(Content, st.just("torn"), st.just(b""), st.integers(0, 7)),
)
_watched = st.sampled_from(["v1/instances", "v1/mdc"])
_junk = st.one_of(
    st.builds(
        Junk,
        st.sampled_from([*BUCKETS, *LOCATIONS]),
        _names,
        st.sampled_from(ENTRIES),
        _contents,
        st.booleans(),
    ),
    # the most tempting junk, drawn more often: valid records under record-like names, where
    # they are read and watched...
    st.builds(Junk, _watched, _record_like_names, st.sampled_from(["file", "mode000"]), _valid_contents, st.booleans()),
    # ...and symlinks out of the store under record-like names, the one of the outside record first
    st.builds(
        Junk,
        _watched,
        st.one_of(st.just(OUTSIDE_RECORD_NAME), _record_like_names),
        st.sampled_from([e for e in ENTRIES if e.startswith("symlink")]),
        st.just(Content("raw")),
        st.booleans(),
    ),
)
_owner = st.integers(0, 1)
_slot = st.integers(0, 3)
_actions = st.lists(
    st.one_of(
        st.builds(Toggle, _owner, st.booleans(), _slot),
        st.builds(Taint, _owner, _slot, st.sampled_from([("a",), ("a", "b"), ()])),
        st.just(Tick()),
    ),
    min_size=2,
    max_size=8,
)
# junk names are unique per location: a second entry under a name would not be planted
_operations = st.tuples(
    st.lists(_junk, min_size=3, max_size=10, unique_by=lambda j: (j.location, j.name)), _actions
).flatmap(lambda drawn: st.permutations([*drawn[0], *drawn[1]]))


# -- the world of one run ---------------------------------------------------------------------------
@dataclasses.dataclass
class Planted:
    path: bytes
    location: str
    name: bytes
    lstat: os.stat_result
    planted_at: float  # monotonic, before the entry existed
    inner: bytes | None = None  # the file inside a planted subdirectory

    def current(self) -> os.stat_result | None:
        try:
            return os.lstat(self.path)
        except FileNotFoundError:
            return None


def same_entry(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_ino, stat.S_IFMT(a.st_mode), a.st_mtime_ns) == (b.st_ino, stat.S_IFMT(b.st_mode), b.st_mtime_ns)


class Problems(logging.Handler):
    """Warnings and errors of the library, and exceptions that reached ``threading.excepthook``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.uncaught: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def hook(self, args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        self.uncaught.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")

    @contextlib.contextmanager
    def installed(self) -> Iterator[Problems]:
        logger = logging.getLogger("discovery_sync")
        previous_hook = threading.excepthook
        logger.addHandler(self)
        threading.excepthook = self.hook
        try:
            yield self
        finally:
            threading.excepthook = previous_hook
            logger.removeHandler(self)


State = dict[ds.DiscoveryInstanceId, ds.DiscoveryInstance]


def apply(state: State, event: ds.DiscoveryEvent, held: set[ds.DiscoveryInstanceId]) -> None:
    """What a consumer does with an event; every record in it must be one an owner has held."""
    for instance in [event.instance] if isinstance(event, ds.Added) else getattr(event, "instances", ()):
        assert instance.id() in held, f"junk served as a record: {instance}"
    if isinstance(event, ds.Added):
        state[event.instance.id()] = event.instance
    elif isinstance(event, ds.Removed):
        assert state.pop(event.id, None) is not None, f"Removed of a record the watch never added: {event}"
    elif isinstance(event, ds.ModelTaintsUpdated):
        old = state[event.id]
        assert isinstance(old, ds.Model)
        state[event.id] = dataclasses.replace(old, card_json=with_taints(old.card_json, event.taints))
    else:
        state.clear()
        state.update((i.id(), i) for i in event.instances)


def by_id(instances: Any) -> State:
    return {i.id(): i for i in instances}


class Run:
    """The clients, watches and junk of one example."""

    def __init__(self, base: Path) -> None:
        self.store = base / "store"
        self.sentinel = Outside(base / "outside")
        # sockets are bound here, then moved into the store: sun_path holds 108 bytes
        self.short = tempfile.mkdtemp(prefix="hs-", dir=base if len(os.fsencode(base)) < 80 else None)
        self.queries = {ds.RecordKind.ENDPOINT: ds.Query.endpoints(), ds.RecordKind.MODEL: ds.Query.models()}
        self.states: dict[ds.RecordKind, State] = {kind: {} for kind in self.queries}
        self.clients: list[ds.Discovery] = []
        self.planted: list[Planted] = []
        self.held: set[ds.DiscoveryInstanceId] = set()  # every record an owner has registered

    def start(self, owners: int) -> None:
        """Connect a reader watching endpoints and models, and the owners."""
        before = set(threading.enumerate())
        url = f"file://{self.store}?{URL_OPTIONS}"
        self.reader = self._connect(url)
        self.owners = [self._connect(url) for _ in range(owners)]
        self.watches = {kind: self.reader.list_and_watch(query) for kind, query in self.queries.items()}
        self.threads = [t for t in threading.enumerate() if t not in before and t.name.startswith("discovery-sync-")]

    def _connect(self, url: str) -> ds.Discovery:
        client = ds.connect(url)
        self.clients.append(client)
        return client

    def close(self) -> None:
        """Shut every client down (bounded), whatever state the run is in."""
        for client in self.clients:
            if not client.closed:
                with contextlib.suppress(Exception):
                    within(SHUTDOWN_BOUND, client.shutdown)
        shutil.rmtree(self.short, ignore_errors=True)

    # -- owners -----------------------------------------------------------------------------------
    def owned(self, kind: ds.RecordKind) -> State:
        return {i.id(): i for owner in self.owners for i in owner.owned() if i.kind is kind}

    def perform(self, operation: Operation) -> None:
        if isinstance(operation, Toggle):
            self._toggle(operation)
        elif isinstance(operation, Taint):
            owner = self.owners[operation.owner % len(self.owners)]
            model_id = ds.ModelCardInstanceId("ns", "backend", f"ep{operation.slot}", owner.instance_id)
            if model_id in by_id(owner.owned()):
                owner.update_model_taints(model_id, list(operation.taints))
        elif isinstance(operation, Tick):
            self.wait_on_watches(lambda: False, TICK, fail=False)
        else:
            self.plant(operation)

    def _toggle(self, operation: Toggle) -> None:
        owner = self.owners[operation.owner % len(self.owners)]
        endpoint = f"ep{operation.slot}"
        spec: ds.EndpointSpec | ds.ModelSpec
        if operation.model:
            record_id: ds.DiscoveryInstanceId = ds.ModelCardInstanceId("ns", "backend", endpoint, owner.instance_id)
            spec = ds.ModelSpec("ns", "backend", endpoint, {"display_name": f"m{operation.slot}", "runtime_config": {}})
        else:
            record_id = ds.EndpointInstanceId("ns", "backend", endpoint, owner.instance_id)
            spec = ds.EndpointSpec("ns", "backend", endpoint, ds.Transport.tcp(f"127.0.0.1:{9000 + operation.slot}"))
        if record_id in by_id(owner.owned()):
            owner.unregister(record_id)
        elif not (operation.model and any(i.endpoint == endpoint for i in self.owned(ds.RecordKind.MODEL).values())):
            self.held.add(owner.register(spec).id())  # a second model on an endpoint would be a conflict

    # -- junk -------------------------------------------------------------------------------------
    def _content(self, content: Content, location: str, name: bytes) -> bytes:
        if content.kind == "raw":
            return content.data
        if content.kind == "other_kind":
            return other_kind(location, name)
        if content.kind == "ghost":  # valid in the bucket, but not under this name
            return ds.instance_to_json(GHOST_MODEL if location == "v1/mdc" else GHOST)
        owned = [i for owner in self.owners for i in owner.owned()]
        owned = [i for i in owned if i.kind is BUCKETS.get(location)] or owned or [GHOST]
        data = ds.instance_to_json(owned[content.index % len(owned)])
        return data if content.kind == "copy" else data[: len(data) // 2]

    def plant(self, junk: Junk) -> None:
        directory = os.fsencode(self.store / junk.location) if junk.location else os.fsencode(self.store)
        path = directory + b"/" + junk.name
        if os.path.lexists(path):
            return  # drawn twice: the first one stays
        planted_at = time.monotonic()
        inner = None
        entry = junk.entry
        if entry in ("file", "mode000", "huge"):
            write_file(path, self._content(junk.content, junk.location, junk.name))
            if entry == "mode000":
                os.chmod(path, 0)
            elif entry == "huge":
                os.truncate(path, HUGE)  # sparse: costs no disk
        elif entry == "fifo":
            os.mkfifo(path)
        elif entry == "socket":
            bound = os.path.join(self.short, "s")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
                server.bind(bound)
                os.rename(bound, path)
        elif entry == "subdir":
            os.mkdir(path)
            inner = path + b"/" + junk.name
            write_file(inner, self._content(junk.content, junk.location, junk.name))
            set_old(inner)
        elif entry == "symlink_inside":
            owned = sorted(encode_name(i.id().to_path()) for owner in self.owners for i in owner.owned())
            os.symlink(owned[0] if owned else b"missing", path)
        else:
            target = {
                "symlink_file": self.sentinel.path / "thesis.tex",
                "symlink_record": self.sentinel.path / os.fsdecode(OUTSIDE_RECORD_NAME),
                "symlink_dir": self.sentinel.path,
                "symlink_dangling": self.sentinel.path / "missing",
            }[entry]
            os.symlink(target, path)
        if junk.old:
            set_old(path)
        self.planted.append(Planted(path, junk.location, junk.name, os.lstat(path), planted_at, inner))

    def plant_canaries(self) -> list[Planted]:
        """A leftover and a record-named garbage file of old mtime per bucket: the rules sweep them."""
        start = len(self.planted)
        for location, kind in BUCKETS.items():
            record_id = {
                ds.RecordKind.ENDPOINT: ds.EndpointInstanceId("ns", "backend", "canary", 0xCA),
                ds.RecordKind.MODEL: ds.ModelCardInstanceId("ns", "backend", "canary", 0xCA),
                ds.RecordKind.EVENT_CHANNEL: ds.EventChannelInstanceId(ds.EventScope("ns"), "canary", 0xCA),
                ds.RecordKind.EVENT_SOURCE: ds.EventSourceInstanceId(ds.EventScope("ns"), "canary", 0xCA),
            }[kind]
            for name in (b".tmp_00000000000000ca", encode_name(record_id.to_path())):
                self.plant(Junk(location, name, "file", Content("raw", b"{canary"), old=True))
        return self.planted[start:]

    def check_junk(self) -> None:
        """Property 3: what is not a record stays; what is goes only after a TTL."""
        now = time.monotonic()
        for planted in self.planted:
            current = planted.current()
            if deletable(planted.location, planted.name, planted.lstat):
                assert current is not None or now - planted.planted_at >= TTL, (
                    f"{planted.path!r} was deleted less than a TTL after it appeared"
                )
                continue
            assert current is not None, f"{planted.path!r} is not a record but was deleted"
            assert same_entry(current, planted.lstat), f"{planted.path!r} is not a record but was changed"
            if planted.inner is not None:
                assert os.path.lexists(planted.inner), f"{planted.inner!r} in a junk directory was deleted"

    def remove_junk(self) -> None:
        for planted in reversed(self.planted):
            if planted.inner is not None:
                os.unlink(planted.inner)
                os.rmdir(planted.path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(planted.path)

    # -- watches ----------------------------------------------------------------------------------
    def wait_on_watches(self, done: Callable[[], bool], bound: float, *, fail: bool = True) -> None:
        """Let time pass consuming the watches' events, until ``done()`` or ``bound`` seconds."""
        deadline = time.monotonic() + bound
        while not done():
            if time.monotonic() >= deadline:
                assert not fail, f"not done after {bound} s"
                return
            for kind, watch in self.watches.items():
                with contextlib.suppress(ds.WatchTimeout):
                    apply(self.states[kind], watch.get(timeout=RESCAN / 4), self.held)

    def check_served(self) -> None:
        """Property 4: watches, list() and a fresh watch hold exactly the owners' records."""
        for kind, watch in self.watches.items():
            state, want = self.states[kind], self.owned(kind)
            deadline = time.monotonic() + CONVERGE
            while state != want:
                try:
                    apply(state, watch.get(timeout=max(deadline - time.monotonic(), 0.0)), self.held)
                except ds.WatchTimeout:
                    pytest.fail(f"the {kind.value} watch did not converge in {CONVERGE} s: {state} != {want}")
            assert by_id(self.reader.list(self.queries[kind])) == want
            with self.reader.list_and_watch(self.queries[kind]) as fresh:
                assert by_id(initial_state(fresh, CONVERGE)[1].instances) == want


def other_kind(location: str, name: bytes) -> bytes:
    """A record named by ``name`` but of a kind that does not belong in ``location`` (when ``name``
    decodes to an endpoint path, which is a model path too), else a ghost record."""
    try:
        path = urllib.parse.unquote_to_bytes(name).decode("utf-8")
        if BUCKETS.get(location) is ds.RecordKind.ENDPOINT:
            m = ds.id_from_path(ds.RecordKind.MODEL, path)
            assert isinstance(m, ds.ModelCardInstanceId)
            other: ds.DiscoveryInstance = ds.Model(
                m.namespace, m.component, m.endpoint, m.instance_id, {"display_name": "other"}, m.model_suffix
            )
        else:
            e = ds.id_from_path(ds.RecordKind.ENDPOINT, path)
            assert isinstance(e, ds.EndpointInstanceId)
            other = ds.Endpoint(e.namespace, e.component, e.endpoint, e.instance_id, ds.Transport.tcp("127.0.0.1:1"))
    except (UnicodeDecodeError, ds.ValidationError):
        other = GHOST
    return ds.instance_to_json(other)


def write_file(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def set_old(path: bytes) -> None:
    old = time.time() - 3600
    os.utime(path, (old, old), follow_symlinks=False)


# -- the property -----------------------------------------------------------------------------------
def _every_kind_of_junk() -> list[Operation]:
    """A hand-picked run: every kind of entry, in buckets, with record-like names."""
    instances, mdc = "v1/instances", "v1/mdc"
    ghost = encode_name("ns/backend/ghost/5a")
    return [
        Toggle(0, False, 0),
        Toggle(0, True, 1),
        Toggle(1, False, 1),
        Junk(instances, OUTSIDE_RECORD_NAME, "symlink_record", Content("raw"), old=True),
        Junk(instances, ghost, "symlink_dir", Content("raw"), old=True),
        Junk(mdc, encode_name("ns/backend/ghost/6"), "symlink_file", Content("raw"), old=True),
        Junk(mdc, encode_name("ns/backend/ghost/7"), "symlink_dangling", Content("raw"), old=True),
        Junk(instances, encode_name("ns/backend/ghost/8"), "symlink_inside", Content("raw"), old=True),
        Junk(instances, encode_name("ns/backend/ghost/9"), "fifo", Content("raw"), old=True),
        Junk(mdc, encode_name("ns/backend/ghost/a"), "socket", Content("raw"), old=True),
        Junk(instances, encode_name("ns/backend/ghost/b"), "subdir", Content("copy"), old=True),
        Junk(instances, _mangle(ghost, "lower"), "file", Content("copy"), old=True),
        Junk(instances, _mangle(ghost, "leading_zero"), "huge", Content("copy"), old=True),
        Junk(mdc, _mangle(ghost, "upper_id"), "mode000", Content("copy", index=1), True),
        Junk(instances, encode_name("ns/backend/ghost/c"), "file", Content("copy"), old=True),
        Junk(instances, encode_name("ns/backend/ghost/d"), "huge", Content("copy"), old=False),
        Junk(mdc, encode_name("ns/backend/ep1/e"), "file", Content("ghost"), old=True),
        Junk(mdc, encode_name("ns/backend/ep2/f"), "file", Content("other_kind"), old=False),
        Junk(instances, encode_name("ns/backend/ep1/f/lora"), "file", Content("other_kind"), old=False),
        Junk("v1/event_sources", b"\xff\xfe" + ghost, "file", Content("ghost"), old=True),
        Junk("v1/event_channels", b"x%ZZ", "file", Content("raw", b"\x00"), old=True),
        Junk("v1/event_channels", b"abc%FF", "fifo", Content("raw"), old=True),
        Junk(mdc, b".hidden", "file", Content("raw", b"{"), old=True),
        Junk(mdc, b".tmp_\xff", "file", Content("raw", b"{"), old=True),
        Junk(".locks", b".tmp_0000000000000001", "file", Content("raw"), old=True),
        Junk("", b"v2", "subdir", Content("raw"), old=True),
        Tick(),
        Taint(0, 1, ("a",)),
        Toggle(0, False, 0),
        Toggle(1, True, 2),
    ]


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@pytest.mark.slow
@given(owners=st.integers(1, 2), operations=_operations, linger=st.booleans())
@example(owners=2, operations=_every_kind_of_junk(), linger=True)
def test_junk_in_the_store_is_never_served_deleted_or_followed(
    tmp_path: Path, owners: int, operations: list[Operation], linger: bool
) -> None:
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    with Problems().installed() as problems:
        run = Run(base)
        try:
            run.start(owners)
            assert run.threads, "the clients run background threads"
            for operation in operations:
                run.perform(operation)
            canaries = run.plant_canaries()
            if linger:  # until a sweep has judged every junk entry dead
                run.wait_on_watches(lambda: all(c.current() is None for c in canaries), SWEEP_BOUND)
            run.check_junk()
            run.check_served()
            run.remove_junk()
            run.check_served()
            stopped = [t.name for t in run.threads if not t.is_alive()]
            assert not stopped, f"threads died: {stopped}"
            for client in run.clients:
                within(SHUTDOWN_BOUND, client.shutdown)
            for thread in run.threads:
                thread.join(SHUTDOWN_BOUND)
            assert not [t.name for t in run.threads if t.is_alive()], "threads outlived shutdown()"
        finally:
            run.close()
    run.sentinel.assert_untouched()
    assert problems.uncaught == []
    errors = [r.getMessage() for r in problems.records if r.levelno >= logging.ERROR]
    assert errors == []
    messages = [r.getMessage() for r in problems.records]
    repeated = {m for m in messages if messages.count(m) > len(run.clients)}
    assert not repeated, f"warned about more than once per client: {repeated}"
