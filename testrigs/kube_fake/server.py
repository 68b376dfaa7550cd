"""``FakeKubeServer``: the in-process API server plus the test-control API tests drive it with."""

from __future__ import annotations

import contextlib
import copy
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from testrigs.kubeconfig import write_kubeconfig

from .api import Faults, KubeApi, Request
from .controllers import crd_establisher
from .objects import (
    DISCOVERY_LABEL,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    Target,
    build_endpoint_slice,
    build_pod,
    now,
    pod_is_ready,
    with_readiness,
)
from .resources import ENDPOINT_SLICES, NAMESPACES, PODS, WORKER_METADATA, ResourceType, resolve_resource
from .selectors import Selection
from .store import Store
from .transport import HttpServer
from .watch import Change

AUTO_SLICE_NAME = "dynamo-workers"
ResourceRef = str | ResourceType


class RecordedRequest(NamedTuple):
    """One request the server received (query values: the last one given for each key)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    raw_query: str
    body: bytes
    headers: dict[str, str]


class FakeKubeServer:
    """A loopback, plain-HTTP Kubernetes API server for Pods, EndpointSlices, DynamoWorkerMetadata and Namespaces.

    Every test-control method is thread-safe and may be called while clients are connected.
    Objects returned by it are copies.
    """

    def __init__(
        self,
        *,
        bookmark_interval: float = 1.0,
        history_limit: int = 1000,
        auto_endpoint_slices: bool = False,
        validate: bool = True,
        port: int = 0,
    ):
        """``port``: the loopback port to serve on (0: one the OS chooses), e.g. a free port a
        client was told before the server started."""
        self.bookmark_interval = bookmark_interval
        self._port = port
        self.store = Store(history_limit)
        self.faults = Faults()
        self.api = KubeApi(self.store, self.faults, lambda: f"127.0.0.1:{self.port}")
        self.api.validate = validate
        self._requests: list[RecordedRequest] = []
        self._requests_changed = threading.Condition()
        self._bookmarks: dict[ResourceType, int] = {}
        self._bookmarks_changed = threading.Condition()
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._held: socket.socket | None = None  # the port kept while stopped (bound, not listening)
        self.store.add_hook(crd_establisher(self.store, self.set_crd_installed))
        if auto_endpoint_slices:
            self.store.add_hook(self._sync_auto_slice)

    # ----- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeKubeServer:
        """Serve; after :meth:`stop` with ``hold_port``, serve the same objects again on the same
        port (an API server restarted in front of the same etcd)."""
        if self._httpd is not None and not self._httpd.stopping.is_set():
            raise RuntimeError("already started")
        if self._held is not None:
            self._port = self._held.getsockname()[1]
            self._held.close()  # both sockets allow address reuse: the listener binds at once
            self._held = None
        self._httpd = HttpServer(
            self.api, self._record, lambda: self.bookmark_interval, self._bookmark_sent, port=self._port
        )
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="kube-fake-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0, *, hold_port: bool = False) -> None:
        """End open watch streams (cleanly, with the terminating chunk), close every connection, stop;
        raise RuntimeError if the fake itself failed on a request meanwhile.

        ``hold_port``: keep the port bound but not listening, so that every connection to it is
        refused (as to a stopped API server) and no other socket takes it until :meth:`start`
        serves on it again; the objects and their history are kept. A later stop() releases it.
        """
        httpd = self._httpd
        if httpd is None or httpd.stopping.is_set():
            if not hold_port and self._held is not None:
                self._held.close()
                self._held = None
            return
        httpd.stopping.set()
        self.store.close_watchers()
        httpd.wait_streams_closed(timeout / 2)
        httpd.shutdown()
        port = httpd.server_address[1]
        httpd.server_close()
        if hold_port:
            self._held = _hold(port)
        httpd.drop_connections(timeout / 2)
        if self._thread is not None:
            self._thread.join(timeout)
        if httpd.errors:
            raise RuntimeError(f"the fake API server failed on {len(httpd.errors)} request(s)") from httpd.errors[0]

    def __enter__(self) -> FakeKubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write a kubeconfig whose current context points at this server (no auth) and return its path
        (:func:`testrigs.kubeconfig.write_kubeconfig`)."""
        return write_kubeconfig(path, self.url, namespace=namespace)

    # ----- request log ---------------------------------------------------------------------------
    def _record(self, req: Request, raw_query: str) -> None:
        entry = RecordedRequest(
            req.method,
            req.path,
            {k: v[-1] for k, v in req.query.items()},
            req.content_type,
            raw_query,
            req.body,
            dict(req.headers.items()),
        )
        with self._requests_changed:
            self._requests.append(entry)
            self._requests_changed.notify_all()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._requests_changed:
            return list(self._requests)

    def requests_arriving(self) -> dict[str, int]:
        """Requests whose headers came but whose body is still being read, by method and path."""
        if self._httpd is None:
            return {}
        with self._httpd._lock:
            return dict(self._httpd.arrivals)

    def clear_requests(self) -> None:
        with self._requests_changed:
            self._requests.clear()

    def wait_for_request(self, predicate: Callable[[RecordedRequest], bool], timeout: float = 5.0) -> RecordedRequest:
        """The first logged request matching ``predicate`` (waiting up to ``timeout``); TimeoutError otherwise."""
        with self._requests_changed:
            found: list[RecordedRequest] = []

            def match() -> bool:
                found[:] = [r for r in self._requests if predicate(r)][:1]
                return bool(found)

            if not self._requests_changed.wait_for(match, timeout):
                raise TimeoutError("no matching request")
            return found[0]

    def _bookmark_sent(self, rt: ResourceType) -> None:
        with self._bookmarks_changed:
            self._bookmarks[rt] = self._bookmarks.get(rt, 0) + 1
            self._bookmarks_changed.notify_all()

    def bookmarks_sent(self, resource: ResourceRef) -> int:
        """How many BOOKMARK events watch streams on ``resource`` have sent so far (all streams together)."""
        with self._bookmarks_changed:
            return self._bookmarks.get(resolve_resource(resource), 0)

    def wait_for_bookmarks(self, resource: ResourceRef, count: int, timeout: float = 5.0) -> None:
        """Block until streams on ``resource`` have sent ``count`` BOOKMARKs in all (TimeoutError otherwise).

        A bookmark counted after a change was committed may still carry the version before it (it
        was taken just before); the next one on the same stream carries the change's version.
        """
        rt = resolve_resource(resource)
        with self._bookmarks_changed:
            if not self._bookmarks_changed.wait_for(lambda: self._bookmarks.get(rt, 0) >= count, timeout):
                raise TimeoutError(f"{self._bookmarks.get(rt, 0)} bookmark(s) sent on {rt.plural}, wanted {count}")

    def watch_count(self, resource: ResourceRef) -> int:
        """How many watch streams on ``resource`` are open right now."""
        return len(self.store.watchers(resolve_resource(resource)))

    def wait_for_watchers(self, resource: ResourceRef, count: int = 1, timeout: float = 5.0) -> None:
        """Block until at least ``count`` watch streams on ``resource`` are open (TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout
        while self.watch_count(resource) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.watch_count(resource)} watcher(s) on {resource}, wanted {count}")
            time.sleep(0.01)

    # ----- generic objects -----------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        return str(self.store.resource_version)

    def upsert(self, resource: ResourceRef, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite an object as a controller would: no validation, no preconditions.

        A ``metadata.uid`` different from the stored one replaces the object (DELETED, then ADDED).
        """
        return copy.deepcopy(self.store.put(resolve_resource(resource), obj))

    def get(self, resource: ResourceRef, name: str, namespace: str = "default") -> dict[str, Any] | None:
        """The object (a copy), or None; ``namespace`` is ignored for cluster-scoped resources."""
        rt = resolve_resource(resource)
        return copy.deepcopy(self.store.find(rt, namespace if rt.namespaced else "", name))

    def delete(
        self, resource: ResourceRef, name: str, namespace: str = "default", cascade: bool = True
    ) -> dict[str, Any]:
        """Delete an object (KeyError if absent); dependents are garbage-collected when ``cascade``."""
        rt = resolve_resource(resource)
        namespace = namespace if rt.namespaced else ""
        if self.store.find(rt, namespace, name) is None:
            raise KeyError(f"{rt.plural} {namespace}/{name} not found")
        return copy.deepcopy(self.store.delete(rt, namespace, name, cascade=cascade))

    def objects(self, resource: ResourceRef, namespace: str | None = None) -> list[dict[str, Any]]:
        """A snapshot of every object of ``resource`` (in ``namespace``, or all)."""
        return copy.deepcopy(self.store.select(resolve_resource(resource), Selection(namespace)))

    # ----- namespaces ----------------------------------------------------------------------------
    def create_namespace(self, name: str) -> dict[str, Any]:
        """The Namespace ``name`` (created when missing; ``default`` exists from the start).

        The API refuses to create objects in a missing namespace (404 ``namespaces "x" not found``); the
        test-control methods (``upsert``, ``create_pod``, …) create it implicitly instead.
        """
        return copy.deepcopy(self.store.ensure_namespace(name))

    def delete_namespace(self, name: str) -> dict[str, Any]:
        """Delete the Namespace ``name`` and every object in it at once (KeyError if absent)."""
        if not self.store.namespace_exists(name):
            raise KeyError(f"namespace {name} not found")
        return copy.deepcopy(self.store.delete(NAMESPACES, "", name))

    # ----- pods ----------------------------------------------------------------------------------
    def create_pod(
        self,
        name: str,
        uid: str | None = None,
        namespace: str = "default",
        ready: bool = True,
        containers: Sequence[str] = ("main",),
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A running Pod with the given container readiness (uid random unless given).

        Labels default to ``nvidia.com/dynamo-discovery-enabled=true``, which the reference runtime's
        container mode selects Pods by; pass ``labels={}`` for an unlabelled Pod.
        """
        labels = {DISCOVERY_LABEL: "true"} if labels is None else labels
        pod = build_pod(name, namespace, uid or str(uuid.uuid4()), containers, ready, labels)
        return self.upsert(PODS, pod)

    def _pod(self, name: str, namespace: str) -> dict[str, Any]:
        pod = self.store.find(PODS, namespace, name)
        if pod is None:
            raise KeyError(f"pod {namespace}/{name} not found")
        return pod

    def set_pod_ready(
        self, name: str, ready: bool, container: str | None = None, namespace: str = "default"
    ) -> dict[str, Any]:
        """Flip ``status.containerStatuses[].ready`` (one container or all) and the Ready conditions."""
        with self.store.locked():
            return self.upsert(PODS, with_readiness(self._pod(name, namespace), ready, container))

    def delete_pod(self, name: str, namespace: str = "default", graceful: bool = False) -> None:
        """Delete a Pod and garbage-collect what it owns.

        ``graceful``: first a MODIFIED event with ``deletionTimestamp`` set and containers unready.
        """
        with self.store.locked():
            if graceful:
                terminating = with_readiness(self._pod(name, namespace), False)
                terminating["metadata"]["deletionTimestamp"] = now()
                terminating["metadata"]["deletionGracePeriodSeconds"] = 30
                self.upsert(PODS, terminating)
            self.delete(PODS, name, namespace)

    # ----- endpoint slices -----------------------------------------------------------------------
    def upsert_endpoint_slice(
        self,
        name: str,
        targets: Iterable[Target],
        labels: dict[str, str] | None = None,
        namespace: str = "default",
    ) -> dict[str, Any]:
        """An EndpointSlice with one endpoint per (pod name, pod uid, ready); labelled for dynamo by default."""
        if labels is None:
            labels = {DISCOVERY_LABEL: "true", SERVICE_NAME_LABEL: name}
        ips = {
            p["metadata"]["name"]: p.get("status", {}).get("podIP", "")
            for p in self.store.select(PODS, Selection(namespace))
        }
        return self.upsert(ENDPOINT_SLICES, build_endpoint_slice(name, namespace, targets, labels, ips))

    def delete_endpoint_slice(self, name: str, namespace: str = "default") -> None:
        self.delete(ENDPOINT_SLICES, name, namespace)

    def _sync_auto_slice(self, change: Change) -> None:
        """Keep slice ``dynamo-workers`` of each namespace listing all its pods (the EndpointSlice controller)."""
        if change.resource != PODS:
            return
        namespace = change.current["metadata"]["namespace"]
        pods = self.store.select(PODS, Selection(namespace))
        targets = [(p["metadata"]["name"], p["metadata"]["uid"], pod_is_ready(p)) for p in pods]
        ips = {p["metadata"]["name"]: p.get("status", {}).get("podIP", "") for p in pods}
        terminating = [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]
        labels = {
            DISCOVERY_LABEL: "true",
            SERVICE_NAME_LABEL: AUTO_SLICE_NAME,
            MANAGED_BY_LABEL: "endpointslice-controller.k8s.io",
        }
        self.store.put(
            ENDPOINT_SLICES, build_endpoint_slice(AUTO_SLICE_NAME, namespace, targets, labels, ips, terminating)
        )

    # ----- faults and cluster state ----------------------------------------------------------------
    def compact(self) -> str:
        """Drop the watch history and continue tokens: older resourceVersions now get 410. Returns the floor."""
        return str(self.store.compact())

    def expire_watches(self, resource: ResourceRef | None = None) -> str:
        """Compact and end open watch streams (all, or one resource's) with a 410 Expired ERROR event.

        Events a stream had not sent yet are dropped and watches from versions older than the
        current one get 410 too, so clients must list again. Returns the new floor.
        """
        return str(self.store.expire_watchers(resolve_resource(resource) if resource else None))

    def end_watches(self, resource: ResourceRef | None = None) -> None:
        """Cleanly end open watch streams (all, or one resource's), as an API server restart would."""
        self.store.close_watchers(resolve_resource(resource) if resource else None)

    @property
    def crd_installed(self) -> bool:
        return self.api.crd_installed

    def set_crd_installed(self, installed: bool) -> None:
        """Uninstalling deletes every DynamoWorkerMetadata and ends their watches; the API then answers 404."""
        if not installed and self.api.crd_installed:
            self.api.crd_installed = False
            self.store.drop_all(WORKER_METADATA)
        self.api.crd_installed = installed

    def set_valid_tokens(self, tokens: Iterable[str] | None) -> None:
        """Accept only these bearer tokens (another one: 401 ``Unauthorized``); None (the default): any.
        Requests without a token are anonymous and always accepted."""
        self.api.valid_tokens = None if tokens is None else frozenset(tokens)

    def deny(self, resource: ResourceRef | None, verb: str = "*") -> None:
        """Answer 403 Forbidden to ``verb`` (get, list, watch, create, update, patch, delete, … or ``*``)."""
        self.faults.deny(resolve_resource(resource) if resource else None, verb)

    def allow(self, resource: ResourceRef | None, verb: str = "*") -> None:
        """Undo :meth:`deny` for exactly that (resource, verb)."""
        self.faults.deny(resolve_resource(resource) if resource else None, verb, denied=False)

    def fail_next(
        self,
        n: int = 1,
        code: int = 500,
        *,
        resource: ResourceRef | None = None,
        verb: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Fail the next ``n`` resource requests (optionally only of one resource/verb) with ``code``.

        ``retry_after`` adds a ``Retry-After`` header; note that urllib3 (inside the official client) then
        retries 413/429/503 answers by itself, so the caller never sees them.
        """
        rt = resolve_resource(resource) if resource else None
        self.faults.fail_next(n, code, rt, verb, message, retry_after)


def _hold(port: int) -> socket.socket:
    """A TCP socket bound to 127.0.0.1:``port`` that never listens: connections to it are refused."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
    except BaseException:
        with contextlib.suppress(OSError):
            held.close()
        raise
    return held
