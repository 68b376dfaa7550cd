"""Where things live in a file store (identical to the reference runtime's FileStore).

``root/v1/instances/``, ``root/v1/mdc/``, ``root/v1/event_channels/``, ``root/v1/event_sources/``
hold one file per record, named by percent-encoding its identity path (every byte that is not
an ASCII letter or digit becomes ``%XX``). Soft locks live in ``root/.locks/``: nothing but
records (and the writers' ``.tmp_*`` files) ever goes in a bucket directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from discovery_sync.errors import ValidationError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.options import path
from discovery_sync.pathcodec import encode_filename
from discovery_sync.queries import Query

from .names import record_name

MAX_FILENAME_BYTES = 255
DEFAULT_DIRNAME = "dynamo_store_kv"


def default_root() -> Path:
    """``DYN_FILE_KV``, else ``{tempdir}/dynamo_store_kv`` (where reference workers meet by default)."""
    configured = os.environ.get("DYN_FILE_KV", "").strip()
    return Path(path(configured, "DYN_FILE_KV")) if configured else Path(tempfile.gettempdir()) / DEFAULT_DIRNAME


LOCK_DIRNAME = ".locks"


class StoreLayout:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.buckets = {kind: self.root / kind.bucket for kind in RecordKind}
        self.lock_dir = self.root / LOCK_DIRNAME

    @staticmethod
    def relatives() -> list[str]:
        """Every directory of the store below its root: the buckets, then the lock directory."""
        return [kind.bucket for kind in RecordKind] + [LOCK_DIRNAME]

    def file_name(self, instance_id: DiscoveryInstanceId) -> str:
        name = record_name(instance_id)
        if len(name) > MAX_FILENAME_BYTES:
            raise ValidationError(
                f"{instance_id.kind.value} {instance_id.to_path()!r} is too long for the file store: its file "
                f"name would be {len(name)} bytes, the limit is {MAX_FILENAME_BYTES}; use shorter names"
            )
        return name

    def path_of(self, instance_id: DiscoveryInstanceId) -> Path:
        return self.buckets[instance_id.kind] / self.file_name(instance_id)

    @staticmethod
    def name_prefix(query: Query) -> str:
        """The file-name prefix shared by every record a query can match."""
        relative = query.key_prefix()[len(query.kind.bucket) + 1 :]
        return encode_filename(relative)

    @staticmethod
    def lock_name(key: str) -> str:
        """The soft-lock marker's file name (in the lock directory) for ``key``, a bucket name for instance."""
        return f"{encode_filename(key)}.lock"
