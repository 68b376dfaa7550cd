"""Pod identity (options, Downward-API files, environment), CR names and instance ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from discovery_sync.backends.kube.identity import (
    INSTANCE_ID_MASK,
    PodIdentity,
    check_publisher_id,
    cr_name_for,
    find_identity,
    instance_id_for,
)

import discovery_sync as ds
from discovery_sync.siphash import rust_str_hash, siphash

ENV = {"POD_NAME": "worker-0", "POD_UID": "uid-0"}


def resolve_identity(**sources: object) -> PodIdentity:
    """The identity these sources give, which must be a whole one."""
    identity = find_identity(**sources)  # type: ignore[arg-type]
    assert identity is not None
    return identity


def podinfo(tmp_path: Path, **files: str) -> Path:
    directory = tmp_path / "podinfo"
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


@pytest.mark.parametrize(("name", "expected"), [("worker-0", 1186445869714687), ("pod-a-sidecar", 5280546285600629)])
def test_instance_ids_match_the_reference_vectors(name, expected):
    assert instance_id_for(name) == expected
    assert instance_id_for(name) <= 2**53 - 1 == INSTANCE_ID_MASK


def test_siphash_matches_the_published_vectors():
    # SipHash-2-4 with key 00..0f over 00..0e (the paper's vector) and over the empty message
    key = bytes(range(16))
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    assert siphash(bytes(range(15)), k0, k1, c_rounds=2, d_rounds=4) == 0xA129CA6149BE45E5
    assert siphash(b"", k0, k1, c_rounds=2, d_rounds=4) == 0x726FDB47DD0E0E31
    # a Rust str hash is the bytes then 0xFF, over every tail length of the last block
    for size in range(17):
        text = "x" * size
        assert rust_str_hash(text) == siphash(text.encode() + b"\xff")
    assert rust_str_hash("é") != rust_str_hash("e")


def test_environment_identity_with_defaults():
    identity = resolve_identity(env=ENV, podinfo_dir="/nonexistent")
    assert (identity.pod_name, identity.pod_uid, identity.namespace, identity.mode) == (
        "worker-0",
        "uid-0",
        "default",
        "pod",
    )
    assert identity.cr_name == "worker-0" and identity.is_controller
    assert identity.instance_id == 1186445869714687
    assert identity.owner_reference() == {
        "apiVersion": "v1",
        "blockOwnerDeletion": False,
        "controller": True,
        "kind": "Pod",
        "name": "worker-0",
        "uid": "uid-0",
    }
    assert resolve_identity(env={**ENV, "POD_NAMESPACE": "dynamo"}, podinfo_dir="/nonexistent").namespace == "dynamo"


def test_podinfo_files_come_before_the_environment(tmp_path):
    directory = podinfo(tmp_path, pod_name="from-file\n", pod_uid=" uid-file ", pod_namespace="ns-file")
    identity = resolve_identity(env={**ENV, "POD_NAMESPACE": "ns-env"}, podinfo_dir=directory)
    assert (identity.pod_name, identity.pod_uid, identity.namespace) == ("from-file", "uid-file", "ns-file")


def test_a_missing_or_empty_podinfo_file_falls_back_to_the_environment(tmp_path):
    directory = podinfo(tmp_path, pod_name="from-file", pod_uid="\n")
    identity = resolve_identity(env=ENV, podinfo_dir=directory)
    assert (identity.pod_name, identity.pod_uid, identity.namespace) == ("from-file", "uid-0", "default")


def test_options_come_first(tmp_path):
    directory = podinfo(tmp_path, pod_name="from-file", pod_uid="uid-file")
    identity = resolve_identity(pod_name="opt", pod_uid="uid-opt", namespace="ns-opt", env=ENV, podinfo_dir=directory)
    assert (identity.pod_name, identity.pod_uid, identity.namespace) == ("opt", "uid-opt", "ns-opt")


@pytest.mark.parametrize(("container", "cr_name"), [("main", "pod-a"), ("sidecar", "pod-a-sidecar")])
def test_container_mode_names_the_cr_after_the_container(container, cr_name):
    env = {"POD_NAME": "pod-a", "POD_UID": "u", "DYN_KUBE_DISCOVERY_MODE": "container", "CONTAINER_NAME": container}
    identity = resolve_identity(env=env, podinfo_dir="/nonexistent")
    assert identity.mode == "container" and identity.cr_name == cr_name
    assert identity.is_controller is (cr_name == "pod-a")
    assert identity.owner_reference()["controller"] is (cr_name == "pod-a")
    assert identity.instance_id == instance_id_for(cr_name)


def test_pod_mode_ignores_the_container_name():
    identity = resolve_identity(env={**ENV, "CONTAINER_NAME": "sidecar"}, podinfo_dir="/nonexistent")
    assert identity.cr_name == "worker-0" and identity.container_name is None
    assert cr_name_for("p", None) == cr_name_for("p", "main") == "p"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"POD_UID": "u"}, "POD_NAME is not set"),
        ({"POD_NAME": "p"}, "POD_UID is not set"),
        (
            {**ENV, "DYN_KUBE_DISCOVERY_MODE": "node"},
            r"DYN_KUBE_DISCOVERY_MODE='node' is not valid: use one of pod, container",
        ),
        ({**ENV, "DYN_KUBE_DISCOVERY_MODE": "container"}, "needs CONTAINER_NAME"),
        ({"POD_NAME": "Worker_0", "POD_UID": "u"}, "not a lowercase RFC 1123 subdomain"),
        ({**ENV, "POD_NAMESPACE": "Bad_NS"}, "not a valid Kubernetes namespace"),
    ],
)
def test_bad_identities_are_validation_errors_that_say_what_to_do(env, message):
    with pytest.raises(ds.ValidationError, match=message):
        resolve_identity(env=env, podinfo_dir="/nonexistent")


def test_bad_identity_values_in_code():
    with pytest.raises(ds.ValidationError, match="use one of pod, container"):
        PodIdentity("p", "u", mode="daemonset")
    with pytest.raises(ds.ValidationError, match="pod_name must be a string"):
        resolve_identity(pod_name=7, env=ENV)  # type: ignore[arg-type]


def test_publisher_ids_must_fit_in_53_bits():
    check_publisher_id(2**53 - 1)
    for bad in (2**53, 2**64 - 1, -1, "7", True):
        with pytest.raises(ds.ValidationError, match="publisher_id"):
            check_publisher_id(bad)


def test_connect_reports_bad_identity_and_options(tmp_path, monkeypatch):
    for variable in ("POD_NAME", "POD_UID", "POD_NAMESPACE", "DYN_KUBE_DISCOVERY_MODE", "CONTAINER_NAME"):
        monkeypatch.delenv(variable, raising=False)
    nowhere = str(tmp_path / "none")
    with pytest.raises(ds.ValidationError, match=r"POD_UID is not set \(but POD_NAME='p' is\).*or set neither"):
        ds.connect("kube://", pod_name="p", podinfo_dir=nowhere)
    with pytest.raises(ds.ValidationError, match="unknown kube option"):
        ds.connect("kube://", pod_name="p", pod_uid="u", flavour="x")
    with pytest.raises(ds.ValidationError, match="takes no host or path"):
        ds.connect("kube://cluster.local/ns", pod_name="p", pod_uid="u")
    with pytest.raises(ds.ValidationError, match=r"ready_timeout=.soon. is not valid: a number of seconds"):
        ds.connect("kube://?ready_timeout=soon", pod_name="p", pod_uid="u", podinfo_dir=nowhere)
    with pytest.raises(ds.BackendUnavailable, match="cannot load the kubeconfig"):
        ds.connect("kube://", pod_name="p", pod_uid="u", podinfo_dir=nowhere, kubeconfig=str(tmp_path / "missing"))
