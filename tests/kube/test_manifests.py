"""The CRD and RBAC manifests shipped with the backend match docs/design.md §8."""

from __future__ import annotations

import yaml
from discovery_sync.backends.kube import MANIFESTS


def load(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def test_the_crd():
    (crd,) = load("crd.yaml")
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "dynamoworkermetadatas.nvidia.com"
    assert (spec["group"], spec["scope"]) == ("nvidia.com", "Namespaced")
    assert spec["names"] == {
        "kind": "DynamoWorkerMetadata",
        "listKind": "DynamoWorkerMetadataList",
        "plural": "dynamoworkermetadatas",
        "singular": "dynamoworkermetadata",
        "shortNames": ["dwm"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    cr_spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert cr_spec["required"] == ["data"]
    # as the reference operator's CRD: data is the only field of spec, and keeps whatever it holds
    assert cr_spec["properties"] == {"data": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    assert version["additionalPrinterColumns"] == [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]


def test_the_rbac():
    role, binding = load("rbac.yaml")
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding"
    rules = {
        (rule["apiGroups"][0], resource): set(rule["verbs"]) for rule in role["rules"] for resource in rule["resources"]
    }
    assert rules == {
        ("nvidia.com", "dynamoworkermetadatas"): {"create", "get", "list", "watch", "update", "patch", "delete"},
        ("", "pods"): {"get", "list", "watch"},
        ("discovery.k8s.io", "endpointslices"): {"get", "list", "watch"},
    }
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"][0]["kind"] == "ServiceAccount"
