"""Builders for the Pods and EndpointSlices the test-control API creates, shaped like the real ones."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

DISCOVERY_LABEL = "nvidia.com/dynamo-discovery-enabled"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"

# (pod name, pod uid, ready); name or uid may be None to leave targetRef incomplete
Target = tuple[str | None, str | None, bool]


def now(later: float = 0) -> str:
    """RFC 3339 UTC timestamp with second precision, as the API server writes them (``later`` seconds on)."""
    return (datetime.now(timezone.utc) + timedelta(seconds=later)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_ip(namespace: str, name: str) -> str:
    """A stable fake pod IP in 10.0.0.0/8 derived from the pod's name."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(digest[2], 1)}"


def _condition(kind: str, ok: bool, when: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": when}


def _container_status(name: str, ready: bool, when: str) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "started": True,
        "restartCount": 0,
        "image": f"registry.invalid/{name}:latest",
        "imageID": f"registry.invalid/{name}@sha256:{'0' * 64}",
        "containerID": f"containerd://{hashlib.sha256(name.encode()).hexdigest()}",
        "state": {"running": {"startedAt": when}},
    }


def _with_pod_conditions(status: dict[str, Any], when: str, previous: dict[str, Any] | None) -> None:
    """Set Ready/ContainersReady from the container statuses, keeping transition times that did not flip."""
    all_ready = all(c["ready"] for c in status["containerStatuses"])
    old = {c["type"]: c for c in (previous or {}).get("conditions", [])}
    conditions = []
    for kind, ok in (("PodReadyToStartContainers", True), ("Initialized", True), ("Ready", all_ready)):
        conditions.append(_condition(kind, ok, when))
    conditions.append(_condition("ContainersReady", all_ready, when))
    conditions.append(_condition("PodScheduled", True, when))
    for cond in conditions:
        before = old.get(cond["type"])
        if before and before.get("status") == cond["status"] and before.get("lastTransitionTime"):
            cond["lastTransitionTime"] = before["lastTransitionTime"]
    status["conditions"] = conditions


def build_pod(
    name: str,
    namespace: str,
    uid: str,
    containers: Sequence[str],
    ready: bool,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running Pod (uid preset, so tests can refer to it) with one status per container."""
    when = now()
    status: dict[str, Any] = {
        "phase": "Running",
        "hostIP": "192.168.0.10",
        "podIP": pod_ip(namespace, name),
        "podIPs": [{"ip": pod_ip(namespace, name)}],
        "startTime": when,
        "qosClass": "BestEffort",
        "containerStatuses": [_container_status(c, ready, when) for c in containers],
    }
    _with_pod_conditions(status, when, None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": dict(labels or {})},
        "spec": {
            "containers": [{"name": c, "image": f"registry.invalid/{c}:latest"} for c in containers],
            "nodeName": "kube-fake-node",
            "restartPolicy": "Always",
            "serviceAccountName": "default",
        },
        "status": status,
    }


def with_readiness(pod: dict[str, Any], ready: bool, container: str | None = None) -> dict[str, Any]:
    """A copy of ``pod`` with one container (or all of them) set to ``ready``."""
    updated = copy.deepcopy(pod)
    status = updated.setdefault("status", {})
    statuses = status.setdefault("containerStatuses", [])
    names = [c["name"] for c in statuses]
    if container is not None and container not in names:
        raise KeyError(f"pod {pod['metadata']['name']!r} has no container {container!r} (has {names})")
    for entry in statuses:
        if container is None or entry["name"] == container:
            entry["ready"] = ready
    _with_pod_conditions(status, now(), pod.get("status"))
    return updated


def pod_is_ready(pod: dict[str, Any]) -> bool:
    """All containers ready and the pod not terminating."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(c.get("ready") for c in statuses)


def pod_ready_condition(pod: dict[str, Any]) -> bool:
    """The pod's Ready condition (what the EndpointSlice controller reads), else all containers ready."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all(c.get("ready") for c in statuses)


def controller_endpoint(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The endpoint the EndpointSlice controller (1.28) derives from a pod: None without a pod IP;
    ``serving`` is the Ready condition, ``terminating`` a deletionTimestamp, ``ready`` serving and
    not terminating."""
    meta = pod.get("metadata") or {}
    address = (pod.get("status") or {}).get("podIP")
    if not address:
        return None
    serving = pod_ready_condition(pod)
    terminating = bool(meta.get("deletionTimestamp"))
    return {
        "addresses": [address],
        "conditions": {"ready": serving and not terminating, "serving": serving, "terminating": terminating},
        "targetRef": {
            "kind": "Pod",
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
        },
        "nodeName": (pod.get("spec") or {}).get("nodeName", "kube-fake-node"),
    }


def controller_slice(
    name: str, namespace: str, endpoints: list[dict[str, Any]], labels: dict[str, str]
) -> dict[str, Any]:
    """The slice the EndpointSlice controller keeps for a Service: ``endpoints`` and ``ports`` null when empty."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "addressType": "IPv4",
        "endpoints": endpoints or None,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8000}] if endpoints else None,
    }


def build_endpoint_slice(
    name: str,
    namespace: str,
    targets: Iterable[Target],
    labels: dict[str, str],
    ips: dict[str, str] | None = None,
    terminating: Iterable[str] = (),
) -> dict[str, Any]:
    """An EndpointSlice with one endpoint per target (pod IPs from ``ips`` or derived from the name)."""
    gone = set(terminating)
    endpoints = []
    for index, (pod_name, pod_uid, ready) in enumerate(targets):
        ref: dict[str, Any] = {"kind": "Pod", "namespace": namespace}
        if pod_name is not None:
            ref["name"] = pod_name
        if pod_uid is not None:
            ref["uid"] = pod_uid
        address = (ips or {}).get(pod_name or "") or pod_ip(namespace, pod_name or f"#{index}")
        endpoints.append(
            {
                "addresses": [address],
                "conditions": {"ready": ready, "serving": ready, "terminating": pod_name in gone},
                "targetRef": ref,
                "nodeName": "kube-fake-node",
            }
        )
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
    }


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def build_namespace(name: str) -> dict[str, Any]:
    """An active Namespace as the API server stores it (name label, ``kubernetes`` finalizer)."""
    return with_namespace_defaults({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def with_namespace_defaults(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a Namespace being created) with what the server adds: the immutable name label,
    ``spec.finalizers: [kubernetes]`` and ``status.phase: Active``."""
    namespace = copy.deepcopy(body)
    meta = namespace.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), NAMESPACE_NAME_LABEL: meta.get("name", "")}
    namespace["spec"] = {"finalizers": ["kubernetes"], **(namespace.get("spec") or {})}
    namespace["status"] = {"phase": "Active"}
    return namespace
