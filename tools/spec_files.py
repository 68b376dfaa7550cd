"""Reading the spec file of ``discovery-sync register``: one JSON spec, or a non-empty list of them."""

from __future__ import annotations

import errno
import sys
from typing import Any

import orjson

import discovery_sync as ds
from discovery_sync.specs import DiscoverySpec

MAX_SPEC_BYTES = 64 << 20  # far above any spec list; reading stops there (register /dev/zero)
_OPEN_ERRORS = {
    errno.ENOENT: "it does not exist",
    errno.EISDIR: "it is a directory",
    errno.EACCES: "permission denied",
    errno.ENOTDIR: "a part of its path is not a directory",
}


def read_spec_source(path: str) -> bytes:
    """The bytes of the spec file (``-``: stdin); an unreadable or oversized file (``/dev/zero``)
    is a ValidationError saying why."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1)
        else:
            with open(path, "rb") as file:
                data = file.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        reason = _OPEN_ERRORS.get(exc.errno or 0, exc.strerror or str(exc))
        raise ds.ValidationError(
            f"cannot read the spec file {path}: {reason}; give the path of a JSON spec file, or - for stdin"
        ) from None
    if len(data) > MAX_SPEC_BYTES:
        raise ds.ValidationError(f"the spec file {path} is larger than {MAX_SPEC_BYTES >> 20} MiB: it cannot be a spec")
    return data


def load_specs(path: str) -> list[DiscoverySpec]:
    """Read and check the spec(s) of ``register``: one JSON object, or a non-empty list of them."""
    where = "the spec on stdin" if path == "-" else f"the spec file {path}"
    source = read_spec_source(path)
    if not source.strip():
        raise ds.ValidationError(f"{where} is empty; it must hold a spec as a JSON object (or a list of them)")
    try:
        data = orjson.loads(source)
    except orjson.JSONDecodeError as exc:
        raise ds.ValidationError(f"{where} is not valid JSON: {exc}") from None
    if isinstance(data, list):
        if not data:
            raise ds.ValidationError(f"{where} holds an empty list: there is nothing to register")
        return [_spec(item, f"{where}, item {index}") for index, item in enumerate(data)]
    return [_spec(data, where)]


def _spec(data: Any, where: str) -> DiscoverySpec:
    """One spec parsed from JSON data; a ValidationError names where the bad spec came from."""
    try:
        return ds.spec_from_dict(data)
    except ds.ValidationError as exc:
        raise ds.ValidationError(f"{where} is not a valid spec (see 'discovery-sync register --help'): {exc}") from None
