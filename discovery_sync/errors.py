"""The exception hierarchy: everything discovery-sync raises on purpose derives from DiscoveryError."""

from __future__ import annotations


class DiscoveryError(Exception):
    """Base of every error raised by discovery-sync."""


class ValidationError(DiscoveryError, ValueError):
    """Input that cannot be stored or parsed: bad names, ids, JSON, queries or URLs.

    Raised before anything is written, so the store is unchanged.
    """


class UnknownRecordType(ValidationError):
    """A stored record whose ``type`` names a kind this version does not know (a newer runtime's,
    such as a Velo peer): readers skip it quietly (:mod:`discovery_sync.unknown_kinds`), unlike a
    malformed record of a known kind. ``type_name`` is the type it names."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


class ConflictError(DiscoveryError):
    """A registration that contradicts what is already stored (another model on the
    endpoint, a changed event-source descriptor). The stored record is kept."""


class NotFoundError(DiscoveryError, LookupError):
    """The record the call refers to is not stored (or not owned by this client)."""


class BackendUnavailable(DiscoveryError):
    """The store cannot be reached or used right now; retrying later may succeed."""


class LockTimeout(BackendUnavailable):
    """A store lock was not acquired within its timeout."""


class ClientClosed(DiscoveryError):
    """The client was shut down; create a new one with connect()."""


class WatchClosed(DiscoveryError):
    """The watch was closed by its consumer or by shutdown() of its client."""


class WatchFailed(DiscoveryError):
    """The thread feeding a watch died; the cause is chained (``__cause__``)."""


class InstanceReplaced(ConflictError):
    """This client is a failover-cohort member that a successor with the same logical instance
    id replaced: it no longer owns any record and must not write. Exit (or reconnect as a
    standby); see ``Discovery.wait_replaced``."""
