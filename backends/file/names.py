"""What the entries of a bucket directory are, judged by their names.

A bucket holds, by design, only records and the temp files of their writers. Anything can
appear there all the same (files of other tools, names that are not percent-encoding, names
that are not UTF-8), so every name is classified before it costs anything:

* a *record name* is the file name :func:`record_name` gives an identity of the bucket's kind:
  ASCII letters, digits and ``%XX`` escapes, decoding to a valid identity path, in canonical
  form (re-encoding it gives the same name);
* a *leftover* is a dot file a writer or the filesystem leaves behind (``LEFTOVER_PREFIXES``);
* everything else is *foreign*: never read, never deleted, reported once.
"""

from __future__ import annotations

import os
import re
import stat

from discovery_sync.errors import ValidationError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind, id_from_path
from discovery_sync.model import DiscoveryInstance, instance_from_json
from discovery_sync.pathcodec import decode, encode_filename
from discovery_sync.validation import printable as printable  # re-exported: messages name files with it

from .wire import LEFTOVER_PREFIXES

_RECORD_ALPHABET = re.compile(r"[A-Za-z0-9%]+")


def record_name(instance_id: DiscoveryInstanceId) -> str:
    """The file name of a record: its identity path percent-encoded (no length check)."""
    return encode_filename(instance_id.to_path())


def may_be_record(name: str) -> bool:
    """Cheap first test: only the characters a record name can hold. A name that passes may
    still not be a record name: the content's identity must give it back (see the view)."""
    return _RECORD_ALPHABET.fullmatch(name) is not None


def id_of_name(kind: RecordKind, name: str) -> DiscoveryInstanceId | None:
    """The identity a file name stands for in a bucket of ``kind``, or None when the name is
    not the canonical record name of any identity of that kind."""
    if not may_be_record(name):
        return None
    try:
        instance_id = id_from_path(kind, decode(name))
    except ValidationError:
        return None
    return instance_id if record_name(instance_id) == name else None


def record_from(
    raw: bytes, kind: RecordKind, name: str, *, known: DiscoveryInstanceId | None = None
) -> DiscoveryInstance:
    """The record stored as ``raw`` under ``name`` in a bucket of ``kind``; ValidationError when
    the bytes are not a record of that kind, or name another identity than the file name (a copy
    under another name, or a file planted to shadow another worker's record). ``known``: an
    identity already checked against this name (its check is skipped)."""
    instance = instance_from_json(raw)
    if instance.kind is not kind:
        raise ValidationError(f"a {instance.kind.value} record does not belong in {kind.bucket}")
    instance_id = instance.id()
    if (known is None or instance_id != known) and record_name(instance_id) != name:
        raise ValidationError(
            f"it holds the record {instance_id.to_path()!r}, whose file name is {record_name(instance_id)!r}; "
            "a record is served only under its own name"
        )
    return instance


def describe_entry(name: str, st: os.stat_result | None) -> str | None:
    """What makes a directory entry foreign (None: it is a record or leftover candidate)."""
    if st is not None and not stat.S_ISREG(st.st_mode):
        return _kind_of(st)
    if name.startswith("."):
        return None if is_leftover(name) else "a dot file that is not a leftover of a writer"
    if not may_be_record(name):
        return "not a record name (records are named by percent-encoding, letters, digits and %XX only)"
    return None


def _kind_of(st: os.stat_result) -> str:
    mode = st.st_mode
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def is_leftover(name: str) -> bool:
    """A temp file of a writer, or a network filesystem's copy of a file deleted while open."""
    return name.startswith(LEFTOVER_PREFIXES)
