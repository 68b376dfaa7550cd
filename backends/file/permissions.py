"""Who else can change a store: ownership and modes of its directories.

Whoever can write to a bucket directory can add records to it; without the sticky bit they can
also replace or delete other users' records, and the owner of a directory always can. A store
is *unsafe* for this user when another user (not root) owns one of its directories, or when one
is group- or world-writable without the sticky bit. Clients warn about it on connect (or refuse
it with ``permissions=refuse``) and ``doctor`` lists it.

What clients create is deliberate (see :mod:`.directory` and :mod:`.wire`): directories
0755 and record files 0644 whatever the umask (every local user can discover, only the writer
can change); below a directory an administrator shared on purpose (group- or world-writable
*with* the sticky bit) new directories copy its mode.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path

from .directory import open_below

PERMISSION_POLICIES = ("warn", "refuse")


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"group {grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def judge(display: Path | str, st: os.stat_result, me: int | None = None) -> list[str]:
    """What is unsafe about one directory of the store (empty: nothing)."""
    me = os.geteuid() if me is None else me
    problems = []
    if st.st_uid not in (me, 0):
        problems.append(f"{display} is owned by {_user(st.st_uid)}, who can add, replace or delete any record in it")
    mode = stat.S_IMODE(st.st_mode)
    if not mode & stat.S_ISVTX:
        if mode & stat.S_IWOTH:
            problems.append(
                f"{display} is world-writable without the sticky bit (mode {mode:04o}): any local user can add, "
                "replace or delete records here (chmod o-w, or chmod +t to keep it shared)"
            )
        elif mode & stat.S_IWGRP:
            problems.append(
                f"{display} is group-writable without the sticky bit (mode {mode:04o}): any user of "
                f"{_group(st.st_gid)} can add, replace or delete records here (chmod g-w, or chmod +t)"
            )
    return problems


def store_directories(root: Path, relatives: Iterable[str]) -> list[tuple[Path, os.stat_result]]:
    """The root and every directory on the way to each of ``relatives`` that exists, with its
    stat (symlinks below the root are not followed; they are refused elsewhere)."""
    found: dict[Path, os.stat_result] = {}
    with contextlib.suppress(OSError):
        found[root] = os.stat(root)
    for relative in relatives:
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            below = "/".join(parts[:depth])
            if root / below in found:
                continue
            try:
                fd = open_below(root, below)
            except Exception:  # missing, a symlink, unreadable: not judged here
                break
            try:
                found[root / below] = os.fstat(fd)
            finally:
                os.close(fd)
    return list(found.items())


def unsafe(root: Path, relatives: Iterable[str]) -> list[str]:
    """Everything that lets another local user change records of this store."""
    problems: list[str] = []
    for display, st in store_directories(root, relatives):
        problems += judge(display, st)
    return problems
