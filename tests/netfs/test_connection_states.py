"""Connection state of a file-store client whose mount stalls: the rig's file server stops
answering (SIGSTOP of its SFTP sessions), the heartbeat's touch and the rescans wait in the
kernel, and the client is SUSPENDED all the same once the beat has been under way for
max(2 s, its interval), or a rescan for max(2 s, 8 usual rescans), whichever comes first;
RECONNECTED when the server answers again and they end (backends/file/link.py). Real time: a
beat blocked in the kernel cannot wait on a manual clock."""

from __future__ import annotations

import queue
import threading
import time
import uuid

import discovery_sync as ds
from discovery_sync.connection import STATE_THREAD
from testrigs.helpers import endpoint_spec
from testrigs.sshfs import SshfsRig

# heartbeats every 3 s, a beat under way for 3 s is stalled, LOST after 9 s without a good beat:
# SUSPENDED comes at most 6 s after the last good beat began, 3 s before LOST could
TTL = 9.0
STALLED_WITHIN = TTL / 3 + TTL / 3 + 5.0  # a beat starts within an interval, is stalled after one more
THAWED_WITHIN = 10.0  # the stalled beat ends as soon as the server answers


def test_a_frozen_file_server_suspends_the_writer_and_the_thaw_reconnects_it(sshfs_rig: SshfsRig):
    name = f"store-{uuid.uuid4().hex[:12]}"
    (sshfs_rig.export_dir / name).mkdir()
    client = ds.connect(f"file://{sshfs_rig.mount_a / name}?mode=shared&ttl={TTL:g}")  # caches off
    try:
        seen: queue.Queue[tuple[ds.StateChange, str]] = queue.Queue()
        client.add_state_listener(lambda change: seen.put((change, threading.current_thread().name)))
        record = client.register(endpoint_spec())
        with sshfs_rig.frozen():
            frozen_at = time.monotonic()
            suspended, thread = seen.get(timeout=STALLED_WITHIN)
            assert client.status()["connection"] == "suspended"  # status() asks nothing of the store
            beat = client.status()["heartbeat"]
        stalled_for = time.monotonic() - frozen_at
        assert thread == STATE_THREAD
        assert (suspended.previous, suspended.state) == (ds.ConnectionState.CONNECTED, ds.ConnectionState.SUSPENDED)
        assert "stalled by the store" in suspended.reason  # the beat's or a rescan's
        assert beat["alive"] and beat["failures"] == 0  # the beat did not fail: it waits in the kernel
        reconnected, _ = seen.get(timeout=THAWED_WITHIN)
        assert (reconnected.previous, reconnected.state, reconnected.rewritten) == (
            ds.ConnectionState.SUSPENDED,
            ds.ConnectionState.RECONNECTED,
            (),
        )
        assert client.list(ds.Query.endpoints()) == [record]
        assert seen.empty()
        print(f"SUSPENDED {stalled_for:.1f} s after the server froze")
    finally:
        client.shutdown()
