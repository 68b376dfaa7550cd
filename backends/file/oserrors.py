"""The operating system's errors on a store's files, as the BackendUnavailable a caller gets.

A full disk (no space or no inodes), an exhausted quota and a read-only filesystem are named as
such, with what to do about them; any other error keeps the system's own words.
"""

from __future__ import annotations

import errno

from discovery_sync.errors import BackendUnavailable

#: errors that say a write needs room the filesystem does not give (a new file, a new block)
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)

_ADVICE = {
    errno.ENOSPC: (
        "the filesystem holding the store is full",
        "no space or no inodes are left: free some (see 'df -h' and 'df -i' on the store) and retry",
    ),
    errno.EDQUOT: (
        "the disk quota of this user on the store's filesystem is exhausted",
        "free space within the quota or raise the quota, and retry",
    ),
    errno.EROFS: (
        "the filesystem holding the store is read-only",
        "remount it read-write and retry, or connect with read_only=true to only read the store",
    ),
}


def storage_error(exc: OSError, doing: str) -> BackendUnavailable:
    """``doing`` (``"cannot write /store/v1/mdc/x"``) failed with ``exc``: the error to raise,
    ``from exc``."""
    advice = _ADVICE.get(exc.errno or 0)
    if advice is None:
        return BackendUnavailable(f"{doing}: {exc}")
    what, remedy = advice
    return BackendUnavailable(f"{doing}: {what} ({exc.strerror}, errno {errno.errorcode[exc.errno or 0]}); {remedy}")
