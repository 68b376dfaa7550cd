"""The resource types the fake serves, and the API discovery documents that describe them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CUSTOM_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")  # the CRD's order
CUSTOM_GROUP = "nvidia.com"
CUSTOM_VERSION = "v1alpha1"


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: where it lives in the URL space and how it behaves."""

    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    short_names: tuple[str, ...] = ()
    custom: bool = False  # a CRD-backed resource: no unconditional PUT, strict validation of spec.data
    status_subresource: bool = False  # status changes do not bump metadata.generation
    field_selectors: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    namespaced: bool = True  # False: cluster-scoped (stored under namespace "")
    verbs: tuple[str, ...] = VERBS
    storage_version_hash: str = "kube-fake"

    @property
    def api_version(self) -> str:
        """``v1`` for core, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The name used in error messages: ``pods``, ``dynamoworkermetadatas.nvidia.com``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def names(self) -> set[str]:
        """Every spelling a test may use to name this resource."""
        return {self.plural, self.singular, self.kind.lower(), self.qualified, *self.short_names}


PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    singular="pod",
    kind="Pod",
    short_names=("po",),
    status_subresource=True,
    field_selectors=("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "status.podIP"),
)
ENDPOINT_SLICES = ResourceType(
    group="discovery.k8s.io",
    version="v1",
    plural="endpointslices",
    singular="endpointslice",
    kind="EndpointSlice",
    field_selectors=("metadata.name", "metadata.namespace", "addressType"),
)
WORKER_METADATA = ResourceType(
    group=CUSTOM_GROUP,
    version=CUSTOM_VERSION,
    plural="dynamoworkermetadatas",
    singular="dynamoworkermetadata",
    kind="DynamoWorkerMetadata",
    short_names=("dwm",),
    custom=True,
    verbs=CUSTOM_VERBS,
    storage_version_hash="cYGDN691EsU=",  # what kube-apiserver 1.28 derives for this group/version/kind
)
NAMESPACES = ResourceType(
    group="",
    version="v1",
    plural="namespaces",
    singular="namespace",
    kind="Namespace",
    short_names=("ns",),
    status_subresource=True,
    field_selectors=("metadata.name", "status.phase"),
    namespaced=False,
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
)
# what a rig needs to make pods as a kubelet-less cluster would (tests/kube/rig.py on a real cluster)
NODES = ResourceType(
    group="",
    version="v1",
    plural="nodes",
    singular="node",
    kind="Node",
    short_names=("no",),
    status_subresource=True,
    field_selectors=("metadata.name",),
    namespaced=False,
)
SERVICES = ResourceType(
    group="",
    version="v1",
    plural="services",
    singular="service",
    kind="Service",
    short_names=("svc",),
)
CUSTOM_RESOURCE_DEFINITIONS = ResourceType(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    singular="customresourcedefinition",
    kind="CustomResourceDefinition",
    short_names=("crd", "crds"),
    field_selectors=("metadata.name",),
    namespaced=False,
)
# core v1 lists its resources in this order
ALL_RESOURCES = (NAMESPACES, NODES, PODS, SERVICES, ENDPOINT_SLICES, WORKER_METADATA, CUSTOM_RESOURCE_DEFINITIONS)


def find_resource(group: str, version: str, plural: str) -> ResourceType | None:
    """The resource served at ``/api[s]/{group}/{version}/.../{plural}``, if any."""
    for rt in ALL_RESOURCES:
        if (rt.group, rt.version, rt.plural) == (group, version, plural):
            return rt
    return None


def resolve_resource(name: str | ResourceType) -> ResourceType:
    """Accept a :class:`ResourceType` or any of its names (plural, singular, kind, short name)."""
    if isinstance(name, ResourceType):
        return name
    wanted = name.lower()
    for rt in ALL_RESOURCES:
        if wanted in rt.names():
            return rt
    raise KeyError(f"unknown resource {name!r}; known: {[rt.plural for rt in ALL_RESOURCES]}")


def version_info() -> dict[str, Any]:
    """``GET /version`` (and ``/version/``): the build the transcripts in tests/fixtures were recorded against."""
    return {
        "major": "1",
        "minor": "28",
        "gitVersion": "v1.28.7",
        "gitCommit": "c8dcb00be9961ec36d141d2e4103f85f92bcf291",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "go1.21.13",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    """``GET /api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _groups(crd_installed: bool) -> list[str]:
    groups = [rt.group for rt in ALL_RESOURCES if rt.group and (crd_installed or not rt.custom)]
    return list(dict.fromkeys(groups))


def api_group(group: str) -> dict[str, Any]:
    """``GET /apis/{group}``: one group with its single served version."""
    version = next(rt.version for rt in ALL_RESOURCES if rt.group == group)
    entry = {"groupVersion": f"{group}/{version}", "version": version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [entry], "preferredVersion": entry}


def api_group_list(crd_installed: bool) -> dict[str, Any]:
    """``GET /apis``: every named group (the custom one only while its CRD is installed)."""
    groups = []
    for group in _groups(crd_installed):
        doc = api_group(group)
        del doc["kind"], doc["apiVersion"]
        groups.append(doc)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def known_group(group: str, crd_installed: bool) -> bool:
    return group in _groups(crd_installed)


def serves(group: str, version: str, crd_installed: bool) -> bool:
    """Whether ``/api[s]/{group}/{version}`` is an API group version the server serves right now."""
    return any((rt.group, rt.version) == (group, version) and (crd_installed or not rt.custom) for rt in ALL_RESOURCES)


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    """``GET /api/v1`` or ``GET /apis/{group}/{version}``; None when nothing is served there."""
    resources = [
        {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
            **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
            "storageVersionHash": rt.storage_version_hash,
        }
        for rt in ALL_RESOURCES
        if (rt.group, rt.version) == (group, version)
    ]
    if not resources:
        return None
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}
