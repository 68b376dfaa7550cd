"""What ``discovery-sync doctor`` reports about a file store."""

from __future__ import annotations

import os
import time
from typing import Any

from discovery_sync.errors import ValidationError
from discovery_sync.model import instance_from_json
from discovery_sync.pathcodec import decode

from .layout import StoreLayout
from .mounts import cache_options, cache_window, mount_of
from .records import LEFTOVER_PREFIXES, REFERENCE_TTL, TEMP_PREFIX, read_record

STALE_TEMP_SECONDS = 60.0


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
    layout: StoreLayout, observer: str, lock: str, ttl: float, window: float = 0.0, poll: float = 0.0
) -> dict[str, Any]:
    """Count records per bucket and list what needs attention."""
    problems: list[str] = []
    buckets: dict[str, Any] = {}
    now = time.time()
    for kind, directory in layout.buckets.items():
        records = unreadable = stale = temp = hidden = 0
        for entry in os.scandir(directory):
            if entry.name.startswith(LEFTOVER_PREFIXES[1:]):
                hidden += 1  # the filesystem's copy of a file deleted while open; clients sweep it
                continue
            if entry.name.startswith(TEMP_PREFIX):
                temp += 1
                if now - entry.stat().st_mtime > STALE_TEMP_SECONDS:
                    problems.append(f"leftover temp file {entry.path} (a writer died mid-write); it is safe to delete")
                continue
            if entry.name.startswith("."):
                continue
            if not entry.is_file(follow_symlinks=False):
                problems.append(f"{entry.path} is not a regular file; only records belong in {directory}")
                continue
            records += 1
            raw = read_record(entry.path) or b""
            try:
                instance_from_json(raw)
            except ValidationError as exc:
                unreadable += 1
                problems.append(f"unreadable record {entry.path}: {exc}")
            if now - entry.stat().st_mtime > ttl:
                stale += 1
        buckets[kind.bucket] = {"records": records, "unreadable": unreadable, "not_touched_within_ttl": stale}
        buckets[kind.bucket]["temp_files"] = temp
        buckets[kind.bucket]["hidden_files"] = hidden
        for name in os.listdir(directory):
            if not name.startswith("."):
                try:
                    decode(name)
                except ValidationError:
                    problems.append(f"{directory / name} is not a percent-encoded record name")
    mount = mount_of(layout.root)
    if mount["network"] and observer != "polling":
        problems.append(
            f"the store is on {mount['type']}, where inotify never sees other hosts' writes: "
            "connect with ?observer=polling&lock=soft (or ?mode=shared)"
        )
    if mount["network"] and lock != "soft":
        problems.append(f"flock locks may not be shared between hosts on {mount['type']}: use lock=soft")
    unknown = cache_window(mount) is None and not window  # only network filesystems can be unknown
    caches = explain_caches(mount, window, ttl, poll if observer == "polling" else 0.0, unknown=unknown)
    if unknown:
        problems.append(caches["meaning"])
    mount = {**mount, **caches}
    return {
        "root": str(layout.root),
        "observer": observer,
        "lock": lock,
        "ttl": ttl,
        "filesystem": mount,
        "buckets": buckets,
        "problems": problems,
    }
