"""An in-process fake Kubernetes API server for tests (plain HTTP on loopback, no auth).

It speaks enough of the real REST protocol for the unmodified official ``kubernetes`` client and
for kube-rs: discovery, list (selectors, pagination), get, create, replace, merge patch,
server-side apply with managed fields, delete with owner-reference garbage collection, and
watches (replay, 410 on compacted history, bookmarks). See :class:`FakeKubeServer`.
"""

from .objects import DISCOVERY_LABEL
from .resources import ENDPOINT_SLICES, NAMESPACES, PODS, WORKER_METADATA, ResourceType
from .server import AUTO_SLICE_NAME, FakeKubeServer, RecordedRequest

__all__ = [
    "AUTO_SLICE_NAME",
    "DISCOVERY_LABEL",
    "ENDPOINT_SLICES",
    "NAMESPACES",
    "PODS",
    "WORKER_METADATA",
    "FakeKubeServer",
    "RecordedRequest",
    "ResourceType",
]
