"""How the CLI reaches a store: connect options from ``--timeout``, read-only clients, queries and store keys."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import orjson

import discovery_sync as ds

from .progress import is_terminal, waiting

DEFAULT_TIMEOUT = 5.0  # seconds, like etcdctl's --command-timeout
DEFAULT_ETCD_ENDPOINTS = "http://localhost:2379"  # the etcd backend's (and the reference's) without ETCD_ENDPOINTS
SCOPE_EXAMPLE = """--scope '{"kind": "namespace", "name": "ns"}'"""

# query kind names (Query.from_dict's) -> RecordKind, with the singular and dashed forms people type
KINDS = {
    "endpoints": ds.RecordKind.ENDPOINT,
    "models": ds.RecordKind.MODEL,
    "event_channels": ds.RecordKind.EVENT_CHANNEL,
    "event_sources": ds.RecordKind.EVENT_SOURCE,
}
_ALIASES = {
    "endpoint": "endpoints",
    "model": "models",
    "mdc": "models",
    "event_channel": "event_channels",
    "event_source": "event_sources",
}
ENDPOINT_FILTERS = ("namespace", "component", "endpoint")
EVENT_FILTERS = ("scope", "topic")


def timeout_options(url: str | None, seconds: float) -> dict[str, object]:
    """The connect options that bound connecting and each request by ``seconds``, for the backend
    of ``url`` (None: the environment's, :func:`discovery_sync.default_url`). The file and memory
    backends get none: nothing of theirs waits on a network."""
    scheme = urllib.parse.urlsplit(url if url is not None else ds.default_url()).scheme
    if scheme == "etcd":
        names: tuple[str, ...] = ("connect_timeout", "request_timeout")
    elif scheme in ("kube", "kubernetes"):
        names = ("connect_timeout", "request_timeout", "ready_timeout", "sync_timeout", "write_timeout")
    else:
        names = ()
    return dict.fromkeys(names, seconds)


def store_name(url: str | None) -> str:
    """The store as the CLI names it: ``url``, or (None) the store the environment resolves to,
    with the variables it came from: ``file:///srv/kv (from DYN_FILE_KV)``."""
    if url is not None:
        return url
    where, source = environment_store()
    return f"{where} ({source})"


def environment_store() -> tuple[str, str]:
    """The store that connect() without a URL reaches, as a URL with its etcd endpoints or file
    root filled in, and what chose it (``DYN_DISCOVERY_BACKEND``, ``ETCD_ENDPOINTS``, ``DYN_FILE_KV``
    or the defaults). Never raises: a bad variable is connect()'s error to report."""
    chosen = os.environ.get("DYN_DISCOVERY_BACKEND", "").strip()
    try:
        url = ds.default_url()
    except ds.DiscoveryError:
        return "no store", f"DYN_DISCOVERY_BACKEND={chosen!r} names no backend"
    scheme = urllib.parse.urlsplit(url).scheme
    by = [f"DYN_DISCOVERY_BACKEND={chosen}"] if chosen else []
    if scheme == "etcd":
        return _etcd_store(by)
    if scheme == "file":
        return _file_store(by)
    return url, "from " + " and ".join(by)


def _source(by: list[str], variable: str) -> str:
    """``from A and B`` when ``variable`` is set, else that its default applies."""
    if os.environ.get(variable, "").strip():
        return "from " + " and ".join([*by, variable])
    return ("from " + by[0] + "; " if by else "") + f"{variable} is not set: the default"


def _etcd_store(by: list[str]) -> tuple[str, str]:
    given = os.environ.get("ETCD_ENDPOINTS", "").strip()
    hosts = [host.strip() for host in (given or DEFAULT_ETCD_ENDPOINTS).split(",") if host.strip()]
    if all(host.startswith("http://") or "://" not in host for host in hosts):
        where = "etcd://" + ",".join(host.removeprefix("http://") for host in hosts)
    else:  # https endpoints have no etcd:// form: the URL would be etcd://host and certificates
        where = "etcd at " + ", ".join(hosts)
    return where, _source(by, "ETCD_ENDPOINTS")


def _file_store(by: list[str]) -> tuple[str, str]:
    # imported by name: the CLI's type check sees the backends in their source folder, not in the package
    layout: Any = importlib.import_module("discovery_sync.backends.file.layout")
    try:
        root = str(layout.default_root())
    except ds.DiscoveryError:  # a DYN_FILE_KV that is no path: connect() says what is wrong
        root = os.environ.get("DYN_FILE_KV", "")
    return f"file://{root}", _source(by, "DYN_FILE_KV")


def announce_store(url: str | None) -> None:
    """On a terminal, say on stderr which store the environment chose (nothing when ``--url`` did)."""
    if url is None and is_terminal(sys.stderr):
        print(f"store: {store_name(None)}", file=sys.stderr, flush=True)


def open_store(
    args: argparse.Namespace, *, read_only: bool, announce: bool = True, must_exist: bool = True
) -> ds.Discovery:
    """A client of ``--url`` whose waits are bounded by ``--timeout`` (options written in the URL
    win); ``read_only``: one that never writes (no lease, no resource, no store directory).
    ``announce``: say which store the environment chose (:func:`announce_store`), unless the
    command shows it in a header of its own. ``must_exist``: a file store that does not exist is
    BackendUnavailable, before anything is created (:func:`missing_file_store`): a mistyped path
    is no empty store. Only commands that write records (register) or report on the store
    themselves (doctor) do without."""
    url: str | None = args.url
    if announce:
        announce_store(url)
    if must_exist and (missing := missing_file_store(url)) is not None:
        raise ds.BackendUnavailable(missing)
    try:
        given = {name for name, _ in urllib.parse.parse_qsl(urllib.parse.urlsplit(url or "").query)}
    except ValueError:  # connect() says what is wrong with the URL
        given = set()
    options: dict[str, Any] = {
        name: value for name, value in timeout_options(url, args.timeout).items() if name not in given
    }
    if read_only:
        options["read_only"] = True
    with waiting(f"connecting to {store_name(url)}"):
        return ds.connect(url, **options)


def file_store_root(url: str | None) -> Path | None:
    """The root directory of the file store ``url`` names (None: the environment's store), as
    connect() resolves it; None when it is no file store, or connect() would refuse the URL."""
    try:
        parts = urllib.parse.urlsplit(url if url is not None else ds.default_url())
    except (ValueError, ds.DiscoveryError):  # connect() says what is wrong
        return None
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = urllib.parse.unquote(parts.path, errors="surrogateescape")  # as connect() reads it
    if path:
        return Path(path)
    layout: Any = importlib.import_module("discovery_sync.backends.file.layout")
    try:
        return Path(layout.default_root())
    except ds.DiscoveryError:  # a DYN_FILE_KV that is no path: connect() says what is wrong
        return None


def missing_file_store(url: str | None) -> str | None:
    """What to say when ``url`` (None: the environment's store) is a file store whose root holds
    no bucket directory (``v1/...``): the root does not exist (a mistyped path, say), or it is a
    directory no writer ever used. Writers create every bucket when they connect, so a store
    that was used has them. None when it has one, is no file store, or cannot be looked at (the
    client says why)."""
    root = file_store_root(url)
    if root is None:
        return None
    for kind in ds.RecordKind:
        try:
            os.stat(root / kind.bucket)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except (OSError, ValueError):  # refused, or a path the OS cannot take: connecting says so
            return None
        return None
    source = "" if url is not None else f" ({environment_store()[1]})"
    if os.path.isdir(root):
        what = f"no file store at {root}{source}: the directory holds no bucket (v1/...)"
    else:
        what = f"the file store {root}{source} does not exist"
    return (
        f"{what}: nothing was ever registered there. Check the path "
        "(--url, or DYN_FILE_KV when the URL names none) against the writers'; a writer creates the "
        "store when it connects (a worker, or 'discovery-sync register SPEC')"
    )


# -- kinds and queries -------------------------------------------------------------------------------
def kind_name(text: str, *, allow_all: bool) -> str:
    """``--kind``: a query kind name (``endpoints``, ...), or ``all`` when allowed; argparse's error otherwise."""
    name = text.strip().lower().replace("-", "_")
    name = _ALIASES.get(name, name)
    if name in KINDS or (allow_all and name == "all"):
        return name
    choices = (["all"] if allow_all else []) + list(KINDS)
    raise argparse.ArgumentTypeError(f"invalid kind {text!r}: choose {', '.join(choices)}")


def parse_scope(text: str) -> dict[str, Any]:
    """The ``--scope`` argument as a JSON object; anything else is a ValidationError with an example."""
    try:
        scope = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ds.ValidationError(f"--scope is not valid JSON: {exc}; example: {SCOPE_EXAMPLE}") from None
    if not isinstance(scope, dict):
        raise ds.ValidationError(f"--scope must be a JSON object, got {type(scope).__name__}; example: {SCOPE_EXAMPLE}")
    return scope


def _filters(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def query(args: argparse.Namespace, kind: str) -> ds.Query:
    """The query of one kind that ``--namespace``/``--component``/``--endpoint``/``--scope``/``--topic`` make."""
    data: dict[str, Any] = {"kind": kind, **_filters(args, ENDPOINT_FILTERS + EVENT_FILTERS)}
    if "scope" in data:
        data["scope"] = parse_scope(data["scope"])
    return ds.Query.from_dict(data)


def queries(args: argparse.Namespace) -> list[ds.Query]:
    """The queries of ``--kind`` (``all``: each kind the filters given apply to)."""
    if args.kind != "all":
        return [query(args, args.kind)]
    by_endpoint, by_event = _filters(args, ENDPOINT_FILTERS), _filters(args, EVENT_FILTERS)
    if by_endpoint and by_event:
        raise ds.ValidationError(
            "--namespace/--component/--endpoint select endpoints and models, --scope/--topic event channels "
            "and sources: give filters of one sort, or choose a --kind"
        )
    if by_endpoint:
        kinds = ["endpoints", "models"]
    elif by_event:
        kinds = ["event_channels", "event_sources"]
    else:
        kinds = list(KINDS)
    return [query(args, kind) for kind in kinds]


# -- store keys ----------------------------------------------------------------------------------------
def parse_key(text: str, kind: str | None = None) -> ds.DiscoveryInstanceId:
    """A record's identity from its store key (``v1/instances/ns/comp/ep/2a``) or, given its
    ``kind``, from its id path (``ns/comp/ep/2a``); ValidationError saying what a key looks like."""
    key = text.strip().strip("/")
    if kind is not None:
        bucket = KINDS[kind].bucket
        path = key[len(bucket) + 1 :] if key.startswith(bucket + "/") else key
        return ds.id_from_path(KINDS[kind], path)
    if any(key.startswith(record_kind.bucket + "/") for record_kind in ds.RecordKind):
        return ds.id_from_key(key)
    buckets = ", ".join(f"{k.bucket}/" for k in ds.RecordKind)
    raise ds.ValidationError(
        f"{text!r} is not a store key: a key starts with one of {buckets} "
        "(or give --kind and the id path, e.g. --kind endpoints ns/component/endpoint/2a)"
    )
