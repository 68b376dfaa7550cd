"""The filesystem a store lives on, and what its caches mean for discovery.

On a network filesystem (NFS, CIFS, sshfs, …) inotify never sees another host's writes and
flock may not be shared between hosts, so the store defaults to the polling observer and soft
locks there. Attribute and directory caches delay what a host sees of another host's changes by
up to a *cache window*: delivery can take that long, and a reader may see a record's mtime stand
still that long — the TTL must leave room for it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("discovery_sync.backends.file")

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "fuse.sshfs",
        "9p",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
        "ceph",
        "fuse.ceph",
        "fuse.s3fs",
        "afs",
        "gpfs",
        "beegfs",
        "fuse.rclone",
    }
)
#: Linux NFS defaults (nfs(5)): attribute caching of files 3-60 s, directories 30-60 s
NFS_DEFAULTS = {"acregmin": 3.0, "acregmax": 60.0, "acdirmin": 30.0, "acdirmax": 60.0}
#: sshfs defaults: its own cache keeps attributes and listings 20 s; the kernel keeps what it got 1 s more
SSHFS_DEFAULTS = {"dcache_timeout": 20.0, "attr_timeout": 1.0, "entry_timeout": 1.0}
CIFS_DEFAULT_ACTIMEO = 1.0
CACHE_OPTION_PREFIXES = (
    "ac",
    "noac",
    "lookupcache",
    "cache",
    "dir_cache",
    "dcache",
    "attr_timeout",
    "entry_timeout",
    "negative_timeout",
    "kernel_cache",
    "auto_cache",
    "actimeo",
)


def _unescape(field: str) -> str:
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_of(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mount holding ``path``, from /proc/self/mountinfo: type, mount point, options, network."""
    target = os.path.realpath(path)
    best: dict[str, Any] = {"type": "unknown", "mount_point": "/", "options": []}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        mount_point = _unescape(fields[4])
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best["mount_point"]):
            options = fields[5].split(",") + tail[2].split(",")
            best = {"type": tail[0], "mount_point": mount_point, "options": sorted(set(options))}
    best["network"] = best["type"] in NETWORK_FILESYSTEMS
    if best["type"] == "fuse.sshfs":
        best["options"] = sorted(set(best["options"]) | set(sshfs_options(best["mount_point"])))
    return best


def sshfs_options(mount_point: str) -> list[str]:
    """The ``-o`` options of the sshfs process serving ``mount_point`` (its caches are not in mountinfo)."""
    found: list[str] = []
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [arg.decode(errors="replace") for arg in argv if arg]
        if not args or os.path.basename(args[0]) != "sshfs" or mount_point not in args:
            continue
        for i, arg in enumerate(args):
            if arg == "-o" and i + 1 < len(args):
                found += args[i + 1].split(",")
            elif arg.startswith("-o") and len(arg) > 2:
                found += arg[2:].split(",")
        break
    return found


def _numbers(options: list[str]) -> dict[str, str]:
    values = {}
    for option in options:
        key, sep, value = option.partition("=")
        values[key] = value if sep else ""
    return values


def _seconds(value: str | None, default: float) -> float:
    try:
        return float(value) if value not in (None, "") else default
    except ValueError:
        return default


def cache_window(mount: dict[str, Any]) -> float | None:
    """Seconds a host may go on seeing old attributes or listings of another host's changes; None: unknown."""
    fs, options = mount.get("type", ""), _numbers(mount.get("options", []))
    if not mount.get("network"):
        return 0.0
    if fs in ("nfs", "nfs4"):
        if "noac" in options:
            return 0.0
        if "actimeo" in options:
            return _seconds(options["actimeo"], 0.0)
        return max(_seconds(options.get(key), default) for key, default in NFS_DEFAULTS.items())
    if fs in ("cifs", "smb3", "smbfs"):
        return _seconds(options.get("actimeo"), CIFS_DEFAULT_ACTIMEO)
    if fs == "fuse.sshfs":
        kernel = max(_seconds(options.get(key), SSHFS_DEFAULTS[key]) for key in ("attr_timeout", "entry_timeout"))
        if options.get("dir_cache") == "no" or options.get("cache") == "no":
            return kernel
        dcache = _seconds(options.get("dcache_timeout", options.get("cache_timeout")), SSHFS_DEFAULTS["dcache_timeout"])
        return dcache + kernel  # the kernel may keep for attr_timeout what sshfs's cache already held
    return None


def store_cache_window(mount: dict[str, Any], given: float | None) -> float:
    """The cache window a client on ``mount`` allows for: ``given``, else the detected one.

    An unknown window (a network filesystem this module cannot read) counts as 0 with a warning:
    readers may then judge a live record of another host dead and its owner writes it again.
    """
    if given is not None:
        return given
    window = cache_window(mount)
    if window is None:
        log.warning(
            "the caching of %s (%s) is unknown: give the file store cache_window=<seconds> (how late this host "
            "may see another host's writes), or readers here may judge live records of other hosts dead",
            mount["type"],
            mount["mount_point"],
        )
        return 0.0
    return window


def cache_options(mount: dict[str, Any]) -> list[str]:
    """The mount options that matter for caching (actimeo, noac, lookupcache, cache timeouts, …)."""
    return [option for option in mount.get("options", []) if option.startswith(CACHE_OPTION_PREFIXES)]


def choose_modes(root: Path, observer: str | None, lock: str | None, mount: dict[str, Any]) -> tuple[str, str]:
    """The observer and lock mode for a store at ``root`` on ``mount``: as given, else by its filesystem."""
    if observer is not None and lock is not None:
        return observer, lock
    if not mount["network"]:
        return observer or "inotify", lock or "hard"
    chosen = (observer or "polling", lock or "soft")
    log.info(
        "the file store %s is on %s (%s): using the %s observer and %s locks, because inotify never sees other "
        "hosts' writes there and flock may not be shared between hosts",
        root,
        mount["type"],
        mount["mount_point"],
        *chosen,
    )
    return chosen


def read_only_filesystem(root: Path) -> bool:
    """Whether the filesystem holding ``root`` is mounted read-only here now (a remount can make
    it so at any time); False when that cannot be told."""
    try:
        return bool(os.statvfs(root).f_flag & os.ST_RDONLY)
    except OSError:
        return False
