"""Key layout of the etcd backend: a record's key is ``{root prefix}{bucket}/{identity path}`` (docs/design.md §3)."""

from __future__ import annotations

from discovery_sync.identity import DiscoveryInstanceId
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
