"""Authorization as the fake's denial state (:class:`~.api.Faults`) makes it: SelfSubjectAccessReviews
answered from it, and the refusal a real server gives an apply that would create an object whose
``create`` is denied.

``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` answers ``allowed: false`` for a
(resource, verb) :meth:`FakeKubeServer.deny` denies (``*`` rules included), ``allowed: true``
otherwise. :class:`AccessReviews` (``FakeKubeServer.api.access_reviews``) can refuse the reviews
themselves (``refused = True``: 403) or lack them (``served = False``: 404), as a real server may.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import status as st
from .resources import ResourceType

if TYPE_CHECKING:
    from .api import Faults, Request

GROUP, VERSION, PLURAL = "authorization.k8s.io", "v1", "selfsubjectaccessreviews"
PATH = ["apis", GROUP, VERSION, PLURAL]


class AccessReviews:
    """The fake's SelfSubjectAccessReview endpoint; thread-safe (plain attribute writes)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        #: False: the server lacks the API (404)
        self.served = True
        #: True: reviews are refused (403, as to a user who may not create them)
        self.refused = False

    def answer(self, req: Request) -> tuple[int, dict[str, Any]]:
        """The code and body answering a request to :data:`PATH`."""
        if not self.served:
            raise st.path_not_found()
        if req.method != "POST":
            raise st.ApiError(405, f"the server does not allow this method on the requested resource ({req.method})")
        if self.refused:
            raise st.ApiError(
                403,
                f'{PLURAL}.{GROUP} is forbidden: User "system:serviceaccount:default:default" cannot create resource '
                f'"{PLURAL}" in API group "{GROUP}" at the cluster scope',
                "Forbidden",
                {"group": GROUP, "kind": PLURAL},
            )
        try:
            review = json.loads(req.body)
        except ValueError:
            raise st.bad_request("the request body is not valid JSON") from None
        attributes = ((review.get("spec") if isinstance(review, dict) else None) or {}).get("resourceAttributes")
        if not isinstance(attributes, dict):
            raise st.ApiError(
                422,
                'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
                "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                "Invalid",
            )
        denied = self.faults.denies(str(attributes.get("resource") or ""), str(attributes.get("verb") or ""))
        status: dict[str, Any] = {"allowed": not denied}
        if not denied:
            status["reason"] = "kube-fake allows every request it was not told to deny"
        review["status"] = status
        review.setdefault("metadata", {})["creationTimestamp"] = None
        return 201, review

    def refuse_create_by_apply(self, rt: ResourceType, name: str, exists: bool) -> None:
        """Raise the 403 a real server answers an apply that would create ``name`` when ``create`` is
        denied: a message with nothing after ``is forbidden:`` (an existing object needs only ``patch``)."""
        if exists or not self.faults.denies(rt.plural, "create"):
            return
        details = {"name": name, "kind": rt.plural, **({"group": rt.group} if rt.group else {})}
        raise st.ApiError(403, f'{rt.qualified} "{name}" is forbidden: ', "Forbidden", details)
