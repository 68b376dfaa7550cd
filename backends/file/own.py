"""This client's record files: writing, adopting and deleting them, and knowing which are still its own.

Each record this client wrote (or adopted) is remembered with the inode it wrote: the name under
another inode means another writer replaced the file. A stranger's replacement (another user's
file, junk, a copy) is written back over, and said so; a successor's in a failover cohort is not
(:mod:`.cohort` tells them apart before :meth:`OwnFiles.restore` is called).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from discovery_sync.errors import BackendUnavailable, ValidationError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance, instance_to_json

from .directory import StoreDirectory
from .liveness import OwnedNames
from .names import describe_entry
from .oserrors import storage_error
from .view import BucketView, Touched
from .wire import RecordTooLarge, read_file, remove_record, stat_entry, write_record

log = logging.getLogger("discovery_sync.backends.file")


class OwnFiles:
    """The files of one client's records. ``written`` maps each to the inode this client wrote
    (changed through this class alone: :meth:`_wrote` counts its versions).

    The maps an idle round asks for (:meth:`by_kind`, :meth:`touched`, :meth:`replaced`) are kept
    while what they are made of is unchanged: an idle client of 10k records rebuilt them on every
    rescan (about 40 % of a full scan of its own files)."""

    def __init__(self, buckets: Mapping[RecordKind, StoreDirectory], names: OwnedNames, max_record_bytes: int) -> None:
        self.buckets = buckets
        self.names = names
        self.max_record_bytes = max_record_bytes
        self.written: dict[DiscoveryInstanceId, int] = {}
        self._written_version = 0
        self._replaced_warned: set[tuple[DiscoveryInstanceId, int]] = set()
        self._by_kind: dict[RecordKind, dict[DiscoveryInstanceId, str]] = {}
        self._touched: tuple[object, int, Touched | None] = (None, -1, None)  # (of owned, version, answer)
        self._replaced: dict[RecordKind, tuple[object, int, int, list[DiscoveryInstanceId]]] = {}

    def _wrote(self, instance_id: DiscoveryInstanceId, inode: int | None) -> None:
        """``written`` changes: ``instance_id``'s file is now ``inode`` (None: none of this client's)."""
        if inode is None:
            self.written.pop(instance_id, None)
        else:
            self.written[instance_id] = inode
        self._written_version += 1

    def write(self, instance: DiscoveryInstance, *, create_only: bool) -> bool:
        """Write ``instance`` to its file; False when ``create_only`` and the file exists."""
        instance_id = instance.id()
        name = self.names(instance_id)
        data = instance_to_json(instance)
        if len(data) > self.max_record_bytes:
            raise ValidationError(
                f"{instance.kind.value} {instance_id.to_path()} is {len(data)} bytes as JSON, more than "
                f"max_record_bytes={self.max_record_bytes}: readers would skip it; store less in it"
            )
        directory = self.buckets[instance.kind]
        try:
            with directory.use() as dir_fd:
                inode = write_record(dir_fd, name, data, create_only=create_only)
        except OSError as exc:
            raise storage_error(exc, f"cannot write {directory.path / name}") from exc
        if inode is None:
            return False
        self._wrote(instance_id, inode)
        return True

    def adopt(self, instance_id: DiscoveryInstanceId) -> None:
        """Take the file now stored under ``instance_id`` as this client's (create-if-absent kept it)."""
        with self.buckets[instance_id.kind].use() as dir_fd:
            st = stat_entry(dir_fd, self.names(instance_id))
        if st is not None:
            self._wrote(instance_id, st.st_ino)

    def unlink(self, instance_id: DiscoveryInstanceId) -> None:
        self._wrote(instance_id, None)
        try:
            with self.buckets[instance_id.kind].use() as dir_fd:
                remove_record(dir_fd, self.names(instance_id))
        except OSError as exc:
            raise storage_error(exc, f"cannot delete {instance_id.to_path()}") from exc

    def by_kind(self, owned: Mapping[DiscoveryInstanceId, object]) -> dict[RecordKind, dict[DiscoveryInstanceId, str]]:
        """The records ``owned`` (this client's now) by bucket: id -> file name. The same maps as
        the last call's while the ids are the same (callers must not change them)."""
        last = self._by_kind
        if sum(map(len, last.values())) == len(owned) and all(per.keys() <= owned.keys() for per in last.values()):
            return last
        by_kind: dict[RecordKind, dict[DiscoveryInstanceId, str]] = {}
        names = self.names
        names.prune(owned)
        for instance_id in owned:
            by_kind.setdefault(instance_id.kind, {})[instance_id] = names(instance_id)
        self._by_kind = by_kind
        return by_kind

    def touched(self, owned: Mapping[DiscoveryInstanceId, str], beaten_at: float | None) -> Touched | None:
        """This client's files of one bucket as its heartbeat keeps them (``owned``: id -> name), for
        a full scan that need not stat them; None before the heartbeat's first completed beat."""
        if beaten_at is None or not owned:
            return None
        of, version, answer = self._touched
        if of is owned and version == self._written_version and answer is not None:
            return answer._replace(at=beaten_at)
        version = self._written_version  # read first: a change meanwhile makes the next call rebuild
        written = self.written  # changed by API calls meanwhile: one get() per record
        answer = Touched({name: inode for i, name in owned.items() if (inode := written.get(i)) is not None}, beaten_at)
        self._touched = (owned, version, answer)
        return answer

    def replaced(self, view: BucketView, owned: Mapping[DiscoveryInstanceId, str]) -> list[DiscoveryInstanceId]:
        """This client's records (``owned``: id -> name) whose file the view's last scan showed
        replaced by another writer: another inode, or no regular file at all (a FIFO or symlink
        in its place, or gone)."""
        if not owned:
            return []
        kept = self._replaced.get(view.kind)
        version, seen = self._written_version, view.inodes_version  # read first (see touched())
        if kept is not None and kept[0] is owned and kept[1:3] == (version, seen):
            return kept[3]
        inodes = view.inodes()
        written = self.written
        answer = [i for i, name in owned.items() if (inode := written.get(i)) is not None and inodes.get(name) != inode]
        self._replaced[view.kind] = (owned, version, seen, answer)
        return answer

    def restore(self, instance: DiscoveryInstance) -> bool:
        """Write back this client's record that a stranger replaced (see :meth:`replaced`); True
        when it was written back."""
        instance_id = instance.id()
        name = self.names(instance_id)
        directory = self.buckets[instance_id.kind]
        with directory.use() as dir_fd:
            st = stat_entry(dir_fd, name)
            if st is None or st.st_ino == self.written.get(instance_id):
                return False  # gone (the heartbeat writes it again) or ours after all
            try:
                same = read_file(dir_fd, name, self.max_record_bytes) == instance_to_json(instance)
            except (OSError, RecordTooLarge):
                same = False
            if same:  # the same bytes under a new inode (a copy put back): ours all the same
                self._wrote(instance_id, st.st_ino)
                return False
        what = f"{describe_entry(name, st) or 'a file'} of uid {st.st_uid}"
        try:
            self.write(instance, create_only=False)
        except BackendUnavailable as exc:
            if (instance_id, st.st_ino) not in self._replaced_warned:
                self._replaced_warned.add((instance_id, st.st_ino))
                log.error(
                    "record %s of this client was replaced by %s and cannot be written back (%s): "
                    "readers no longer see this client's record",
                    directory.path / name,
                    what,
                    exc.__cause__ or exc,
                )
            return False
        log.warning(
            "record %s of this client was replaced by another writer (%s); wrote it back", directory.path / name, what
        )
        return True
