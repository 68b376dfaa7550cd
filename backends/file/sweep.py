"""Removal of what dead owners left in a bucket: only records and leftovers are ever deleted.

A file is deleted only when all of these hold:

* the view judged it dead (its mtime stood still for ``dead_after`` on this reader's clock, or
  its owner's lock was released: :mod:`.owners`);
* its name is the record name of an identity of the bucket (:func:`.names.id_of_name`), or a
  leftover dot file (``.tmp_*``, ``.fuse_hidden*``, ``.nfs*``);
* re-opened (``O_NOFOLLOW | O_NONBLOCK``) right before the unlink, it is still a regular file with
  the inode and mtime the view judged;
* that re-check answered promptly: one that waited for the store (a frozen mount, which may have
  answered the scan from its cache) says nothing about the present, so the view's clocks start
  again and nothing more is judged in this sweep (:data:`.view.STALL_AFTER`);
* judged dead by its owner's released lock: the lock is still released (``probe``), so a new
  owner that took the name since keeps the record.

Everything is done relative to the bucket's descriptor, so nothing outside the bucket can be
reached. Linux has no "unlink this inode": an entry renamed over the name between the re-check
and the unlink (microseconds) would be removed in its place; only a record name is ever at risk.
A deletion the store refuses (read-only mount, another user's file in a sticky directory) is
logged once per file and reported by ``collect_garbage()``; it is not a scan error.

A client that deletes nothing — a read-only one, or any client during a dry run of
``collect_garbage()`` — only *expires* dead records (:meth:`Sweeper.expire`): watches hear
Removed, the files stay.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable

from discovery_sync.clock import SYSTEM, Clock
from discovery_sync.discovery import CollectedGarbage
from discovery_sync.identity import RecordKind

from .directory import DirectoryClosed
from .names import id_of_name, printable
from .owner_lock import OwnerProbe, OwnerState
from .view import STALL_AFTER, BucketView, Changes, Entry
from .wire import remove_record, stat_regular

log = logging.getLogger("discovery_sync.backends.file")


class Sweeper:
    """Sweeps the buckets of one client; remembers the deletions the store refused, so each is
    logged once (and not tried again until the file changes). Like the view's scans, its
    methods return the changes of the view (records Removed, or read again), for the caller to
    publish: call them holding the view's ``publishing`` lock."""

    def __init__(self, clock: Clock = SYSTEM, *, probe: Callable[[int], OwnerProbe] | None = None) -> None:
        """``probe(instance_id)``: the owner lock's state now (None: the store has no owner locks)."""
        self._clock = clock
        self._probe = probe
        self._refused: dict[tuple[str, str], tuple[int, int]] = {}  # (bucket, name) -> (ino, mtime_ns)
        #: dead records removed, by kind (metrics; each changed under its view's ``publishing`` lock)
        self.swept = {kind.value: 0 for kind in RecordKind}

    def sweep(
        self, view: BucketView, owned: frozenset[str], *, retry: bool = False, dry_run: bool = False
    ) -> tuple[CollectedGarbage, Changes]:
        """Remove the dead records and leftovers of ``view``; ``retry`` tries refused ones again;
        ``dry_run`` removes nothing. Returns the keys of the dead records removed (would be
        removed), and the changes of the view."""
        result = CollectedGarbage()
        changes: Changes = []
        dead = view.dead(owned)
        if not dead:
            return result, changes
        with view.directory.use() as dir_fd:
            for name, entry in dead:
                if not self._sweep_one(view, dir_fd, name, entry, result, changes, retry, dry_run):
                    break
                view.progress()  # the store answered the re-check (and the removal)
        if not dry_run:
            self.swept[view.kind.value] += len(result)
        return result, changes

    def expire(self, view: BucketView, owned: frozenset[str]) -> Changes:
        """What a client that deletes nothing (read-only, or in a dry run) does with dead records:
        each one still unchanged is Removed for the watches (:meth:`BucketView.expire`) and left
        in place; leftovers are left alone."""
        dead = [
            (name, entry)
            for name, entry in view.dead(owned)
            if not entry.expired and not name.startswith(".") and id_of_name(view.kind, name) is not None
        ]
        changes: Changes = []
        if not dead:
            return changes
        try:
            with view.directory.use() as dir_fd:
                for name, entry in dead:
                    unchanged = self._recheck(view, dir_fd, name, entry)
                    if unchanged is None:
                        break
                    changes += view.expire(name) if unchanged else view.read_name(name)
        except DirectoryClosed:  # a read-only client's bucket went away: its next scan empties the view
            pass
        return changes

    def _note_refused(self, view: BucketView, name: str, entry: Entry, reason: str) -> None:
        """Remember that this version of a dead file could not be deleted; warn once per version."""
        marker = (view.kind.bucket, name)
        if self._refused.get(marker) != (entry.ino, entry.mtime_ns):
            log.warning(
                "%s/%s has had no heartbeat for %.1f s but stays: %s",
                view.kind.bucket,
                printable(name),
                view.dead_after,
                reason,
            )
        self._refused[marker] = (entry.ino, entry.mtime_ns)

    def _sweep_one(
        self,
        view: BucketView,
        dir_fd: int,
        name: str,
        entry: Entry,
        result: CollectedGarbage,
        changes: Changes,
        retry: bool,
        dry_run: bool,
    ) -> bool:
        """Judge and remove one file; False when the store stalled (judge nothing more now)."""
        leftover = name.startswith(".")
        instance_id = None if leftover else id_of_name(view.kind, name)
        if not leftover and instance_id is None:
            return True  # not a record name: never deleted
        key = f"{view.kind.bucket}/{instance_id.to_path()}" if instance_id is not None else f"{view.kind.bucket}/{name}"
        marker = (view.kind.bucket, name)
        if not retry and self._refused.get(marker) == (entry.ino, entry.mtime_ns):
            return True
        unchanged = self._recheck(view, dir_fd, name, entry)
        if not unchanged:
            if unchanged is not None and not leftover:
                changes += view.read_name(name)
            return unchanged is not None
        if dry_run:
            if not leftover:
                result.append(key)
            return True
        try:
            removed = remove_record(dir_fd, name)
        except OSError as exc:
            self._note_refused(view, name, entry, f"cannot delete it: {exc.strerror}")
            if not leftover:
                result.not_removed[key] = f"cannot delete it: {exc.strerror}"
                changes += view.expire(name)  # dead all the same: watches hear so, as list() already excludes it
            return True
        self._refused.pop(marker, None)
        if leftover:
            if removed:
                log.info(
                    "removed the leftover file %s/%s: unchanged for %.1f s", view.kind.bucket, name, view.dead_after
                )
            view.forget_leftover(name)
            return True
        if removed:
            _log_removed(view, name, entry)
            result.append(key)
        changes += view.read_name(name)
        return True

    def _still_released(self, entry: Entry) -> bool:
        """False when ``entry`` was judged dead by its owner's released lock and a probe now finds
        the lock held again or gone (a new owner of the name): the next probe of the owners judges
        it. True otherwise."""
        if entry.owner is not OwnerState.RELEASED or self._probe is None or entry.valid is None:
            return True
        probe = self._probe(entry.valid.instance_id)
        return probe.state is OwnerState.RELEASED and probe.uid == entry.uid

    def _recheck(self, view: BucketView, dir_fd: int, name: str, entry: Entry) -> bool | None:
        """:func:`_still_unchanged` (and, for a record judged dead by its owner's released lock,
        :meth:`_still_released`), or None when the answer took so long that the store stalled:
        then every clock of the view starts again."""
        began = self._clock.monotonic()
        # a released lock is the kernel's word: the mtime (which full scans skip while the lock
        # is held) says nothing more; the same inode is the same writer's file
        unchanged = _still_unchanged(dir_fd, name, entry, mtime=entry.owner is not OwnerState.RELEASED)
        took = self._clock.monotonic() - began
        if took <= STALL_AFTER:
            return unchanged and self._still_released(entry)
        view.stalled(f"re-checking {view.kind.bucket}/{printable(name)} before judging it dead took {took:.1f} s")
        return None


def _log_removed(view: BucketView, name: str, entry: Entry) -> None:
    if entry.owner is OwnerState.RELEASED:
        log.info("removed %s/%s: its owner's process ended (its lock was released)", view.kind.bucket, name)
    else:
        log.info("removed %s/%s: no heartbeat for %.1f s", view.kind.bucket, name, view.dead_after)


def _still_unchanged(dir_fd: int, name: str, entry: Entry, *, mtime: bool = True) -> bool:
    """Re-check a dead file right before deleting it: a regular file, same inode, same mtime
    (without ``mtime``: same inode).

    The file is re-opened and its open handle stat-ed: network filesystems revalidate attributes
    on open (NFS close-to-open) or answer fstat from the server (sshfs), not from a stale cache.
    """
    try:
        st = stat_regular(dir_fd, name)
    except OSError:  # unreadable now: the stat of the scan is all there is to judge by
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return False
    if st is None or not stat.S_ISREG(st.st_mode):  # gone, or not a regular file any more
        return False
    return st.st_ino == entry.ino and (not mtime or st.st_mtime_ns == entry.mtime_ns)
