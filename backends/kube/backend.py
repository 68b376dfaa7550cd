"""The Kubernetes backend: one DynamoWorkerMetadata CR per worker, read through a ready-gated view.

Writes: this pod's records live in its local metadata (four maps keyed by identity path); every
register / unregister / taint update changes it under a lock and writes the whole CR by
server-side apply (field manager ``dynamo-worker``, forced), retrying for ``write_timeout``
seconds (250 ms doubling to 2 s). When the write fails the local metadata is rolled back and
BackendUnavailable is raised (ValidationError when the server refuses the CR as invalid). In
container mode a stale CR of this worker's name is deleted at start.

Reads: the :class:`~.view.KubeDaemon` view of every served worker plus this pod's own records.
``list``/``list_and_watch`` wait for the view to be Ready (``ready_timeout``) and, with
``consistent_reads`` (the default), for it to catch up with the API server (``sync_timeout``),
so a record another pod wrote before the call is seen. Model conflicts between racing writers
are settled by the resourceVersion at which each model first appeared: the earlier one wins.

One client per CR name: two clients with the same pod (and container) overwrite each other's CR.

Connection state (docs/design.md §5.5, :mod:`.keeper`): SUSPENDED while the API server does not
answer (or answers 5xx / 429) this client's writes, its read barrier or the daemon's watches, and
once the daemon has Failed; RECONNECTED when it answers again. When this worker's CR is deleted
by someone else while the client owns records in it, the client is LOST and applies the whole CR
again (RECONNECTED naming the records' store keys), unless its pod is gone or going (then the CR
went with it and stays LOST); when the API server does not answer, the next answer, or the next
write, applies it.

Without a pod identity (a laptop with a kubeconfig) a client lists, gets and watches like any
other; registering, leasing and taint updates raise ValidationError saying how to give it one.
Its instance id is random, in [2**53, 2**63): above every Kubernetes worker id (53 bits), so it
names no worker. A ``read_only`` client never writes (no CR applied or deleted, not even the
stale-CR delete of container mode), ignores any identity it has and also serves its own pod's CR
like any other; its writes are refused by :class:`~discovery_sync.discovery.Discovery`.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from discovery_sync.discovery import CollectedGarbage, Discovery
from discovery_sync.errors import BackendUnavailable, ValidationError
from discovery_sync.identity import DiscoveryInstanceId
from discovery_sync.model import DiscoveryInstance, EventSource, Model
from discovery_sync.options import DEFAULT_CONNECT_TIMEOUT
from discovery_sync.queries import Query
from discovery_sync.retry import Retry
from discovery_sync.specs import DiscoverySpec, EndpointSpec, EventSourceSpec
from discovery_sync.watch import WatchFeed

from .access import diagnose_access
from .identity import DEFAULT_PODINFO_DIR, MODES, PodIdentity, check_publisher_id, missing_identity_message
from .keeper import ConnectionKeeper
from .layout import worker_metadata_body
from .liveness import parse_rv
from .options import OPTIONS
from .refusals import status_message
from .view import KubeDaemon, State
from .wire import TRANSPORT_ERRORS, KubeApi, explain, transport_cause, unreachable

log = logging.getLogger("discovery_sync.backends.kube")

T = TypeVar("T")

RETRY_START, RETRY_MAX = 0.25, 2.0
#: connecting retries after 0.5 s, doubling to 5 s (as the etcd backend's)
CONNECT_BACKOFF = (0.5, 5.0)
#: ids of clients without an identity start here: above every worker's id (53 bits)
NO_WORKER_ID_MIN = 2**53
#: the transports the reference runtime (1.6.1) can parse; it reads a CR all or nothing
REFERENCE_TRANSPORTS = ("tcp", "nats_tcp")
_PERMANENT = (401, 403, 404)  # missing RBAC or CRD: retrying will not help
_INVALID = (400, 413, 422)  # the server refuses the CR itself


class KubeDiscovery(Discovery):
    """Discovery on Kubernetes custom resources (``nvidia.com/v1alpha1`` DynamoWorkerMetadata).

    :param identity: this worker's pod and mode (see :func:`~.identity.find_identity`); None for a
        client that only reads (listing and watching work; every write raises ValidationError).
    :param api: the API of the namespace to read (and the pod's namespace, to write).
    :param mode: ``pod`` or ``container``: which readiness objects decide that a worker is served
        (EndpointSlices or Pods). Default: the identity's mode, else ``pod``.
    :param read_only: never write (see the module docstring); the identity is then ignored.
    :param podinfo_dir: where the Downward-API files were looked for (named when a write needs
        the identity this client lacks).
    :param ready_timeout: seconds reads wait for the first complete view (then BackendUnavailable).
    :param write_timeout: seconds a CR write is retried before it fails and is rolled back.
    :param sync_timeout: seconds a consistent read waits for the watches to catch up.
    :param consistent_reads: (default True) check that the view is current before each read, so a
        record any pod wrote before the call is in its answer: a LIST of one object per resource,
        and a LIST of a resource whose watch has not reached the version it answered
        (:meth:`~.view.KubeDaemon.sync`). False: serve what the watches hold, asking the API
        server nothing (as an informer's lister does).
    :param connect_timeout: seconds connecting keeps asking the API server for ``/version`` until it
        answers (0.5 s doubling to 5 s; default 10, as etcd clients dial; None: without limit, for a
        worker that starts before its cluster is reachable), then BackendUnavailable naming the
        server and the timeout. Any HTTP answer but a 5xx or 429 counts: refusals (a missing CRD or
        RBAC) are the view's to report, as before. Nothing else is sent before it answers.

    Each request to the API server is bounded by the ``api``'s ``request_timeout``.
    """

    backend_name = "kube"

    def __init__(
        self,
        identity: PodIdentity | None,
        api: KubeApi,
        *,
        mode: str | None = None,
        read_only: bool = False,
        podinfo_dir: str | os.PathLike[str] = DEFAULT_PODINFO_DIR,
        ready_timeout: float = 30.0,
        write_timeout: float = 10.0,
        sync_timeout: float = 5.0,
        consistent_reads: bool = True,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        super().__init__(read_only=OPTIONS.check("read_only", read_only))
        mode = OPTIONS.check("mode", mode) if mode is not None else None
        if identity is not None and mode is not None and mode != identity.mode:
            raise ValidationError(f"mode={mode!r} contradicts the identity's discovery mode {identity.mode!r}")
        self.mode: str = mode or (identity.mode if identity is not None else MODES[0])
        self.identity = None if self.read_only else identity
        self.api = api
        self._podinfo_dir = podinfo_dir
        self.ready_timeout = OPTIONS.check("ready_timeout", ready_timeout)
        self.write_timeout = OPTIONS.check("write_timeout", write_timeout)
        self.sync_timeout = OPTIONS.check("sync_timeout", sync_timeout)
        self.consistent_reads = OPTIONS.check("consistent_reads", consistent_reads)
        #: seconds connecting kept trying to reach the API server at most (None: without limit)
        self.connect_timeout: float | None = OPTIONS.check("connect_timeout", connect_timeout)
        self._metadata_lock = threading.Lock()
        self._local: dict[DiscoveryInstanceId, DiscoveryInstance] = {}
        self._first_seen: dict[DiscoveryInstanceId, int | None] = {}
        self._cr_uid: str | None = None
        #: why this worker's CR is known to be gone while the client owns records (None: it is not)
        self._cr_lost: str | None = None
        self._keeper = ConnectionKeeper(self._connection, self._recover_cr)
        self.writes = 0
        # a client without an identity (or a read-only one) has an id that names no worker
        self._instance_id = (
            self.identity.instance_id
            if self.identity is not None
            else NO_WORKER_ID_MIN + secrets.randbelow(2**63 - NO_WORKER_ID_MIN)
        )
        self._wait_until_reachable(self.connect_timeout)
        own = self.identity
        if own is not None and own.mode == "container":
            self._retrying(partial(api.delete_worker_metadata, own.cr_name), "deleting the stale CR")
        self.daemon = KubeDaemon(
            api, mode=self.mode, own_cr_name=own.cr_name if own is not None else None, keeper=self._keeper
        )
        self.daemon.start()

    def _wait_until_reachable(self, timeout: float | None) -> None:
        """Ask the API server for ``/version`` until it answers (see ``connect_timeout`` above);
        BackendUnavailable once ``timeout`` seconds have passed (None: never)."""
        retry = Retry(*CONNECT_BACKOFF, jitter=0, timeout=timeout)  # the last try at the deadline
        while True:
            try:
                self.api.server_version(retry.deadline)
                return
            except ApiException as exc:
                if exc.status is not None and exc.status < 500 and exc.status != 429:
                    return  # it answered: the view reports what it refuses
                error: BaseException = exc
                cause = status_message(exc)
            except TRANSPORT_ERRORS as exc:
                error, cause = exc, transport_cause(exc)
            if retry.expired:
                limit = "none" if timeout is None else f"{timeout:g}"
                raise BackendUnavailable(
                    f"cannot reach the Kubernetes API server {self.api.server}: {cause} (tried for "
                    f"{round(retry.elapsed(), 1):g} s, connect_timeout={limit}): start it or check the kubeconfig's "
                    "server address, or pass connect_timeout=none to wait for it without limit"
                ) from error
            wait = min(retry.next_delay(), retry.remaining())
            log.warning("cannot reach the Kubernetes API server yet (%s); retrying in %.1f s", cause, wait)
            retry.wait(wait)

    @property
    def instance_id(self) -> int:
        return self._instance_id

    def _check_writable(self, action: str) -> None:
        super()._check_writable(action)
        if self.identity is None:
            raise ValidationError(missing_identity_message(action, self._podinfo_dir))

    def _writer(self) -> PodIdentity:
        """The identity writes need (the base class has already refused writes without one)."""
        if self.identity is None:
            raise ValidationError(missing_identity_message("write its DynamoWorkerMetadata", self._podinfo_dir))
        return self.identity

    def collect_garbage(
        self, *, dry_run: bool = False, progress: Callable[[float, float], None] | None = None
    ) -> CollectedGarbage:
        """Nothing to remove on Kubernetes (each CR goes with its pod through the ownerReference), so a
        client without a pod identity may run it too; a read-only client may only dry-run."""
        if self.identity is None and not self.read_only and dry_run is False:
            dry_run = True  # removes nothing either way; spares the identity check of writes
        return super().collect_garbage(dry_run=dry_run, progress=progress)

    def status(self) -> dict[str, Any]:
        """:meth:`Discovery.status`, with this worker's identity (None without one), its CR, the
        daemon's state and view."""
        with self._metadata_lock:
            records, cr_uid = len(self._local), self._cr_uid
        identity = self.identity
        return {
            **super().status(),
            "pod": identity.pod_name if identity is not None else None,
            "pod_uid": identity.pod_uid if identity is not None else None,
            "namespace": self.api.namespace,
            "mode": self.mode,
            "cr_name": identity.cr_name if identity is not None else None,
            "cr_uid": cr_uid,
            "server": self.api.server,
            "request_timeout": self.api.request_timeout,
            "instance_id": self.instance_id if identity is not None else None,
            "local_records": records,
            "writes": self.writes,
            "failing": self._keeper.failing(),
            **self.daemon.status(),
        }

    def _check_spec(self, spec: DiscoverySpec) -> None:
        if isinstance(spec, EventSourceSpec):
            check_publisher_id(spec.publisher_id)  # ≤ 2**53 - 1 on this backend
        if isinstance(spec, EndpointSpec) and spec.transport.kind not in REFERENCE_TRANSPORTS:
            log.warning(
                "endpoint %s.%s.%s has a %r transport, which reference (Rust) workers cannot parse: they read a "
                "DynamoWorkerMetadata all or nothing, so none of this worker's records will be visible to them",
                spec.namespace,
                spec.component,
                spec.endpoint,
                spec.transport.kind,
            )

    # -- writes -------------------------------------------------------------------------------------
    def _create(self, instance: DiscoveryInstance) -> DiscoveryInstance | None:
        if isinstance(instance, EventSource):
            check_publisher_id(instance.publisher_id)
        with self._metadata_lock:
            existing = self._local.get(instance.id())
            if existing is not None:
                return existing
            self._commit(instance.id(), instance, f"registering {instance.kind.value} {instance.id().to_path()}")
        return None

    def _replace(self, instance: DiscoveryInstance) -> None:
        with self._metadata_lock:
            self._commit(instance.id(), instance, f"updating {instance.kind.value} {instance.id().to_path()}")

    def _delete(self, instance_id: DiscoveryInstanceId) -> None:
        with self._metadata_lock:
            if instance_id not in self._local:
                return
            if self._closed:  # shutting down: _close removes the whole CR at once
                del self._local[instance_id]
                return
            self._commit(instance_id, None, f"removing {instance_id.kind.value} {instance_id.to_path()}")

    def _commit(self, key: DiscoveryInstanceId, value: DiscoveryInstance | None, action: str) -> None:
        """Change one local record and apply the whole CR; roll back when that fails (lock held)."""
        before = self._local.get(key)
        if value is None:
            self._local.pop(key, None)
        else:
            self._local[key] = value
        identity = self._writer()
        body = worker_metadata_body(identity, self._local.values())
        try:
            stored = self._retrying(partial(self.api.apply_worker_metadata, identity.cr_name, body), action)
        except BaseException:
            if before is None:
                self._local.pop(key, None)
            else:
                self._local[key] = before
            raise
        version = self._stored(stored)
        if value is None:
            self._first_seen.pop(key, None)
        elif before is None:
            self._first_seen[key] = version
        self._restored(version, f"{action} applied the whole DynamoWorkerMetadata {identity.cr_name} again")
        self.daemon.set_local(self._local, self._first_seen)

    def _stored(self, stored: Any) -> int | None:
        """A CR write succeeded (lock held): count it, keep the CR's uid; its resourceVersion."""
        self.writes += 1
        meta = (stored.get("metadata") or {}) if isinstance(stored, dict) else {}
        self._cr_uid = meta.get("uid", self._cr_uid)
        return parse_rv(meta.get("resourceVersion"))

    def _restored(self, version: int | None, reason: str) -> None:
        """The whole CR was just applied (lock held): when it had been lost, every record appears
        anew at ``version`` (as readers now see it) and the client is RECONNECTED naming them."""
        if self._cr_lost is None:
            return
        self._cr_lost = None
        for key in self._local:
            self._first_seen[key] = version
        rewritten = sorted(f"{key.kind.bucket}/{key.to_path()}" for key in self._local)
        self._connection.reconnect(reason, rewritten=rewritten)

    def _retrying(self, call: Callable[[], T], action: str, timeout: float | None = None) -> T:
        """``call()``, retried on transient errors for ``timeout`` (default ``write_timeout``) seconds.

        An unreachable API server (no answer, 5xx, 429) suspends the client from the second failed
        attempt (or the only one); a success is an answer (:mod:`.keeper`)."""
        budget = self.write_timeout if timeout is None else timeout
        retry = Retry(RETRY_START, RETRY_MAX, jitter=0, timeout=budget)
        attempts = 0
        try:
            while True:
                attempts += 1
                started = time.monotonic()
                try:
                    result = call()
                except ApiException as exc:
                    if exc.status in _INVALID:
                        raise ValidationError(f"{self._explain(exc, action)}; nothing was changed") from exc
                    if exc.status in _PERMANENT:
                        raise BackendUnavailable(f"{self._explain(exc, action)}; nothing was changed") from exc
                    error: BaseException = exc
                except TRANSPORT_ERRORS as exc:
                    error = exc
                else:
                    reason = f"the Kubernetes API server {self.api.server} answers again ({action} worked)"
                    self._keeper.answered("write", reason, started)
                    return result
                delay = retry.next_delay()
                last = delay > retry.remaining()  # the next attempt would come after the deadline
                if unreachable(error) and (attempts > 1 or last):
                    self._keeper.failed("write", self._explain(error, action), started)
                if last:
                    raise BackendUnavailable(
                        f"{self._explain(error, action)}; gave up after {attempts} attempt(s) in "
                        f"{budget:g} s; nothing was changed"
                    ) from error
                log.warning("%s; retrying in %.2f s", self._explain(error, action), delay)
                retry.wait(delay)
        finally:
            self._keeper.settled("write")  # (gone already after a success)

    def _explain(self, exc: BaseException, action: str) -> str:
        return explain(exc, action, self.api.server, namespace=self.api.namespace)

    # -- this worker's CR, deleted by someone else ------------------------------------------------------
    def _recover_cr(self, uid: str | None) -> None:
        """Keeper thread: the daemon saw this worker's CR ``uid`` deleted (None: the API server
        answers again after applying it failed). LOST when the client owned records in it, then the
        whole CR is applied again (see the module docstring)."""
        with self._metadata_lock:
            if self._closed or self.identity is None:
                return
            if uid is not None:
                if uid != self._cr_uid:
                    return  # an older CR, or one a write has applied again since
                self._cr_uid = None  # nothing to delete at shutdown any more
                if not self._local:
                    return  # it held no records: nothing was lost
                self._cr_lost = (
                    f"DynamoWorkerMetadata {self.api.namespace}/{self.identity.cr_name} (uid {uid}) was deleted while "
                    f"this client owned {len(self._local)} record(s) in it"
                )
                self._connection.lose(self._cr_lost)
            if self._cr_lost is not None and self._pod_lives(self.identity):
                self._apply_again(self.identity)

    def _pod_lives(self, identity: PodIdentity) -> bool:
        """Whether this worker's pod is still there and not being deleted (lock held). A CR deleted
        with its pod (garbage collection) must not come back: readers would never serve it, and
        the collector would delete it again."""
        try:
            pod = self.api.read_pod(identity.pod_name)
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            if unreachable(exc):
                self._keeper.retry_when_answered()
                log.warning(
                    "%s; applying this worker's CR again waits for an answer", self._explain(exc, "reading this pod")
                )
                return False
            return True  # refused (no RBAC to read pods, say): this process runs, so its pod must too
        meta = (pod or {}).get("metadata") or {}
        if pod is None or meta.get("uid") != identity.pod_uid or meta.get("deletionTimestamp"):
            log.warning(
                "this worker's pod %s is gone or going: its CR went with it and is not applied again", identity.pod_name
            )
            return False
        return True

    def _apply_again(self, identity: PodIdentity) -> None:
        """Apply the whole CR after it was deleted (lock held): RECONNECTED, or still LOST."""
        body = worker_metadata_body(identity, self._local.values())
        action = f"applying DynamoWorkerMetadata {identity.cr_name} again"
        try:
            stored = self._retrying(partial(self.api.apply_worker_metadata, identity.cr_name, body), action)
        except (BackendUnavailable, ValidationError) as exc:
            waits = exc.__cause__ is not None and unreachable(exc.__cause__)
            if waits:
                self._keeper.retry_when_answered()
            log.warning(
                "%s; its %d record(s) stay lost until the next write%s",
                exc,
                len(self._local),
                " or the next answer of the API server" if waits else "",
            )
            return
        version = self._stored(stored)
        self._restored(version, f"applied the whole DynamoWorkerMetadata {identity.cr_name} again (uid {self._cr_uid})")
        self.daemon.set_local(self._local, self._first_seen)

    # -- reads --------------------------------------------------------------------------------------
    def _view(self) -> KubeDaemon:
        """The daemon, Ready and (with consistent reads) caught up with the API server."""
        self.daemon.wait_ready(self.ready_timeout)
        if self.consistent_reads:
            self.daemon.sync(self.sync_timeout)
            self.daemon.wait_ready(0)
        return self.daemon

    def _get(self, instance_id: DiscoveryInstanceId) -> DiscoveryInstance | None:
        with self._metadata_lock:
            local = self._local.get(instance_id)
        return local if local is not None else self._view().get(instance_id)

    def _list(self, query: Query) -> list[DiscoveryInstance]:
        return self._view().records(query)

    def _loses_conflict(self, model: Model, conflict: Model) -> bool:
        # the model that appeared first (lower resourceVersion) wins: of racing writers one keeps it
        ours = self._first_seen.get(model.id())
        theirs = self._first_seen.get(conflict.id()) if conflict.id() in self._local else None
        if theirs is None:
            theirs = self.daemon.first_seen(conflict.id())
        return ours is None or theirs is None or theirs < ours

    def _open_feed(self, feed: WatchFeed) -> None:
        self._view().open_feed(feed)

    def _probe(self) -> None:
        started = time.monotonic()
        try:
            self.api.list_page(self.api.worker_metadata, limit=1)
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            message = self._explain(exc, "listing DynamoWorkerMetadata")
            if unreachable(exc):
                self._keeper.failed("read", message, started, lasting=False)
            raise BackendUnavailable(message) from exc
        reason = f"the Kubernetes API server {self.api.server} answers again (check_connection() worked)"
        self._keeper.answered("read", reason, started)
        if self.daemon.state is State.FAILED:
            raise BackendUnavailable(f"Kubernetes discovery failed: {self.daemon.reason}")

    def _reported_instance_id(self) -> str | None:
        # without a pod identity the id is a random one that names no worker
        return None if self.identity is None else super()._reported_instance_id()

    def diagnose(self) -> dict[str, Any]:
        """:meth:`Discovery.diagnose`, with the permissions this backend uses checked (``permissions``,
        :mod:`.access`): also when the API server refused the probe, which they may explain."""
        report = super().diagnose()
        section, problems = diagnose_access(self.api, self.mode)
        report["permissions"] = section
        report["problems"].extend(problems)
        return report

    def _diagnose(self, report: dict[str, Any]) -> None:
        try:  # a view still listing (doctor asks at once) is no problem yet
            self.daemon.wait_ready(self.ready_timeout)
        except BackendUnavailable as exc:
            report["problems"].append(f"the discovery view is {self.daemon.state.value}: {exc}")
        details = self.status()
        del details["instance_id"]  # the report's own (hex; none for a client whose id names nothing)
        report.update(details)

    # -- lifecycle ----------------------------------------------------------------------------------
    def _close(self) -> None:
        self._keeper.close()  # what shutting down does to the CR and the daemon is no fault
        with self._metadata_lock:
            self._local.clear()
            cr_uid, self._cr_uid = self._cr_uid, None
        if cr_uid is not None:  # only a client with an identity ever wrote a CR
            identity = self._writer()
            try:
                self._retrying(
                    partial(self.api.delete_worker_metadata, identity.cr_name, cr_uid),
                    f"deleting it at shutdown (DynamoWorkerMetadata {identity.cr_name})",
                    timeout=min(self.write_timeout, 2.0),
                )
            except Exception as exc:  # its ownerReference has it collected with the pod
                log.warning(
                    "this worker's DynamoWorkerMetadata %s/%s and its records stay: readers keep serving them while "
                    "the pod %s is ready, until the pod is deleted and the garbage collector removes the CR; %s",
                    self.api.namespace,
                    identity.cr_name,
                    identity.pod_name,
                    exc,
                )
        self.daemon.stop()
        self._keeper.join(5.0)
        self.api.close()
