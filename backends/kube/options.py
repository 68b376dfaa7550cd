"""The options of ``kube://`` URLs and of ``KubeDiscovery``'s keyword arguments.

Identity options override the Downward-API files and the environment (see :mod:`.identity`).
``request_timeout`` (None: 10 s to connect, 30 s to answer) bounds each API request, and only
the connect phase of a watch; ``connect_timeout`` (default 10 s; ``none``/None: without limit)
how long connecting keeps trying to reach the API server in all; ``read_only`` makes a client
that never writes and needs no identity.
"""

from __future__ import annotations

from discovery_sync.logical_id import PARSERS as LOGICAL_ID_PARSERS
from discovery_sync.options import OptionSet, boolean, choice, connect_timeout, duration, optional, path, text

from .identity import MODES

IDENTITY_OPTIONS = ("pod_name", "pod_uid", "namespace", "container_name", "mode")
timeout = duration(0.0, exclusive_minimum=True)
OPTIONS = OptionSet(
    "kube",
    {
        "pod_name": text,
        "pod_uid": text,
        "namespace": text,
        "container_name": text,
        "mode": choice(*MODES),
        "podinfo_dir": path,
        "kubeconfig": path,
        "ready_timeout": timeout,
        "write_timeout": timeout,
        "sync_timeout": timeout,
        "consistent_reads": boolean,
        "request_timeout": optional(timeout),
        "connect_timeout": connect_timeout,
        "read_only": boolean,
        # accepted so that a logical id is refused with the reason (see from_url), not as unknown
        **LOGICAL_ID_PARSERS,
    },
)
