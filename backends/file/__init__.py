"""File-system backend: ``file:///path?observer=polling&lock=soft&ttl=10`` (see :class:`FileDiscovery`)."""

from __future__ import annotations

from typing import Any

from discovery_sync.errors import ValidationError
from discovery_sync.logical_id import from_options

from .backend import FileDiscovery
from .layout import StoreLayout, default_root
from .options import MODES, OPTIONS, env_ttl

__all__ = ["FileDiscovery", "StoreLayout", "default_root", "from_url"]


def from_url(netloc: str, path: str, options: dict[str, Any]) -> FileDiscovery:
    """``file:///path[?options]``; an empty path means ``DYN_FILE_KV`` or the reference default.

    Options (URL parameters or keyword arguments) are listed in :mod:`.options`; ``mode`` is a
    shorthand for ``observer`` and ``lock`` (explicit ones win). A logical instance id (the
    ``logical_instance_id``/``logical_instance_key`` options, else ``DYN_DISCOVERY_LOGICAL_INSTANCE_ID``
    /``_KEY``; see :mod:`discovery_sync.logical_id`) makes the client a failover-cohort member
    whose instance id it is.
    """
    if netloc not in ("", "localhost"):
        raise ValidationError(f"file URLs name a local path (file:///path), not a host: {netloc!r}")
    logical_instance_id = from_options(options, OPTIONS)
    settings = OPTIONS.parse(options)
    mode = settings.pop("mode", "auto")
    settings = {**MODES[mode], "ttl": env_ttl(), **settings}
    return FileDiscovery(path or default_root(), logical_instance_id=logical_instance_id, **settings)
