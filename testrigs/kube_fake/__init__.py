"""An in-process fake Kubernetes API server for tests (plain HTTP on loopback, no auth).

It speaks enough of the real REST protocol for the unmodified official ``kubernetes`` client and
for kube-rs: discovery, list (selectors, pagination), get, create, replace, merge patch,
server-side apply with managed fields, delete with owner-reference garbage collection, and
watches (replay from a watch cache per resource, 410 beyond it, bookmarks only after a change), with
a real server's lifecycle (restart, graceful shutdown) and controllers (EndpointSlices, garbage
collection) as a recorded kube-apiserver 1.28 behaves. See :class:`FakeKubeServer`.
"""

from .objects import DISCOVERY_LABEL
from .resources import ENDPOINT_SLICES, PODS, WORKER_METADATA, ResourceType
from .server import AUTO_SLICE_NAME, FakeKubeServer, RecordedRequest

__all__ = [
    "AUTO_SLICE_NAME",
    "DISCOVERY_LABEL",
    "ENDPOINT_SLICES",
    "PODS",
    "WORKER_METADATA",
    "FakeKubeServer",
    "RecordedRequest",
    "ResourceType",
]
