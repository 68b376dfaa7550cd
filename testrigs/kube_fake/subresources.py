"""The ``status`` subresource: a write that changes an object's status and nothing else."""

from __future__ import annotations

import copy
from typing import Any

from . import status as st
from .apply import merge_patch
from .resources import ResourceType
from .store import Store


def patch_status(store: Store, rt: ResourceType, namespace: str, name: str, patch: Any, manager: str) -> dict[str, Any]:
    """Apply the merge patch ``patch`` to the status of ``namespace/name`` (anything else it names is
    ignored, as the API server does) and return the stored object."""
    if not isinstance(patch, dict):
        raise st.bad_request("a merge patch must be a JSON object")
    with store.locked():
        old = store.get(rt, namespace, name)
        updated = copy.deepcopy(old)
        updated["status"] = merge_patch(old, patch).get("status")
        return store.put(rt, updated, manager)
