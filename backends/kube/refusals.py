"""What the API server's refusals (401, 403, 404) mean for this backend, and what to do about each.

A 403 is an RBAC refusal unless the server took the client for ``system:anonymous`` (then, as for
a 401, its credentials are the problem, not its permissions). A 404 whose body names no object
(the plain-text ``404 page not found`` of a real server, or a Status without a name) means the
resource type is not served: for this backend, that the DynamoWorkerMetadata CRD is missing; a
404 naming an object (``namespaces "x" not found``) says what is missing instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

ANONYMOUS = "system:anonymous"
#: what a server's RBAC message names: who may not do what, where
_CANNOT = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]*)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]*)")?'
)
_SERVICE_ACCOUNT = re.compile(r"system:serviceaccount:(?P<namespace>[^:]+):(?P<name>.+)")
_LONGEST_TEXT = 300  # characters of a body that is not a Status kept in messages

RBAC_SOURCE = (
    "the RBAC printed by `discovery-sync manifests --rbac` (in the package: "
    "discovery_sync/backends/kube/manifests/rbac.yaml; kubectl apply -n {namespace} -f it)"
)
CRD_MISSING_HINT = (
    "the DynamoWorkerMetadata resource type (dynamoworkermetadatas.nvidia.com) does not exist: "
    "install the DynamoWorkerMetadata CRD (`discovery-sync manifests --crd | kubectl apply -f -`; in the package: "
    "discovery_sync/backends/kube/manifests/crd.yaml)"
)
CREDENTIALS_FIX = (
    "check the user credentials of the kubeconfig's current context (token, client certificate or exec "
    "plugin; `kubectl auth whoami` shows who the server takes you for), or in a pod its mounted service "
    "account token"
)


@dataclass(frozen=True)
class Answer:
    """An error answer of the API server, read: the ``Status`` it sent, or the text of another body."""

    code: int | None
    #: the Status ``message``, or the body's text on one line (a plain-text 404, say)
    message: str
    #: whether the body was a ``Status`` object
    is_status: bool
    details: dict[str, Any]

    @classmethod
    def of(cls, exc: ApiException) -> Answer:
        body = exc.body
        if isinstance(body, (bytes, bytearray)):
            body = bytes(body).decode("utf-8", errors="replace")
        text = body if isinstance(body, str) else ""
        try:
            parsed = orjson.loads(text) if text.strip() else None
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            details = parsed.get("details")
            return cls(exc.status, str(parsed.get("message") or ""), True, details if isinstance(details, dict) else {})
        one_line = " ".join(text.split())
        if len(one_line) > _LONGEST_TEXT:
            one_line = one_line[:_LONGEST_TEXT] + "…"
        return cls(exc.status, one_line, False, {})


def status_message(exc: ApiException) -> str:
    """``403 Forbidden: <the server's message>`` for an ApiException (a body that is not a Status: its
    text, on one line)."""
    message = Answer.of(exc).message
    text = f"{exc.status} {exc.reason or ''}".strip()
    return f"{text}: {message}" if message else text


@dataclass(frozen=True)
class Denial:
    """A 403: who may not do what (None: the server's message does not say)."""

    user: str | None
    verb: str | None
    #: ``dynamoworkermetadatas.nvidia.com``, ``pods``
    resource: str | None
    namespace: str | None

    @classmethod
    def of(cls, answer: Answer) -> Denial:
        found = _CANNOT.search(answer.message)
        if found is not None:
            group = found["group"]
            resource = f"{found['resource']}.{group}" if group else found["resource"]
            return cls(found["user"], found["verb"], resource, found["namespace"])
        kind, group = answer.details.get("kind"), answer.details.get("group")
        resource = (f"{kind}.{group}" if group else str(kind)) if kind else None
        return cls(None, None, resource, None)


def _subject(user: str) -> str:
    account = _SERVICE_ACCOUNT.fullmatch(user)
    if account is not None:
        return f"the service account {account['namespace']}/{account['name']}"
    return f'the user "{user}"'


def rbac_fix(namespace: str | None, to: str | None = None) -> str:
    """``grant the RBAC printed by ... to <whom>``: the fix of a missing permission."""
    whom = to or "this pod's service account (or, reading from outside the cluster, to your user)"
    return f"grant {RBAC_SOURCE.format(namespace=namespace or '<namespace>')} to {whom}"


def _forbidden(answer: Answer, namespace: str | None) -> str:
    denial = Denial.of(answer)
    if denial.user == ANONYMOUS:
        return (
            f"the API server took this client for an anonymous user ({ANONYMOUS}): it sent no credentials the "
            f"server accepts; {CREDENTIALS_FIX}"
        )
    where = denial.namespace or namespace
    place = f' in the namespace "{where}"' if where else ""
    if denial.verb is not None:
        who = _subject(denial.user) if denial.user else None
        return (
            f"access denied: {who or 'this client'} may not {denial.verb} {denial.resource}{place}; "
            f"{rbac_fix(where, who)}"
        )
    if answer.message.rstrip().endswith("is forbidden:"):
        # no reason given: what a server answers an apply that would create the object without `create`
        # (an apply to an existing object needs only `patch`, whose refusal names the verb)
        return (
            f"access denied: this client may not create {denial.resource or 'this resource'}{place} (the server "
            "gives no reason when an apply would create an object and `create` is not granted; applying to an "
            f"existing one needs only `patch`); {rbac_fix(where)}"
        )
    return f"access denied; {rbac_fix(where)}"


def _not_found(answer: Answer) -> str:
    name, kind = answer.details.get("name"), answer.details.get("kind")
    if not (answer.is_status and name):
        return CRD_MISSING_HINT  # no object named: the type itself is not served
    if kind == "namespaces":
        return (
            f'the namespace "{name}" does not exist: create it (kubectl create namespace {name}) or connect '
            "with namespace=<an existing namespace>"
        )
    group = answer.details.get("group")
    return f'{kind}.{group} "{name}" does not exist' if group else f'{kind} "{name}" does not exist'


def explain_refusal(exc: ApiException, namespace: str | None = None) -> str | None:
    """What a 401, 403 or 404 means and what to do, followed by the server's own words; None for
    other answers. ``namespace``: the client's, named in the fix when the server's message does not."""
    answer = Answer.of(exc)
    if exc.status == 401:
        meaning = f"the API server does not accept this client's credentials (wrong or expired); {CREDENTIALS_FIX}"
    elif exc.status == 403:
        meaning = _forbidden(answer, namespace)
    elif exc.status == 404:
        meaning = _not_found(answer)
    else:
        return None
    return f"{meaning} ({status_message(exc)})"
