"""The Kubernetes manifests the package ships (``discovery_sync/backends/kube/manifests/*.yaml``),
as text and, for ``manifests -o json``, as data.

The manifests are read with a reader of the block YAML they are written in (mappings,
sequences, flow sequences of scalars, quoted and plain scalars, comments, ``---``), so that the
CLI needs no YAML library; anything else in them is refused (a test checks that PyYAML reads
every shipped manifest as this reader does).
"""

from __future__ import annotations

import importlib.resources
import json
import re
from typing import Any

import discovery_sync as ds

MANIFESTS = {"crd": "crd.yaml", "rbac": "rbac.yaml"}
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None, "~": None}


def manifest_texts(names: list[str]) -> list[str]:
    """The texts of the named manifests (``crd``, ``rbac``), as the package ships them."""
    # discovery_sync.backends, not .kube: reading a file must not import the Kubernetes client
    folder = importlib.resources.files("discovery_sync.backends").joinpath("kube", "manifests")
    return [folder.joinpath(MANIFESTS[name]).read_text(encoding="utf-8") for name in names]


def manifest_documents(names: list[str]) -> list[Any]:
    """The YAML documents of the named manifests, as data (one per Kubernetes object)."""
    return [document for text in manifest_texts(names) for document in read_documents(text)]


def read_documents(text: str) -> list[Any]:
    """The documents of a block-YAML text (see the module's docstring), empty ones left out."""
    documents: list[list[tuple[int, str]]] = [[]]
    for line in text.splitlines():
        if line.rstrip() == "---":
            documents.append([])
        elif line.strip() and not line.lstrip().startswith("#"):
            documents[-1].append((len(line) - len(line.lstrip(" ")), line.strip()))
    parsed = []
    for lines in documents:
        if lines:
            value, end = _block(lines, 0, lines[0][0])
            if end != len(lines):
                raise _unsupported(lines[end][1])
            parsed.append(value)
    return parsed


def _unsupported(line: str) -> ds.DiscoveryError:
    return ds.ValidationError(f"the shipped manifests hold YAML this reader does not take: {line!r}")


def _block(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[Any, int]:
    """The mapping or sequence whose lines start at ``at`` with ``indent``; the line after it."""
    if lines[at][1].startswith("- ") or lines[at][1] == "-":
        return _sequence(lines, at, indent)
    return _mapping(lines, at, indent)


def _sequence(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[list[Any], int]:
    items = []
    while at < len(lines) and lines[at][0] == indent and lines[at][1].startswith("-"):
        rest = lines[at][1][1:].strip()
        if _is_entry(rest):  # "- key: value": a mapping whose keys line up after the dash
            lines = [*lines[:at], (indent + 2, rest), *lines[at + 1 :]]
            item, at = _mapping(lines, at, indent + 2)
        elif rest:
            item, at = _scalar(rest), at + 1
        elif at + 1 < len(lines) and lines[at + 1][0] > indent:
            item, at = _block(lines, at + 1, lines[at + 1][0])
        else:
            item, at = None, at + 1
        items.append(item)
    return items, at


def _is_entry(text: str) -> bool:
    return not text.startswith(("[", '"', "'")) and (": " in text or text.endswith(":"))


def _mapping(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[dict[str, Any], int]:
    mapping: dict[str, Any] = {}
    while at < len(lines) and lines[at][0] == indent:
        text = lines[at][1]
        if not _is_entry(text):
            raise _unsupported(text)
        key, _, rest = text.partition(":")
        rest = rest.strip()
        at += 1
        if rest:
            mapping[_scalar(key)] = _scalar(rest)
        elif at < len(lines) and (lines[at][0] > indent or lines[at][1].startswith("- ")):
            mapping[_scalar(key)], at = _block(lines, at, lines[at][0])
        else:
            mapping[_scalar(key)] = None
    return mapping, at


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(item) for item in inner.split(",")] if inner else []
    if text.startswith('"') and text.endswith('"') and len(text) > 1:
        return json.loads(text)
    if text.startswith("'") and text.endswith("'") and len(text) > 1:
        return text[1:-1].replace("''", "'")
    if text in _WORDS:
        return _WORDS[text]
    if _INT.fullmatch(text):
        return int(text)
    if text[:1] in "[]{}&*!|>%@`#'\"," or " #" in text:
        raise _unsupported(text)
    return text
