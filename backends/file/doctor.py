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
from .records import TEMP_PREFIX, read_record

STALE_TEMP_SECONDS = 60.0


def explain_caches(mount: dict[str, Any], ttl: float, heartbeat: float, poll: float) -> dict[str, Any]:
    """What the mount's caches mean for delivery latency and for the TTL to choose."""
    window = cache_window(mount)
    report: dict[str, Any] = {"cache_options": cache_options(mount), "cache_window_s": window}
    if window is None:
        report["meaning"] = f"unknown caching on {mount['type']}: measure how late one host sees another's writes"
        return report
    # a touch lands every heartbeat and may be seen a cache window (plus a poll) late
    needed = round(heartbeat + window + poll, 1)
    report["delivery_latency_s"] = f"up to {poll + window:g} (poll interval {poll:g} + cache window {window:g})"
    report["ttl_at_least_s"] = round(2 * needed)
    report["meaning"] = (
        f"another host's change is seen up to {window:g} s late; a record's heartbeat (every {heartbeat:.2g} s) may "
        f"look stalled for {needed:g} s, so choose a TTL of at least {round(2 * needed)} s"
        + (" (noac / actimeo=0 / dir_cache=no removes the cache window)" if window else "")
    )
    return report


def diagnose_store(
    layout: StoreLayout, observer: str, lock: str, ttl: float, heartbeat: float = 0.0, poll: float = 0.0
) -> dict[str, Any]:
    """Count records per bucket and list what needs attention."""
    problems: list[str] = []
    buckets: dict[str, Any] = {}
    now = time.time()
    for kind, directory in layout.buckets.items():
        records = unreadable = stale = temp = 0
        for entry in os.scandir(directory):
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
    caches = explain_caches(mount, ttl, heartbeat, poll if observer == "polling" else 0.0)
    mount = {**mount, **caches}
    if mount["network"] and "ttl_at_least_s" in caches and ttl < caches["ttl_at_least_s"]:
        problems.append(
            f"TTL {ttl:g} s is too short for this mount: {caches['meaning']}; a reader may sweep live records"
        )
    return {
        "root": str(layout.root),
        "observer": observer,
        "lock": lock,
        "ttl": ttl,
        "filesystem": mount,
        "buckets": buckets,
        "problems": problems,
    }
