"""The options of ``file://`` URLs, of ``FileDiscovery``'s keyword arguments and of its environment."""

from __future__ import annotations

from discovery_sync.logical_id import PARSERS as LOGICAL_ID_PARSERS
from discovery_sync.options import (
    SERVER_ONLY,
    OptionSet,
    boolean,
    choice,
    clock,
    duration,
    from_environment,
    integer,
    optional,
    path,
    uint64,
)

from .locks import LOCK_MODES
from .permissions import PERMISSION_POLICIES
from .watcher import OBSERVER_KINDS

DEFAULT_TTL = 10.0
# auto: by the filesystem (network filesystems get polling and soft locks, see .mounts)
MODES = {
    "auto": {},
    "local": {"observer": "inotify", "lock": "hard"},
    "shared": {"observer": "polling", "lock": "soft"},
}
# one scan or poll a few times a second at most: below that a store of any size is a busy loop
MIN_INTERVAL = 0.05

ttl = duration(1.0)
OPTIONS = OptionSet(
    "file store",
    {
        "mode": choice(*MODES),
        "observer": optional(choice(*OBSERVER_KINDS)),
        "lock": optional(choice(*LOCK_MODES)),
        "permissions": choice(*PERMISSION_POLICIES),
        "ttl": ttl,
        "rescan_interval": optional(duration(MIN_INTERVAL)),
        "poll_interval": duration(MIN_INTERVAL),
        "lock_timeout": optional(duration(0.0)),
        "lock_stale": duration(0.0, exclusive_minimum=True),
        "cache_window": optional(duration(0.0)),
        "max_record_bytes": integer(1024, 2**30, "bytes"),
        "instance_id": optional(uint64),
        "read_only": boolean,
        "uniform_ttl": boolean,
        "clock": clock,
        **LOGICAL_ID_PARSERS,
    },
    refused=SERVER_ONLY,
)


def store_path(value: object) -> str:
    """The store directory of a URL, a keyword argument or ``DYN_FILE_KV``, checked."""
    return path(value, "file store path")


def env_ttl() -> float:
    """``DYN_FILE_KV_TTL_SECS`` (seconds), default 10."""
    return from_environment("DYN_FILE_KV_TTL_SECS", ttl, DEFAULT_TTL)
