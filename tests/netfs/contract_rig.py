"""The contract-suite rig "file-sshfs": one store shared by two hosts, the rig's two sshfs mounts
of one export directory, in shared mode (polling observer, soft locks). Clients alternate
between the hosts: the first connects through mount A, the next through mount B, and so on, so
every test that uses two clients has one on each host: what one writes the other must see
through another sshfs connection, flock is not shared between them, a lost create race can come
back as EPERM.

Mount B caches as sshfs does by default, but for a shorter time: its listing and attribute cache
keeps entries 2 s (``dcache_timeout=2``; the default is 20 s), then the kernel 1 s more, so
events from the other host may come a 3 s cache window late and the rig's event timeout grows by
that window; ``list()`` refreshes the mount's listing first, so it sees the other host's
completed registrations at once. Every path a cached mount takes is taken, in a seventh of the
time the default window costs each test; the default 21 s window is exercised by tests/netfs
(``test_sshfs_rig``, ``test_two_hosts``). ``DISCOVERY_SYNC_CONTRACT_SSHFS_B`` gives mount B other
sshfs options (e.g. ``dir_cache=no,attr_timeout=0,entry_timeout=0``, or ``dcache_timeout=20``
for the defaults).
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest
from discovery_sync.backends.file.mounts import mount_of, store_cache_window

import discovery_sync as ds
from testrigs.sshfs import SshfsRig
from tests.contract.conftest import EVENT_TIMEOUT, StoreRig

B_CACHE_OPTIONS = os.environ.get("DISCOVERY_SYNC_CONTRACT_SSHFS_B", "dcache_timeout=2")
TTL = 5.0  # as the other file rigs: readers on B allow for the cache window on top
OPTIONS = "mode=shared&ttl={ttl:g}&rescan_interval=0.2&poll_interval=0.1&uniform_ttl=true"


class ContractMounts(SshfsRig):
    """The sshfs rig with mount B's cache options chosen by ``B_CACHE_OPTIONS``."""

    def _mount(self, mount_point: Path, cache_options: str | None, deadline: float) -> None:
        if mount_point == self.mount_b:
            cache_options = B_CACHE_OPTIONS
        super()._mount(mount_point, cache_options, deadline)


def start_mounts() -> SshfsRig:
    from tests.netfs.conftest import require_sshfs

    require_sshfs()
    rig = ContractMounts()
    rig.start()
    return rig


def cache_window(mount_point: Path) -> float:
    """The window the file store detects for ``mount_point`` (what its readers allow for)."""
    return store_cache_window(mount_of(mount_point), None)


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
        event_timeout=EVENT_TIMEOUT + cache_window(mounts.mount_b),
        connect_reader=lambda: ds.connect(f"file://{next(hosts) / name}?{options}&read_only=true"),
    )
