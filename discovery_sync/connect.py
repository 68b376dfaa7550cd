"""``connect()``: build a client from a URL or from the reference runtime's environment."""

from __future__ import annotations

import importlib
import os
import urllib.parse
from collections.abc import Callable
from typing import Any

from .discovery import Discovery
from .errors import BackendUnavailable, ValidationError

# URL scheme -> backend module (imported lazily, so `import discovery_sync` stays light)
_SCHEMES = {
    "file": "discovery_sync.backends.file",
    "memory": "discovery_sync.backends.memory",
    "mem": "discovery_sync.backends.memory",
    "etcd": "discovery_sync.backends.etcd",
    "kube": "discovery_sync.backends.kube",
    "kubernetes": "discovery_sync.backends.kube",
}

# URL scheme -> the extra that installs its backend's client library (and that library's own)
_EXTRAS = {"etcd": "etcd", "kube": "kube", "kubernetes": "kube"}

# DYN_DISCOVERY_BACKEND value -> URL used when no URL is given
_ENV_BACKENDS = {"file": "file://", "etcd": "etcd://", "kubernetes": "kube://", "mem": "memory://"}


def default_url() -> str:
    """The URL the environment selects (``DYN_DISCOVERY_BACKEND``, then ``ETCD_ENDPOINTS``)."""
    backend = os.environ.get("DYN_DISCOVERY_BACKEND", "").strip()
    if backend:
        try:
            return _ENV_BACKENDS[backend]
        except KeyError:
            raise ValidationError(
                f"DYN_DISCOVERY_BACKEND={backend!r} is not valid: use one of {', '.join(_ENV_BACKENDS)}"
            ) from None
    if os.environ.get("ETCD_ENDPOINTS", "").strip():
        return "etcd://"
    return "file://"


def connect(url: str | None = None, **options: Any) -> Discovery:
    """Connect to a discovery store and return a client.

    ``url`` is ``file:///path[?observer=polling&lock=soft&ttl=10]``, ``etcd://host:port[,host:port]``,
    ``kube://`` or ``memory://[name]``; without one, the environment decides (see
    :func:`default_url`). Keyword options override the URL's query parameters.

    The etcd and Kubernetes backends wait for their server to answer for ``connect_timeout``
    seconds in all (``?connect_timeout=SECONDS`` or the keyword; default 10, as etcd and ZooKeeper
    clients wait to dial), then raise BackendUnavailable naming the server and the timeout;
    ``connect_timeout=none`` in the URL, or ``connect_timeout=None``, waits without limit (a
    worker that starts before its store). The file and memory backends refuse the option.
    Numbers in a URL are ASCII digits (see :mod:`discovery_sync.options`).
    """
    if url is None:
        url = default_url()
    if not isinstance(url, str):
        raise ValidationError(f"url must be a string, got {type(url).__name__}")
    try:
        parsed = urllib.parse.urlsplit(url)
        pairs = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
    except ValueError as exc:
        raise ValidationError(f"discovery URL {url!r} cannot be parsed: {exc}") from None
    if parsed.fragment:
        raise ValidationError(
            f"discovery URL {url!r} has a fragment ('#{parsed.fragment}'): write '#' in a path as %23"
        )
    module_name = _SCHEMES.get(parsed.scheme)
    if module_name is None:
        raise ValidationError(f"unsupported discovery URL {url!r}: the scheme must be one of {', '.join(_SCHEMES)}")
    query: dict[str, Any] = dict(pairs)  # a repeated parameter: the last one counts
    query.update(options)
    try:
        backend = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise ValidationError(f"the {parsed.scheme} backend is not available in this version") from None
        extra = _EXTRAS.get(parsed.scheme)
        if extra is None:  # the file and memory backends need nothing the core does not
            raise
        raise BackendUnavailable(
            f"the {parsed.scheme} backend needs the {extra!r} extra, which is not installed ({exc}): "
            f"pip install 'discovery-sync[{extra}]'"
        ) from None
    # bytes that are not UTF-8 stay the bytes they encode (as os.fsdecode does), not U+FFFD
    path = urllib.parse.unquote(parsed.path, errors="surrogateescape")
    from_url: Callable[[str, str, dict[str, Any]], Discovery] = backend.from_url  # every backend module has one
    return from_url(parsed.netloc, path, query)
