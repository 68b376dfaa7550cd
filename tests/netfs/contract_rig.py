"""The contract-suite rig "file-sshfs": one store shared by two hosts, the rig's two sshfs mounts
of one export directory, in shared mode (polling observer, soft locks). Clients alternate
between the hosts: the first connects through mount A, the next through mount B, and so on, so
every test that uses two clients has one on each host: what one writes the other must see
through another sshfs connection, flock is not shared between them, a lost create race can come
back as EPERM.

Mount B keeps sshfs's default caches (listings and attributes 20 s, then the kernel's 1 s), as
the issue asks: events from the other host may come a cache window late, so the rig's event
timeout grows by that window; ``list()`` refreshes the mount's listing first, so it sees the
other host's completed registrations at once. ``DISCOVERY_SYNC_CONTRACT_SSHFS_B`` gives mount B
other sshfs options (e.g. ``dir_cache=no,attr_timeout=0,entry_timeout=0``).
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest

import discovery_sync as ds
from testrigs.sshfs import CACHE_OFF, SshfsRig
from tests.contract.conftest import EVENT_TIMEOUT, StoreRig

B_CACHE_OPTIONS = os.environ.get("DISCOVERY_SYNC_CONTRACT_SSHFS_B", "")
CACHE_WINDOW = 0.0 if B_CACHE_OPTIONS == CACHE_OFF else 21.0  # sshfs's 20 s plus the kernel's 1 s
TTL = 5.0  # as the other file rigs: readers on B allow for the cache window on top
OPTIONS = "mode=shared&ttl={ttl:g}&rescan_interval=0.2&poll_interval=0.1&uniform_ttl=true"


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
        lambda **kw: ds.connect(f"file://{next(hosts) / name}?{options}", **kw),
        quiet_period=0.6,
        event_timeout=EVENT_TIMEOUT + CACHE_WINDOW,
        connect_reader=lambda: ds.connect(f"file://{next(hosts) / name}?{options}&read_only=true"),
    )
