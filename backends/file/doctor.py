"""What ``discovery-sync doctor`` reports about a file store."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from discovery_sync.errors import ValidationError
from discovery_sync.model import instance_from_json
from discovery_sync.pathcodec import decode

from .layout import StoreLayout
from .records import TEMP_PREFIX, read_record

NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "fuse.sshfs", "9p", "glusterfs", "lustre", "ceph", "fuse.s3fs")
STALE_TEMP_SECONDS = 60.0


def mount_of(path: Path) -> dict[str, Any]:
    """The mount holding ``path``, from /proc/self/mountinfo: type, mount point, options."""
    target = os.path.realpath(path)
    best: dict[str, Any] = {"type": "unknown", "mount_point": "/", "options": []}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best["mount_point"]):
            options = fields[5].split(",") + tail[2].split(",")
            best = {"type": tail[0], "mount_point": mount_point, "options": sorted(set(options))}
    best["network"] = best["type"] in NETWORK_FILESYSTEMS
    return best


def diagnose_store(layout: StoreLayout, observer: str, lock: str, ttl: float) -> dict[str, Any]:
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
    return {
        "root": str(layout.root),
        "observer": observer,
        "lock": lock,
        "ttl": ttl,
        "filesystem": mount,
        "buckets": buckets,
        "problems": problems,
    }
