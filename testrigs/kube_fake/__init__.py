"""An in-process fake Kubernetes API server for tests (plain HTTP on loopback; any bearer token
accepted unless :meth:`FakeKubeServer.set_valid_tokens` narrows them).

It speaks enough of the real REST protocol for the unmodified official ``kubernetes`` client and
for kube-rs: discovery, namespaces, list (selectors, pagination), get, create, replace, merge patch,
server-side apply with managed fields, delete with owner-reference garbage collection, and
watches (replay from a watch cache per resource, 410 beyond it, bookmarks only after a change), with
a real server's lifecycle (restart, graceful shutdown) and controllers (EndpointSlices, garbage
collection). Writes and reads follow the recorded answers of kube-apiserver 1.28
(``tests/fixtures/kube-apiserver-1.28``): structured-merge-diff's apply (a map its manager emptied
becomes null), the CRD schema's pruning and validation, JSON numbers and text as the Go server
writes them. See :class:`FakeKubeServer`.
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
