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
    controller_endpoint,
    controller_slice,
    with_readiness,
)
from .resources import ENDPOINT_SLICES, NAMESPACES, PODS, WORKER_METADATA, ResourceType, resolve_resource
from .selectors import Selection
from .store import Store
from .transport import HttpServer, Lifecycle
from .watch import Change

AUTO_SLICE_NAME = "dynamo-workers"
# Timings of a real kube-apiserver 1.28 (tests/fixtures/kube-apiserver-1.28/), in seconds before time_scale
WATCH_GRACE = 60.0  # graceful shutdown: how long open watches are kept (silent) before their clean end
PATHS_INSTALLING = 1.0  # after a restart: custom resources answer 503 this long
NOT_READY = 2.2  # after a restart: /readyz answers 500 this long
GC_DELAY = 0.03  # the garbage collector deletes a dependent this long after its owners are gone
RESTART_REVISIONS = 2  # a restarted server's own writes (leases, ...) move the revision on
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
        bookmark_interval: float = 60.0,
        time_scale: float = 1.0,
        history_limit: int = 1000,
        auto_endpoint_slices: bool = False,
        garbage_collector: bool = True,
        validate: bool = True,
        port: int = 0,
    ):
        """``port``: the loopback port to serve on (0: one the OS chooses), e.g. a free port a
        client was told before the server started.

        Watches behave as on a real server: no BOOKMARK until the resource type changed after the
        version the stream started from; then one every ``bookmark_interval`` seconds (a real server:
        once a minute) and one ``2 s`` before ``timeoutSeconds``. ``time_scale`` multiplies the real
        server's other timings (``timeoutSeconds`` and those 2 s, the graceful-shutdown watch grace,
        the restart's 503 and not-ready phases, the 504 wait for a future resourceVersion, the
        garbage collector's delay) so tests can run them fast. ``history_limit``: the changes each
        resource's watch cache holds (older resume versions get 410).

        ``auto_endpoint_slices`` runs an EndpointSlice controller, ``garbage_collector`` a garbage
        collector (:meth:`set_garbage_collector`): the controller manager's parts the fake emulates.
        """
        self.bookmark_interval = bookmark_interval
        self.time_scale = time_scale
        self._port = port
        self.store = Store(history_limit, gc_delay=GC_DELAY * time_scale)
        self.store.set_garbage_collector(garbage_collector)
        self.faults = Faults()
        self.api = KubeApi(self.store, self.faults, lambda: f"127.0.0.1:{self.port}")
        self.api.validate = validate
        self.api.time_scale = time_scale
        self.lifecycle = Lifecycle(time_scale)
        self._requests: list[RecordedRequest] = []
        self._requests_changed = threading.Condition()
        self._bookmarks: dict[ResourceType, int] = {}
        self._bookmarks_changed = threading.Condition()
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._held: socket.socket | None = None  # the port kept while stopped (bound, not listening)
        self.store.add_hook(crd_establisher(self.store, self.set_crd_installed))
        self._shutdown: threading.Thread | None = None  # a graceful shutdown in progress
        self._started_before = False
        if auto_endpoint_slices:
            self.store.add_hook(self._sync_auto_slice)

    # ----- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeKubeServer:
        """Serve; after :meth:`stop` with ``hold_port`` (or :meth:`shut_down_gracefully`), serve the
        same objects again on the same port: an API server restarted in front of the same etcd.

        A restart behaves as a real one: the watch caches start anew at the current revision (moved on
        by the server's own writes), so watches from older versions get 410; custom resources answer
        503 "the request has been made before all known HTTP paths have been installed" for 1 s and
        ``/readyz`` 500 for 2.2 s (times ``time_scale``).
        """
        if self._httpd is not None and not self._httpd.stopping.is_set():
            raise RuntimeError("already started")
        if self._shutdown is not None:
            self._shutdown.join()
            self._shutdown = None
        if self._held is not None:
            self._port = self._held.getsockname()[1]
            self._held.close()  # both sockets allow address reuse: the listener binds at once
            self._held = None
        if self._started_before:
            self.store.reinitialise_watch_cache(advance=RESTART_REVISIONS)
            self.lifecycle.restarted(PATHS_INSTALLING, NOT_READY)
        self._started_before = True
        self._httpd = HttpServer(
            self.api,
            self._record,
            lambda: self.bookmark_interval,
            self._bookmark_sent,
            port=self._port,
            lifecycle=self.lifecycle,
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
        if self._shutdown is not None:  # cut a graceful shutdown's watch grace short
            if self._httpd is not None:
                self._httpd.stopping.set()
            self._shutdown.join(timeout)
            self._shutdown = None
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

    def shut_down_gracefully(self, watch_grace: float | None = None) -> None:
        """SIGTERM, as a real kube-apiserver 1.28 with default flags takes it; returns at once.

        New connections are refused from now on (the port stays held for a later :meth:`start`), an
        idle kept-alive connection is closed without a response, ``/readyz`` is refused too; open
        watch streams get nothing more and end cleanly after ``watch_grace`` seconds (default 60 s
        times ``time_scale``), then the server is stopped. :meth:`wait_shut_down` waits for that.
        """
        httpd = self._httpd
        if httpd is None or httpd.stopping.is_set():
            raise RuntimeError("not serving")
        grace = WATCH_GRACE * self.time_scale if watch_grace is None else watch_grace
        port = httpd.server_address[1]
        httpd.refuse()
        self._held = _hold(port)
        self._shutdown = threading.Thread(
            target=self._finish_shutdown, args=(httpd, grace), name="kube-fake-shutdown", daemon=True
        )
        self._shutdown.start()

    def _finish_shutdown(self, httpd: HttpServer, grace: float) -> None:
        httpd.stopping.wait(grace)
        httpd.stopping.set()
        self.store.close_watchers()
        httpd.wait_streams_closed(2.5)
        httpd.drop_connections(2.5)
        if self._thread is not None:
            self._thread.join(5.0)

    def wait_shut_down(self, timeout: float = 5.0) -> None:
        """Block until a :meth:`shut_down_gracefully` has ended every stream (TimeoutError otherwise)."""
        if self._shutdown is not None:
            self._shutdown.join(timeout)
            if self._shutdown.is_alive():
                raise TimeoutError("the graceful shutdown is still going on")

    def __enter__(self) -> FakeKubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("not started")
        return int(self._httpd.server_address[1])

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
        """Delete an object at once (KeyError if absent; a Pod: force-deleted, MODIFIED then DELETED);
        dependents are garbage-collected soon after when ``cascade``, else orphaned (kept as they are)."""
        rt = resolve_resource(resource)
        namespace = namespace if rt.namespaced else ""
        if self.store.find(rt, namespace, name) is None:
            raise KeyError(f"{rt.plural} {namespace}/{name} not found")
        return copy.deepcopy(self.store.delete(rt, namespace, name, cascade=cascade, grace=0))

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
        """Delete a Pod as on a real cluster; what it owns is garbage-collected soon after it is gone.

        ``graceful=False`` (a force delete): MODIFIED with ``deletionTimestamp``, then DELETED.
        ``graceful=True``: the whole life of a graceful delete with a kubelet: MODIFIED with
        ``deletionTimestamp`` (terminating, Ready unchanged), the kubelet's status update (Ready
        False), then its final delete (MODIFIED, DELETED). :meth:`terminate_pod` stops after the first.
        """
        with self.store.locked():
            pod = self._pod(name, namespace)
            if graceful:
                self.terminate_pod(name, namespace)
                self.upsert(PODS, with_readiness(self._pod(name, namespace), False))
            self.store.delete(PODS, namespace, name, {"uid": pod["metadata"]["uid"]}, grace=0)

    def terminate_pod(self, name: str, namespace: str = "default", grace: int = 30) -> dict[str, Any]:
        """A graceful delete with no kubelet to finish it: the Pod stays, terminating (``deletionTimestamp``
        ``grace`` seconds on), and what it owns stays too."""
        with self.store.locked():
            self._pod(name, namespace)
            return copy.deepcopy(self.store.delete(PODS, namespace, name, grace=grace))

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
        """The EndpointSlice controller for Service ``dynamo-workers`` (selector: the discovery label) of
        each namespace: one endpoint per selected pod with an IP, conditions as the real controller
        derives them (:func:`~.objects.controller_endpoint`); the slice carries the Service's labels.
        It acts at once, in the commit chain (a real one takes ~10 ms)."""
        if change.resource == PODS:
            self.sync_endpoint_slice(change.current["metadata"]["namespace"])

    def sync_endpoint_slice(self, namespace: str = "default") -> dict[str, Any]:
        """The slice of Service ``dynamo-workers`` in ``namespace`` as its controller keeps it (created at
        once, with ``"endpoints": null``, when the Service exists before any pod); pod changes call this."""
        pods = self.store.select(PODS, Selection(namespace))
        endpoints = [
            endpoint
            for pod in pods
            if (pod["metadata"].get("labels") or {}).get(DISCOVERY_LABEL) == "true"
            and (endpoint := controller_endpoint(pod)) is not None
        ]
        labels = {
            DISCOVERY_LABEL: "true",
            SERVICE_NAME_LABEL: AUTO_SLICE_NAME,
            MANAGED_BY_LABEL: "endpointslice-controller.k8s.io",
        }
        return copy.deepcopy(
            self.store.put(ENDPOINT_SLICES, controller_slice(AUTO_SLICE_NAME, namespace, endpoints, labels))
        )

    # ----- faults and cluster state ----------------------------------------------------------------
    def compact(self) -> str:
        """Compact etcd at the current revision (returned), as the API server does every 5 minutes.

        LISTs at an exact older version and continue tokens issued before it get 410; watches are
        not affected (the watch cache serves them): see :meth:`reinitialise_watch_cache`.
        """
        return str(self.store.compact())

    def reinitialise_watch_cache(self, resource: ResourceRef | None = None) -> str:
        """The watch cache (all resources', or one's) lists anew at the current revision, as when its
        etcd watch fails: open streams end cleanly and a watch resuming from an older version gets
        200 with one ERROR 410 "too old resource version". Returns the new oldest resumable version.

        A real server never ends an open stream with a 410 while its watch cache is on; to make a
        client's resume fail, move the revision on (any write) before calling this.
        """
        return str(self.store.reinitialise_watch_cache(resolve_resource(resource) if resource else None))

    def set_garbage_collector(self, running: bool) -> None:
        """Stop the garbage collector (the controller manager down: dependents of deleted owners stay)
        or start it again (it then looks at every object)."""
        self.store.set_garbage_collector(running)

    def wait_for_garbage_collection(self, timeout: float = 5.0) -> None:
        """Block until the garbage collector has nothing pending (TimeoutError otherwise)."""
        if not self.store.wait_for_garbage_collection(timeout):
            raise TimeoutError("the garbage collector still has work pending")

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
