"""Key layout of the etcd backend: a record's key is ``{root prefix}{bucket}/{identity path}`` (docs/design.md §3)."""

from __future__ import annotations

from discovery_sync.errors import ValidationError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind, id_from_path
from discovery_sync.queries import Query

from .wire import prefix_end


class KeyLayout:
    def __init__(self, root_prefix: str = "") -> None:
        if root_prefix and not root_prefix.endswith("/"):
            root_prefix += "/"
        self.root = root_prefix

    def key(self, instance_id: DiscoveryInstanceId) -> bytes:
        return f"{self.root}{instance_id.kind.bucket}/{instance_id.to_path()}".encode()

    def query_range(self, query: Query) -> tuple[bytes, bytes]:
        prefix = f"{self.root}{query.key_prefix()}".encode()
        return prefix, prefix_end(prefix)

    def everything(self) -> tuple[bytes, bytes]:
        prefix = f"{self.root}v1/".encode()
        return prefix, prefix_end(prefix)

    def kind_of(self, key: bytes) -> RecordKind | None:
        text = key.decode("utf-8", "replace")[len(self.root) :]
        for kind in RecordKind:
            if text.startswith(kind.bucket + "/"):
                return kind
        return None

    def id_of(self, key: bytes) -> DiscoveryInstanceId | None:
        """The identity a key encodes, or None for keys that are not records."""
        kind = self.kind_of(key)
        if kind is None:
            return None
        try:
            return id_from_path(kind, key.decode("utf-8")[len(self.root) + len(kind.bucket) + 1 :])
        except (ValidationError, UnicodeDecodeError):
            return None
