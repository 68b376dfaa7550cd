"""The contract-suite rig "file-sshfs": one store shared by two hosts, the rig's two sshfs mounts
of one export directory, in shared mode (polling observer, soft locks). Clients alternate
between the hosts: the first connects through mount A, the next through mount B, and so on, so
every test that uses two clients has one on each host: what one writes the other must see
through another sshfs connection, flock is not shared between them, a lost create race can come
back as EPERM.

Mount B has caches off here, like mount A (about NFS ``noac``): the suite's ``list()`` right
after another host's write expects that write, which no cache window allows. To run the suite
with mount B on sshfs's default caches (20 s), set ``DISCOVERY_SYNC_CONTRACT_SSHFS_B=""`` (or
other sshfs options, e.g. ``dcache_timeout=2``); the event timeout then grows by the window.
Measured: caches off 7 s, all pass; ``dcache_timeout=2`` 25 s, defaults 150 s, and both fail
``test_two_watches_of_one_client_are_independent`` (a list right after another host's write)
and — always on defaults, sometimes with 2 s — ``test_watch_reports_every_change_of_other_clients``
(a Resync after the Removed events: the polling observer's re-read of a deleted file is
answered from the stale attribute cache, so only a later rescan drops it, as a missed change).
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest

import discovery_sync as ds
from tests.contract.conftest import EVENT_TIMEOUT, StoreRig
from tests.netfs.sshfs_rig import CACHE_OFF, SshfsRig

B_CACHE_OPTIONS = os.environ.get("DISCOVERY_SYNC_CONTRACT_SSHFS_B", CACHE_OFF)
CACHE_WINDOW = 0.0 if B_CACHE_OPTIONS == CACHE_OFF else 21.0  # sshfs's 20 s plus the kernel's 1 s
TTL = 60.0  # longer than any contract test, and than doctor's advice for a 20 s cache window
OPTIONS = "mode=shared&ttl={ttl:g}&rescan_interval=0.2&poll_interval=0.1"


class ContractMounts(SshfsRig):
    """The sshfs rig with mount B's cache options chosen by ``B_CACHE_OPTIONS``."""

    def _mount(self, mount_point: Path, cache_options: str | None, deadline: float) -> None:
        if mount_point == self.mount_b:
            cache_options = B_CACHE_OPTIONS or None
        super()._mount(mount_point, cache_options, deadline)


def start_mounts() -> SshfsRig:
    from tests.netfs.conftest import require_sshfs

    require_sshfs()
    rig = ContractMounts()
    rig.start()
    return rig


def sshfs_rig(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRig:
    mounts: SshfsRig = request.getfixturevalue("sshfs_contract_mounts")
    name = f"contract-{uuid.uuid4().hex[:12]}"
    (mounts.export_dir / name).mkdir()
    hosts = itertools.cycle([mounts.mount_a, mounts.mount_b])
    options = OPTIONS.format(ttl=TTL)
    return StoreRig(
        "file-sshfs",
        lambda: ds.connect(f"file://{next(hosts) / name}?{options}"),
        quiet_period=0.6,
        event_timeout=EVENT_TIMEOUT + CACHE_WINDOW,
    )
