"""What one listing of a bucket directory shows: the first half of every scan (:mod:`.view`).

A survey reads the directory without holding the view's lock: names, and a ``stat`` of each
file the view already knows (new files are opened later, which tells all a stat would). Whether
the directory changed at all since the last survey is told by its own (inode, mtime, ctime),
but only once its mtime is older than the filesystem's timestamp granularity (:func:`settled`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from .directory import listing
from .names import describe_entry, may_be_record
from .owner_lock import OwnerState
from .wire import stat_regular

#: how much older than a scan the directory's mtime must be for any later change to give it
#: another mtime: timestamps of whole seconds may come from a filesystem that keeps seconds
#: (ext3, HFS+) or two (FAT); others tick by the kernel's coarse clock (a jiffy, 1-10 ms)
SETTLED_NS = 2_000_000_000
FINE_SETTLED_NS = 100_000_000

#: a survey tells that the store answered (``answered``) after every this many entries: a deep
#: scan of 50k records on a loaded machine may take longer than a stall bound, yet answers all along
ANSWERED_EVERY = 256

DirState = tuple[int, int, int]  # a directory's (inode, mtime_ns, ctime_ns)
_HELD = OwnerState.HELD


def settled(began_ns: int, mtime_ns: int) -> bool:
    """Whether a change made after ``began_ns`` (the kernel's wall clock, never an injected one:
    it is compared with timestamps the kernel wrote) gives a directory whose mtime is
    ``mtime_ns`` another mtime."""
    return began_ns - mtime_ns > (SETTLED_NS if mtime_ns % 1_000_000_000 == 0 else FINE_SETTLED_NS)


def now_ns() -> int:
    """The kernel's wall clock, as directory mtimes are stamped."""
    return time.time_ns()


class Known(Protocol):
    """What a survey needs of a file the view holds."""

    ino: int
    owner: OwnerState


@dataclass(slots=True)
class Survey:
    """One listing: ``found`` maps each record file under the prefix to its stat (None: new, see
    ``unread``; or one of ``touched``; or a record whose owner holds its lock, unchanged as far as
    the listing shows, when the survey skips those). A survey of the whole directory (``whole``) also holds
    its leftover files and foreign entries."""

    state: DirState  # the directory's, when listed
    began_ns: int  # when the listing began (kernel wall clock)
    whole: bool
    found: dict[str, os.stat_result | None] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)  # new record files: read, not stat'ed
    leftovers: dict[str, os.stat_result] = field(default_factory=dict)
    foreign: dict[str, str] = field(default_factory=dict)  # name -> what it is
    touched: list[str] = field(default_factory=list)  # this client's own files, not stat'ed


def dir_state(dir_fd: int) -> DirState:
    st = os.fstat(dir_fd)
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def survey(
    dir_fd: int,
    name_prefix: str,
    known: Mapping[str, Known],
    *,
    state: DirState,
    began_ns: int,
    whole: bool,
    own: Mapping[str, int] | None = None,
    skip_held: bool = False,
    answered: Callable[[], None] | None = None,
) -> Survey:
    """List the directory: regular files with record names (and the prefix). Known ones come with
    their stat; new ones are listed in ``unread``. ``own``: this client's files (name -> the inode
    it wrote); one whose listing and view show that inode is listed in ``touched`` instead of
    being stat-ed. ``skip_held``: neither is a known record whose owner holds its lock and whose
    listing shows the inode the view holds (the kernel says its writer lives: its mtime says
    nothing more). A ``whole`` survey also collects leftover files and foreign entries.
    ``state`` is the directory's (:func:`dir_state`), taken after ``began_ns`` (:func:`now_ns`).
    ``answered()`` is called after every ANSWERED_EVERY entries listed (the store answers)."""
    found = Survey(state, began_ns, whole)
    with listing(dir_fd) as entries:
        while batch := list(islice(entries, ANSWERED_EVERY)):
            for entry in batch:
                _sort(found, entry, name_prefix, known, own, skip_held)
            if answered is not None:
                answered()
    return found


def _sort(
    found: Survey,
    entry: os.DirEntry[str],
    name_prefix: str,
    known: Mapping[str, Known],
    own: Mapping[str, int] | None,
    skip_held: bool,
) -> None:
    """Put one directory entry where it belongs in ``found``."""
    name = entry.name
    cached = known.get(name)
    if cached is not None:  # a record name already, and no dot file
        candidate = not name_prefix or name.startswith(name_prefix)
        if candidate and cached.ino == entry.inode():
            if own is not None and own.get(name) == cached.ino:
                found.found[name] = None
                found.touched.append(name)
                return
            if skip_held and cached.owner is _HELD:
                found.found[name] = None
                return
    else:
        candidate = name.startswith(name_prefix) and not name.startswith(".") and may_be_record(name)
        # the type the listing gives costs no system call (DT_UNKNOWN falls back to lstat)
        with contextlib.suppress(OSError):
            if candidate and entry.is_file(follow_symlinks=False):
                found.found[name] = None
                found.unread.append(name)
                return
    if not candidate and not found.whole:
        return
    try:
        st = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError:  # judged again by the next scan; what the view knows stays
        if candidate:
            found.found[name] = None
        return
    if candidate and stat.S_ISREG(st.st_mode):
        found.found[name] = st
    elif found.whole:
        problem = describe_entry(name, st)
        if problem is None and name.startswith("."):
            found.leftovers[name] = st
        elif problem is not None:
            found.foreign[name] = problem


def gone(dir_fd: int, name: str) -> bool:
    """No regular file under ``name`` now (opened, so a network mount asks its server)."""
    try:
        return stat_regular(dir_fd, name) is None
    except OSError:  # there, though this reader may not open it
        return False
