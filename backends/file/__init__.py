"""File-system backend: ``file:///path?observer=polling&lock=soft&ttl=10`` (see :class:`FileDiscovery`)."""

from __future__ import annotations

import os
from typing import Any

from discovery_sync.errors import ValidationError

from .backend import DEFAULT_TTL, FileDiscovery
from .layout import StoreLayout, default_root

__all__ = ["FileDiscovery", "StoreLayout", "default_root", "from_url"]

# auto: by the filesystem (network filesystems get polling and soft locks, see .mounts)
_MODES = {
    "auto": {},
    "local": {"observer": "inotify", "lock": "hard"},
    "shared": {"observer": "polling", "lock": "soft"},
}
_FLOAT_OPTIONS = ("ttl", "rescan_interval", "poll_interval", "lock_timeout", "lock_stale", "cache_window")


def env_ttl() -> float:
    """``DYN_FILE_KV_TTL_SECS`` (seconds), default 10."""
    raw = os.environ.get("DYN_FILE_KV_TTL_SECS", "").strip()
    if not raw:
        return DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        raise ValidationError(f"DYN_FILE_KV_TTL_SECS={raw!r} is not a number of seconds") from None
    if ttl <= 0:
        raise ValidationError(f"DYN_FILE_KV_TTL_SECS={raw!r} must be positive")
    return ttl


def from_url(netloc: str, path: str, options: dict[str, Any]) -> FileDiscovery:
    """``file:///path[?options]``; an empty path means ``DYN_FILE_KV`` or the reference default."""
    if netloc not in ("", "localhost"):
        raise ValidationError(f"file URLs name a local path (file:///path), not a host: {netloc!r}")
    options = dict(options)
    mode = options.pop("mode", "auto")
    if mode not in _MODES:
        raise ValidationError(f"file store mode {mode!r} is not valid: use one of {', '.join(_MODES)}")
    settings: dict[str, Any] = {**_MODES[mode], "ttl": env_ttl()}
    for key, value in options.items():
        if key in _FLOAT_OPTIONS:
            try:
                settings[key] = float(value)
            except (TypeError, ValueError):
                raise ValidationError(f"file store option {key}={value!r} must be a number") from None
        elif key in ("observer", "lock", "permissions"):
            settings[key] = value
        elif key == "max_record_bytes":
            try:
                settings[key] = int(value)
            except (TypeError, ValueError):
                raise ValidationError(f"file store option {key}={value!r} must be a whole number of bytes") from None
        elif key == "instance_id":
            settings[key] = int(value)
        else:
            raise ValidationError(
                f"unknown file store option {key!r}: use mode, observer, lock, permissions, max_record_bytes, "
                f"{', '.join(_FLOAT_OPTIONS)}"
            )
    return FileDiscovery(path or default_root(), **settings)
