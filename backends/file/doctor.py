"""What ``discovery-sync doctor`` reports about a file store."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from discovery_sync.errors import UnknownRecordType, ValidationError
from discovery_sync.identity import RecordKind

from .directory import SymlinkRefused, listing, open_below
from .layout import StoreLayout
from .mounts import cache_options, cache_window, mount_of
from .names import describe_entry, id_of_name, printable, record_from
from .permissions import unsafe
from .wire import DEFAULT_MAX_RECORD_BYTES, REFERENCE_TTL, TEMP_PREFIX, RecordTooLarge, read_file, unread_reason

STALE_TEMP_SECONDS = 60.0
MAX_LISTED_FOREIGN = 20


def explain_caches(mount: dict[str, Any], window: float, ttl: float, poll: float, *, unknown: bool) -> dict[str, Any]:
    """What the mount's caches mean for delivery latency and for liveness (``window``: the cache
    window the client allows for; ``unknown``: neither detected nor given)."""
    report: dict[str, Any] = {
        "cache_options": cache_options(mount),
        "cache_window_s": window,
        "delivery_latency_s": f"up to {poll + window:g} (poll interval {poll:g} + cache window {window:g})",
        "dead_after_s": ttl + window,
    }
    if unknown:
        report["meaning"] = (
            f"unknown caching on {mount['type']}: measure how late one host sees another's writes and give the "
            "store cache_window=<seconds>, or readers here may judge live records of other hosts dead"
        )
        return report
    report["meaning"] = (
        f"another host's change is seen up to {window:g} s late; a record is judged dead after {ttl + window:g} s "
        f"without a visible heartbeat (TTL {ttl:g} + cache window {window:g})"
        + (" (noac / actimeo=0 / dir_cache=no removes the cache window)" if window else "")
    )
    # the reference's sweep has no allowance for caches: a heartbeat every TTL/3, seen W s late
    if window + REFERENCE_TTL / 3 >= REFERENCE_TTL:
        report["reference_workers"] = (
            f"reference (Rust) workers on this mount remove every file whose mtime looks {REFERENCE_TTL:g} s old on "
            f"their wall clock; seen through a {window:g} s cache window, live records of other hosts look that old: "
            "share the store with them only on a mount with caches off"
        )
    return report


def diagnose_store(
    layout: StoreLayout,
    observer: str,
    lock: str,
    ttl: float,
    window: float = 0.0,
    poll: float = 0.0,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    *,
    read_only: bool = False,
) -> dict[str, Any]:
    """Count records per bucket and list what needs attention. Reads the store the way clients
    do (no symlink followed below the root, no file opened that is not regular, nothing over
    ``max_record_bytes`` read), so no file in it can crash or block the report.

    For a ``read_only`` client, which never creates the store, missing directories are no
    problem (a bucket nobody has written to yet) unless no bucket exists at all: then the
    store does not exist at that path yet, which is one problem. Whether this user may write
    to the store does not concern it either."""
    problems: list[str] = []
    buckets = _diagnose_directories(layout, ttl, max_record_bytes, problems, read_only=read_only)
    mount = mount_of(layout.root)
    problems += _mount_problems(mount, observer, lock)
    unknown = cache_window(mount) is None and not window  # only network filesystems can be unknown
    caches = explain_caches(mount, window, ttl, poll if observer == "polling" else 0.0, unknown=unknown)
    if unknown:
        problems.append(caches["meaning"])
    return {
        "root": str(layout.root),
        "observer": observer,
        "lock": lock,
        "ttl": ttl,
        "max_record_bytes": max_record_bytes,
        "filesystem": {**mount, **caches},
        "buckets": buckets,
        "problems": problems,
    }


def _diagnose_directories(
    layout: StoreLayout, ttl: float, max_record_bytes: int, problems: list[str], *, read_only: bool
) -> dict[str, Any]:
    """Each bucket's report, by bucket name; what is wrong with the store's directories goes to
    ``problems`` (a missing directory only when this client would write to it, or when a reader
    finds no bucket at all)."""
    buckets: dict[str, Any] = {}
    missing: list[str] = []
    relatives = [kind.bucket for kind in layout.buckets] if read_only else layout.relatives()
    for relative in relatives:
        kind = next((k for k in layout.buckets if k.bucket == relative), None)
        try:
            fd = open_below(layout.root, relative)
        except SymlinkRefused as exc:
            problems.append(str(exc))
            continue
        except OSError as exc:
            if read_only and isinstance(exc, FileNotFoundError):
                missing.append(relative)
            else:
                problems.append(f"cannot open {layout.root / relative}: {exc.strerror}")
            continue
        try:
            if kind is not None:
                buckets[kind.bucket] = _diagnose_bucket(
                    kind, fd, layout.root / relative, ttl, max_record_bytes, problems
                )
            if not read_only and not os.access(".", os.W_OK, dir_fd=fd):
                problems.append(
                    f"this user cannot write to {layout.root / relative} (a read-only mount, or its permissions): "
                    "lists and watches work, registrations fail"
                )
        finally:
            os.close(fd)
    if missing and len(missing) == len(relatives):
        problems.append(missing_store(layout.root))
    problems += unsafe(layout.root, layout.relatives())
    return buckets


def _mount_problems(mount: dict[str, Any], observer: str, lock: str) -> list[str]:
    """What the store's filesystem asks of the client's options."""
    problems = []
    if mount["network"] and observer != "polling":
        problems.append(
            f"the store is on {mount['type']}, where inotify never sees other hosts' writes: "
            "connect with ?observer=polling&lock=soft (or ?mode=shared)"
        )
    if mount["network"] and lock != "soft":
        problems.append(f"flock locks may not be shared between hosts on {mount['type']}: use lock=soft")
    return problems


def missing_store(root: Path) -> str:
    """The problem of a read-only client whose store has no bucket (or no root) yet."""
    where = "does not exist" if not os.path.exists(root) else "exists but holds no bucket (v1/...)"
    return (
        f"the file store {root} {where} yet: nothing was ever registered there. Check the path (the URL's "
        "path, or DYN_FILE_KV when the URL names none) against the writers'; a writer creates the store when "
        "it connects, and this read-only client sees it appear"
    )


def _diagnose_bucket(
    kind: RecordKind, dir_fd: int, directory: Path, ttl: float, max_record_bytes: int, problems: list[str]
) -> dict[str, int]:
    counts = dict.fromkeys(
        ("records", "unreadable", "unknown_type", "not_touched_within_ttl", "temp_files", "hidden_files", "foreign"),
        0,
    )
    foreign: list[str] = []
    now = time.time()
    with listing(dir_fd) as entries:
        for entry in entries:
            name, shown = entry.name, directory / printable(entry.name)
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append(f"cannot stat {shown}: {exc.strerror}")
                continue
            what = describe_entry(name, st)
            if what is None and not name.startswith(".") and id_of_name(kind, name) is None:
                what = f"not the file name of any {kind.value} record"
            if what is not None:
                counts["foreign"] += 1
                foreign.append(f"{shown} ({what})")
                continue
            if name.startswith(TEMP_PREFIX):
                counts["temp_files"] += 1
                if now - st.st_mtime > STALE_TEMP_SECONDS:
                    problems.append(f"leftover temp file {shown} (a writer died mid-write); it is safe to delete")
                continue
            if name.startswith("."):
                counts["hidden_files"] += 1  # the filesystem's copy of a file deleted while open; clients sweep it
                continue
            counts["records"] += 1
            if now - st.st_mtime > ttl:
                counts["not_touched_within_ttl"] += 1
            problem = _record_problem(dir_fd, name, kind, max_record_bytes)
            if isinstance(problem, UnknownRecordType):  # a newer runtime's kind: counted, no problem
                counts["unknown_type"] += 1
            elif problem is not None:
                counts["unreadable"] += 1
                problems.append(f"unusable record {shown}: {problem}")
    for line in foreign[:MAX_LISTED_FOREIGN]:
        problems.append(f"foreign entry {line}: only records belong in a bucket; clients never read or delete it")
    if len(foreign) > MAX_LISTED_FOREIGN:
        problems.append(f"{len(foreign) - MAX_LISTED_FOREIGN} more foreign entries in {directory}")
    return counts


def _record_problem(dir_fd: int, name: str, kind: RecordKind, max_record_bytes: int) -> str | UnknownRecordType | None:
    """Why the file ``name`` is not served as a record (None: it is); UnknownRecordType when it
    holds a record of a type this version does not know (a newer runtime's: no problem)."""
    try:
        raw = read_file(dir_fd, name, max_record_bytes)
    except (OSError, RecordTooLarge) as exc:
        return f"{unread_reason(exc)}; clients skip it"
    if raw is None:
        return "vanished or changed type while being read"
    try:
        record_from(raw, kind, name)
    except UnknownRecordType as exc:
        return exc
    except ValidationError as exc:
        return str(exc)
    return None
