"""A test rig on an existing Kubernetes cluster, known only by its kubeconfig (kind, k3s, a real one, or a
:class:`testrigs.kube_fake.FakeKubeServer` in another process).

:class:`KubeCluster` holds what tests share on the cluster: a Node of the rig's own (pods are bound to it,
so the pod-GC controller keeps them; no kubelet runs them) and the DynamoWorkerMetadata CRD, each created
when missing and labelled as the rig's. :meth:`KubeCluster.open_namespace` gives a test a fresh namespace
with a Service selecting its pods; :meth:`RigNamespace.start_pod` makes a pod as a kubelet would (created
bound to the Node, then Running and Ready with a 192.0.2.x podIP through ``pods/{name}/status``).

Readiness reaches the library through EndpointSlices. The cluster's own EndpointSlice controller makes them
when it runs (a real cluster); when its slice does not show up within :data:`SLICE_CONTROLLER_GRACE`
seconds (a bare API server, or the fake), the rig writes the slice itself in the controller's shape
(tests/fixtures/kube-apiserver-1.28/endpointslices_pod_start.json).

No kubelet posts the Node's status, so a cluster that runs the node lifecycle controller (kind, k3s)
would take the Node for dead after its grace period (40 s), mark its pods not ready and evict them: while
a :class:`KubeCluster` uses the Node, a thread of its own (``discovery-sync-test-node-heartbeat``)
reports it Ready every :data:`NODE_HEARTBEAT` seconds through ``nodes/{name}/status``, as a kubelet does.

Clean-up: :meth:`RigNamespace.close` force-deletes the pods (there is no kubelet to confirm a graceful
delete) and deletes the namespace; :meth:`KubeCluster.close` deletes the Node and the CRD only when the
rig created them (its label) and no other rig namespace is active (other pytest-xdist workers on the same
cluster). A worker that starts to use one touches it (an annotation, a new resourceVersion) after creating
its namespace, and the delete carries the resourceVersion read before that check as a precondition, so a
delete never races past a new user.

Every call goes through the official client's ``ApiClient`` with the kubeconfig's own user and raw JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config

log = logging.getLogger("testrigs.kube_cluster")

DISCOVERY_LABEL = "nvidia.com/dynamo-discovery-enabled"  # what the library's pod mode selects by
RIG_LABEL = "discovery-sync.test/rig"  # "true" on every namespace a rig made
MADE_BY_LABEL = "app.kubernetes.io/managed-by"
MADE_BY = "discovery-sync-test-rig"  # on a Node or CRD the rig created (only those does it delete)
USER_ANNOTATION = "discovery-sync.test/last-user"  # touched by each namespace that starts to use a shared object
NODE_NAME = "discovery-sync-test-node"
SERVICE_NAME = "dynamo-workers"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGED_BY = {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
PORTS = [{"name": "http", "protocol": "TCP", "port": 8000}]
HOST_IP = "192.0.2.1"  # TEST-NET-1: never routed
NODE_HEARTBEAT = 10.0  # seconds between the Node's status reports (the node lifecycle controller allows 40)
SLICE_CONTROLLER_GRACE = 2  # seconds for the cluster's EndpointSlice controller to show the Service's slice
WAIT = 60.0  # bound on every wait for the cluster (a CRD established, a deleted one gone, a slice updated)
REQUEST_TIMEOUT = 30.0
MERGE_PATCH = "application/merge-patch+json"

NAMESPACES = "/api/v1/namespaces"
NODES = "/api/v1/nodes"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_MANIFEST = Path(__file__).resolve().parents[1] / "backends" / "kube" / "manifests" / "crd.yaml"

Object = dict[str, Any]


class ClusterError(Exception):
    """An answer that is not 2xx: its HTTP status and the Status message."""

    def __init__(self, method: str, path: str, status: int, body: bytes):
        try:
            message = json.loads(body).get("message", "")
        except ValueError:
            message = body[:200].decode(errors="replace")
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _established(crd: Object) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _deleting(obj: Object) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


class ClusterApi:
    """Raw JSON requests through the official client (the kubeconfig's server, TLS and credentials)."""

    def __init__(self, kubeconfig: Path):
        self.api_client = config.new_client_from_config(config_file=str(kubeconfig))

    def close(self) -> None:
        self.api_client.close()

    def _send(self, method: str, path: str, body: Object | None, query: dict[str, str], content_type: str) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query.items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        timeout = float(query["timeoutSeconds"]) + REQUEST_TIMEOUT if "timeoutSeconds" in query else REQUEST_TIMEOUT
        return self.api_client.call_api(*serialized, _request_timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Object | None = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Object:
        """The answer's JSON; :class:`ClusterError` for an answer that is not 2xx."""
        response = self._send(method, path, body, query or {}, content_type)
        data: bytes = response.read()
        if not 200 <= response.status < 300:
            raise ClusterError(method, path, response.status, data)
        answer: Object = json.loads(data)
        return answer

    def find(self, path: str) -> Object | None:
        """GET ``path``; None for 404."""
        try:
            return self.request("GET", path)
        except ClusterError as err:
            if err.status == 404:
                return None
            raise

    def merge_patch(self, path: str, patch: Object) -> Object:
        return self.request("PATCH", path, patch, content_type=MERGE_PATCH)

    def delete(self, path: str, options: Object | None = None, query: dict[str, str] | None = None) -> bool:
        """DELETE ``path``; False when it was already gone."""
        try:
            self.request("DELETE", path, options, query=query)
        except ClusterError as err:
            if err.status == 404:
                return False
            raise
        return True

    def _events(self, collection: str, query: dict[str, str], timeout: float) -> Iterator[Object]:
        """The objects of a watch on ``collection`` (``query`` holds the resourceVersion), as they change;
        a DELETED object comes with ``"deleted": True`` set on its copy."""
        seconds = max(1, math.ceil(timeout))
        response = self._send("GET", collection, None, {**query, "watch": "true", "timeoutSeconds": str(seconds)}, "")
        stream = response.response
        ended = False
        try:
            if not 200 <= response.status < 300:
                raise ClusterError("WATCH", collection, response.status, stream.read())
            for line in stream:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    raise ClusterError("WATCH", collection, int(event["object"].get("code", 500)), line)
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    yield {**event["object"], "deleted": event["type"] == "DELETED"}
            ended = True
        finally:
            if not ended:  # the stream is still open: its connection cannot serve another request
                stream.close()
            stream.release_conn()

    def wait_for(
        self,
        collection: str,
        predicate: Callable[[list[Object]], bool],
        timeout: float,
        labels: str | None = None,
        name: str | None = None,
    ) -> bool:
        """Block until ``predicate(objects of collection)`` holds (listed, then followed by a watch);
        False when ``timeout`` seconds pass first. ``labels``: a label selector; ``name``: that object only."""
        query = {"labelSelector": labels} if labels else {}
        if name is not None:
            query["fieldSelector"] = f"metadata.name={name}"
        deadline = time.monotonic() + timeout
        while True:
            listed = self.request("GET", collection, query=query)
            objects = {o["metadata"]["name"]: o for o in listed.get("items") or []}
            if predicate(list(objects.values())):
                return True
            version = listed["metadata"]["resourceVersion"]
            try:
                for obj in self._events(collection, {**query, "resourceVersion": version}, deadline - time.monotonic()):
                    key = obj["metadata"]["name"]
                    if obj.pop("deleted"):
                        objects.pop(key, None)
                    else:
                        objects[key] = obj
                    if predicate(list(objects.values())):
                        return True
            except ClusterError as err:
                if err.status != 410:  # 410 Gone: the version listed is too old by now; list again
                    raise
            if time.monotonic() >= deadline:
                return False

    def wait_until_gone(self, collection: str, name: str, timeout: float) -> None:
        if not self.wait_for(collection, lambda objects: not objects, timeout, name=name):
            raise TimeoutError(f"{collection}/{name} still exists after {timeout} s")


def _shared_node() -> Object:
    labels = {MADE_BY_LABEL: MADE_BY, "kubernetes.io/hostname": NODE_NAME}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": labels}}


def _shared_crd() -> Object:
    crd: Object = yaml.safe_load(CRD_MANIFEST.read_text())
    crd["metadata"].setdefault("labels", {})[MADE_BY_LABEL] = MADE_BY
    return crd


class KubeCluster:
    """One cluster for a test process: its shared Node and CRD, and a fresh namespace per test."""

    def __init__(self, kubeconfig: Path, slice_controller: bool | None = None):
        """``slice_controller``: whether the cluster runs an EndpointSlice controller (None: find out
        with the first namespace, waiting up to :data:`SLICE_CONTROLLER_GRACE` s for its slice)."""
        self.kubeconfig = kubeconfig
        self.api = ClusterApi(kubeconfig)
        self.slice_controller = slice_controller
        self._closing = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def open_namespace(self) -> RigNamespace:
        """A new namespace (labelled :data:`RIG_LABEL`) with the Node and the CRD there for it, and the
        Service (and, without a controller, the EndpointSlice) its pods are served through."""
        name = f"ds-contract-{uuid.uuid4().hex[:10]}"
        self.api.request("POST", NAMESPACES, {"metadata": {"name": name, "labels": {RIG_LABEL: "true"}}})
        namespace = RigNamespace(self, name)
        try:
            self._acquire(NODES, _shared_node(), name)
            self._keep_node_ready()
            self._acquire(CRDS, _shared_crd(), name, ready=_established)
            namespace.serve()
        except BaseException:
            namespace.close()
            raise
        return namespace

    def _keep_node_ready(self) -> None:
        """Report the Node Ready now and, on a thread of its own, every :data:`NODE_HEARTBEAT` s."""
        self._report_node_ready()
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(
                target=self._beat, name="discovery-sync-test-node-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        while not self._closing.wait(NODE_HEARTBEAT):
            try:
                self._report_node_ready()
            except Exception as exc:  # the Node released by another worker, a cluster hiccup: next beat
                log.warning("could not report the test Node ready: %s", exc)

    def _report_node_ready(self) -> None:
        now = _now()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "reported by the discovery-sync test rig",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        with contextlib.suppress(ClusterError):  # 404: released by another worker; the next test acquires it again
            self.api.merge_patch(f"{NODES}/{NODE_NAME}/status", {"status": {"conditions": [ready]}})

    def close(self) -> None:
        """Delete the shared objects the rig created, unless another rig namespace still uses them."""
        self._closing.set()
        if self._heartbeat is not None:
            self._heartbeat.join(REQUEST_TIMEOUT)
        try:
            self._release(CRDS, _shared_crd()["metadata"]["name"])
            self._release(NODES, NODE_NAME)
        finally:
            self.api.close()

    def _acquire(
        self, collection: str, wanted: Object, user: str, ready: Callable[[Object], bool] | None = None
    ) -> None:
        """Make sure the object ``wanted`` exists (and is ``ready``) for the namespace ``user``: touch it
        when the rig made it, wait out a deletion in progress, create it when missing."""
        name = wanted["metadata"]["name"]
        path = f"{collection}/{name}"
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = self.api.find(path)
            if found is not None and found["metadata"].get("labels", {}).get(MADE_BY_LABEL) == MADE_BY:
                with contextlib.suppress(ClusterError):  # 404: deleted meanwhile, found is stale
                    found = self.api.merge_patch(path, {"metadata": {"annotations": {USER_ANNOTATION: user}}})
            if found is not None and _deleting(found):
                self.api.wait_until_gone(collection, name, deadline - time.monotonic())
                continue
            if found is None:
                try:
                    found = self.api.request("POST", collection, wanted)
                except ClusterError as err:
                    if err.status == 409:  # another worker created it first
                        continue
                    raise
            if ready is not None and not ready(found):

                def shows_ready(objects: list[Object]) -> bool:
                    return any(ready(o) for o in objects)

                if not self.api.wait_for(collection, shows_ready, deadline - time.monotonic(), name=name):
                    break
            return
        raise TimeoutError(f"{path} was not there and ready within {WAIT} s")

    def _release(self, collection: str, name: str) -> None:
        path = f"{collection}/{name}"
        for _ in range(5):
            found = self.api.find(path)
            if found is None or _deleting(found) or found["metadata"].get("labels", {}).get(MADE_BY_LABEL) != MADE_BY:
                return
            if self._rig_namespaces_in_use():
                return
            version = found["metadata"]["resourceVersion"]
            try:
                self.api.delete(path, {"preconditions": {"resourceVersion": version}})
                return
            except ClusterError as err:
                if err.status != 409:  # 409: touched since we read it; look again
                    raise

    def _rig_namespaces_in_use(self) -> bool:
        listed = self.api.request("GET", NAMESPACES, query={"labelSelector": f"{RIG_LABEL}=true"})
        return any(
            not _deleting(ns) and (ns.get("status") or {}).get("phase") != "Terminating"
            for ns in listed.get("items") or []
        )


@dataclass
class _Pod:
    name: str
    uid: str
    ip: str
    ready: bool


@dataclass
class RigNamespace:
    """One test's namespace: its pods, its Service and (without a controller) the slice the rig keeps."""

    cluster: KubeCluster
    name: str
    pods: list[_Pod] = field(default_factory=list)
    own_slice: str | None = None  # the slice the rig writes, when the cluster has no controller

    @property
    def _api(self) -> ClusterApi:
        return self.cluster.api

    @property
    def _slices(self) -> str:
        return f"/apis/discovery.k8s.io/v1/namespaces/{self.name}/endpointslices"

    def serve(self) -> None:
        """Create the Service selecting this namespace's pods; find out (once per cluster) whether an
        EndpointSlice controller makes its slice, and make the slice here when none does."""
        service = {
            "metadata": {"name": SERVICE_NAME, "labels": {DISCOVERY_LABEL: "true"}},
            "spec": {
                "selector": {DISCOVERY_LABEL: "true"},
                "ports": [{"name": "http", "protocol": "TCP", "port": 8000, "targetPort": 8000}],
            },
        }
        created = self._api.request("POST", f"/api/v1/namespaces/{self.name}/services", service)
        if self.cluster.slice_controller is None:
            self.cluster.slice_controller = self._api.wait_for(
                self._slices, bool, SLICE_CONTROLLER_GRACE, labels=f"{SERVICE_NAME_LABEL}={SERVICE_NAME}"
            )
        if not self.cluster.slice_controller:
            self.own_slice = self._create_slice(created)

    def _create_slice(self, service: Object) -> str:
        """The Service's slice as the controller first writes it: no endpoints, no ports yet."""
        owner = {"apiVersion": "v1", "kind": "Service", "name": SERVICE_NAME, "uid": service["metadata"]["uid"]}
        labels = {**service["metadata"]["labels"], SERVICE_NAME_LABEL: SERVICE_NAME, **SLICE_MANAGED_BY}
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "generateName": f"{SERVICE_NAME}-",
                "labels": labels,
                "annotations": {TRIGGER_TIME: _now()},
                "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
            },
            "addressType": "IPv4",
            "endpoints": None,
            "ports": None,
        }
        name: str = self._api.request("POST", self._slices, body)["metadata"]["name"]
        return name

    def start_pod(self, name: str) -> str:
        """Create pod ``name`` bound to the rig's Node and labelled for discovery, report it Running and
        Ready with its own podIP, and return its uid once an EndpointSlice lists it ready."""
        if len(self.pods) >= 250:
            raise RuntimeError("a rig namespace has 250 TEST-NET pod addresses")
        pods = f"/api/v1/namespaces/{self.name}/pods"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {DISCOVERY_LABEL: "true"}},
            "spec": {
                "nodeName": NODE_NAME,
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "main", "image": "registry.invalid/main:latest"}],
            },
        }
        uid: str = self._api.request("POST", pods, body)["metadata"]["uid"]
        pod = _Pod(name, uid, f"192.0.2.{len(self.pods) + 2}", ready=True)
        self._api.merge_patch(f"{pods}/{name}/status", {"status": _running_status(pod)})
        self.pods.append(pod)
        if self.own_slice is not None:
            self._write_slice()
        elif not self._api.wait_for(self._slices, lambda slices: _lists_ready(slices, uid), WAIT, _DISCOVERY_SELECTOR):
            raise TimeoutError(f"no EndpointSlice listed pod {self.name}/{name} ready within {WAIT} s")
        return uid

    def _write_slice(self) -> None:
        """The slice with one endpoint per pod, as the controller keeps it."""
        endpoints = [
            {
                "addresses": [pod.ip],
                "conditions": {"ready": pod.ready, "serving": pod.ready, "terminating": False},
                "targetRef": {"kind": "Pod", "namespace": self.name, "name": pod.name, "uid": pod.uid},
                "nodeName": NODE_NAME,
            }
            for pod in self.pods
        ]
        patch = {"metadata": {"annotations": {TRIGGER_TIME: _now()}}, "endpoints": endpoints, "ports": PORTS}
        self._api.merge_patch(f"{self._slices}/{self.own_slice}", patch)

    def close(self) -> None:
        """Force-delete the pods (no kubelet confirms a graceful delete), then delete the namespace."""
        try:
            self._api.delete(
                f"/api/v1/namespaces/{self.name}/pods", {"gracePeriodSeconds": 0}, query={"gracePeriodSeconds": "0"}
            )
        finally:
            self._api.delete(f"{NAMESPACES}/{self.name}")


_DISCOVERY_SELECTOR = f"{DISCOVERY_LABEL}=true"


def _running_status(pod: _Pod) -> Object:
    """What a kubelet reports for a started pod whose one container is (or is not) ready."""
    when = _now()
    ready = "True" if pod.ready else "False"
    return {
        "phase": "Running",
        "hostIP": HOST_IP,
        "podIP": pod.ip,
        "podIPs": [{"ip": pod.ip}],
        "startTime": when,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": when},
            {"type": "Ready", "status": ready, "lastTransitionTime": when},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": when},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": when},
        ],
        "containerStatuses": [
            {
                "name": "main",
                "ready": pod.ready,
                "started": True,
                "restartCount": 0,
                "image": "registry.invalid/main:latest",
                "imageID": "",
                "state": {"running": {"startedAt": when}},
            }
        ],
    }


def _lists_ready(slices: list[Object], uid: str) -> bool:
    return any(
        (endpoint.get("targetRef") or {}).get("uid") == uid and (endpoint.get("conditions") or {}).get("ready")
        for item in slices
        for endpoint in item.get("endpoints") or []
    )
