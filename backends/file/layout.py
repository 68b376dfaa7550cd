"""Where things live in a file store (identical to the reference runtime's FileStore).

``root/v1/instances/``, ``root/v1/mdc/``, ``root/v1/event_channels/``, ``root/v1/event_sources/``
hold one file per record, named by percent-encoding its identity path (every byte that is not
an ASCII letter or digit becomes ``%XX``). Soft locks live in ``root/.locks/``: nothing but
records (and the writers' ``.tmp_*`` files) ever goes in a bucket directory.
:class:`StoreDirectories` opens them (as descriptors: :mod:`.directory`) and reads a record by id.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from discovery_sync.errors import BackendUnavailable, ValidationError
from discovery_sync.identity import DiscoveryInstanceId, RecordKind
from discovery_sync.model import DiscoveryInstance
from discovery_sync.options import path
from discovery_sync.pathcodec import encode_filename
from discovery_sync.queries import Query

from .directory import DirectoryClosed, StoreDirectory, SymlinkRefused, listing
from .names import record_from, record_name
from .permissions import unsafe
from .wire import RecordTooLarge, read_file, stat_entry, unread_reason

log = logging.getLogger("discovery_sync.backends.file")

MAX_FILENAME_BYTES = 255
DEFAULT_DIRNAME = "dynamo_store_kv"


def default_root() -> Path:
    """``DYN_FILE_KV``, else ``{tempdir}/dynamo_store_kv`` (where reference workers meet by default)."""
    configured = os.environ.get("DYN_FILE_KV", "").strip()
    return Path(path(configured, "DYN_FILE_KV")) if configured else Path(tempfile.gettempdir()) / DEFAULT_DIRNAME


LOCK_DIRNAME = ".locks"


class StoreLayout:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.buckets = {kind: self.root / kind.bucket for kind in RecordKind}
        self.lock_dir = self.root / LOCK_DIRNAME

    @staticmethod
    def relatives() -> list[str]:
        """Every directory of the store below its root: the buckets, then the lock directory."""
        return [kind.bucket for kind in RecordKind] + [LOCK_DIRNAME]

    def file_name(self, instance_id: DiscoveryInstanceId) -> str:
        name = record_name(instance_id)
        if len(name) > MAX_FILENAME_BYTES:
            raise ValidationError(
                f"{instance_id.kind.value} {instance_id.to_path()!r} is too long for the file store: its file "
                f"name would be {len(name)} bytes, the limit is {MAX_FILENAME_BYTES}; use shorter names"
            )
        return name

    def path_of(self, instance_id: DiscoveryInstanceId) -> Path:
        return self.buckets[instance_id.kind] / self.file_name(instance_id)

    @staticmethod
    def name_prefix(query: Query) -> str:
        """The file-name prefix shared by every record a query can match."""
        relative = query.key_prefix()[len(query.kind.bucket) + 1 :]
        return encode_filename(relative)

    @staticmethod
    def lock_name(key: str) -> str:
        """The soft-lock marker's file name (in the lock directory) for ``key``, a bucket name for instance."""
        return f"{encode_filename(key)}.lock"


class StoreDirectories:
    """The open directories of one client's store: a bucket per kind and the lock directory."""

    def __init__(self, layout: StoreLayout, *, read_only: bool) -> None:
        self.root = layout.root
        self.read_only = read_only
        self.buckets = {kind: StoreDirectory(layout.root, kind.bucket) for kind in RecordKind}
        self.lock_dir = StoreDirectory(layout.root, LOCK_DIRNAME)

    def open(self, permissions: str) -> None:
        """Open (a writer: create) the directories, and judge who else can change them (``refuse``:
        BackendUnavailable if another local user can). A read-only client opens those that exist
        (a symlinked one is refused all the same: the writers would refuse the store); the buckets
        that do not are opened once they appear."""
        try:
            for directory in [*self.buckets.values(), self.lock_dir]:
                try:
                    directory.open(create=not self.read_only)
                except FileNotFoundError:
                    if not self.read_only:
                        raise
        except SymlinkRefused:
            self.close()
            raise
        except OSError as exc:
            self.close()
            doing = "read" if self.read_only else "create"
            raise BackendUnavailable(f"cannot {doing} the file store at {self.root}: {exc}") from exc
        problems = unsafe(self.root, StoreLayout.relatives())
        if problems and permissions == "refuse":
            self.close()
            raise BackendUnavailable("refusing the file store (permissions=refuse): " + "; ".join(problems))
        for problem in problems:
            log.warning("the file store is not safe from other local users: %s", problem)

    def close(self) -> None:
        for directory in [*self.buckets.values(), self.lock_dir]:
            directory.close()

    def probe(self) -> None:
        """Every bucket can be listed (for a read-only client: every bucket that exists)."""
        for directory in self.buckets.values():
            try:
                directory.revalidate()
                with directory.use() as dir_fd, listing(dir_fd):
                    pass
            except FileNotFoundError as exc:
                if not self.read_only:
                    raise BackendUnavailable(f"cannot read the file store directory {directory.path}: {exc}") from exc
            except OSError as exc:
                raise BackendUnavailable(f"cannot read the file store directory {directory.path}: {exc}") from exc

    def read(
        self, instance_id: DiscoveryInstanceId, name: str, max_record_bytes: int
    ) -> tuple[DiscoveryInstance | None, str | None]:
        """The record stored under ``name`` for ``instance_id``, or None and why it cannot be
        served (None: absent)."""
        directory = self.buckets[instance_id.kind]
        try:
            if self.read_only and not directory.is_open:
                directory.revalidate()  # a bucket that did not exist at the last look may exist now
            with directory.use() as dir_fd:
                raw = read_file(dir_fd, name, max_record_bytes)
                if raw is None:
                    return None, (None if stat_entry(dir_fd, name) is None else "not a regular file")
        except DirectoryClosed:  # a read-only client's bucket that went away meanwhile
            if not self.read_only:
                raise
            return None, None
        except (OSError, RecordTooLarge) as exc:
            if self.read_only and isinstance(exc, FileNotFoundError):
                return None, None  # no such bucket (yet, or any longer): nothing is stored under the id
            return None, unread_reason(exc)
        try:
            return record_from(raw, instance_id.kind, name), None
        except ValidationError as exc:
            return None, str(exc)
