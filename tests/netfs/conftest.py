from __future__ import annotations

from collections.abc import Iterator

import pytest

from testrigs.sshfs import DEBIAN_PACKAGES, SshfsRig, missing_tools


def require_sshfs() -> None:
    """Fail (never skip) where the rig cannot run: CI installs its packages."""
    missing = missing_tools()
    if missing:
        pytest.fail(
            f"the netfs tests need the Debian packages {' and '.join(DEBIAN_PACKAGES)} "
            f"(apt-get install -y {' '.join(DEBIAN_PACKAGES)}) and /dev/fuse; missing: {', '.join(missing)}",
            pytrace=False,
        )


@pytest.fixture
def sshfs_tools() -> None:
    """For tests that make rigs of their own."""
    require_sshfs()


@pytest.fixture(scope="module")
def sshfs_rig() -> Iterator[SshfsRig]:
    """A started rig: one export directory, ``mount_a`` (caches off) and ``mount_b`` (sshfs
    defaults) over a loopback-only sshd; closed (unmounted, sshd stopped) at the end."""
    require_sshfs()
    rig = SshfsRig()
    try:
        rig.start()
        yield rig
    finally:
        rig.close()
