"""What the API server itself does after a write, beyond storing it: store hooks (see ``Store.add_hook``)."""

from __future__ import annotations

from collections.abc import Callable

from .objects import now
from .resources import CUSTOM_RESOURCE_DEFINITIONS, WORKER_METADATA
from .store import Store
from .watch import Change

WORKER_METADATA_CRD = WORKER_METADATA.qualified  # dynamoworkermetadatas.nvidia.com


def crd_establisher(store: Store, set_installed: Callable[[bool], None]) -> Callable[[Change], None]:
    """A hook that marks each new CustomResourceDefinition NamesAccepted and Established (the
    apiextensions controllers), and serves DynamoWorkerMetadata while its CRD object exists:
    deleting that CRD uninstalls the type (``set_installed(False)``)."""

    def hook(change: Change) -> None:
        if change.resource != CUSTOM_RESOURCE_DEFINITIONS:
            return
        name = change.current["metadata"]["name"]
        if change.new is None:
            if name == WORKER_METADATA_CRD:
                set_installed(False)
            return
        conditions = (change.new.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" for c in conditions):
            return
        if name == WORKER_METADATA_CRD:
            set_installed(True)
        when = now()
        accepted = [
            {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": when}
            for kind, reason, message in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ]
        spec = change.new.get("spec") or {}
        status = {
            "conditions": accepted,
            "acceptedNames": spec.get("names") or {},
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }
        store.merge_patch(CUSTOM_RESOURCE_DEFINITIONS, "", name, {"status": status}, "kube-apiserver")

    return hook
