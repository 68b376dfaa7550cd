"""Wire client of the kube backend: the few API calls discovery needs, through the official ``kubernetes`` client.

Everything travels as raw JSON dicts (``_preload_content=False``, parsed with orjson): CRs are
dicts anyway and Pods / EndpointSlices need no model classes here. Watches are read line by line
from the streaming response, which :meth:`KubeApi.abort` can cut from another thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from discovery_sync.errors import BackendUnavailable, DiscoveryError
from discovery_sync.ndjson import split_lines

from .options import OPTIONS
from .refusals import explain_refusal, status_message

log = logging.getLogger("discovery_sync.backends.kube")

GROUP = "nvidia.com"
VERSION = "v1alpha1"
PLURAL = "dynamoworkermetadatas"
KIND = "DynamoWorkerMetadata"
API_VERSION = f"{GROUP}/{VERSION}"
FIELD_MANAGER = "dynamo-worker"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
DISCOVERY_LABEL = "nvidia.com/dynamo-discovery-enabled"
DISCOVERY_SELECTOR = f"{DISCOVERY_LABEL}=true"

LIST_PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = 290  # what the reference asks for
REQUEST_TIMEOUT = (10.0, 30.0)  # connect, read: the default bound of a request
WATCH_READ_TIMEOUT = 330.0  # longer than the server-side watch timeout
#: seconds a request with a deadline is given at least, even when (nearly) none is left
MIN_TRY = 0.1
#: where a pod's service account names its namespace (the in-cluster "current context" namespace)
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

#: errors that mean "the API server could not be reached or talked to", worth retrying
TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)

T = TypeVar("T")


class Gone(Exception):
    """The resourceVersion a watch or list continued from is too old (HTTP 410): list again."""


class CutStream(urllib3.exceptions.ProtocolError):
    """A watch stream ended inside an event (the connection was cut mid-line): a transport error,
    so the watch resumes from the last version it delivered. orjson calls the truncated UTF-8 of a
    character outside the BMP "surrogates not allowed", which is how such a cut used to show."""


#: characters a YAML 1.1 reader (the API server's, for apply bodies) refuses as literal text (DEL,
#: C1 controls, U+FFFE, U+FFFF), folds as line breaks inside a quoted string (NEL, U+2028, U+2029)
#: or may take for a byte-order mark (U+FEFF), as UTF-8: they travel as JSON escapes instead
_NOT_LITERAL_IN_YAML = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf|\xef\xbf[\xbe\xbf]")


def apply_body(obj: Any) -> bytes:
    """``obj`` as the body of an ``application/apply-patch+yaml`` request: JSON text (which YAML
    reads) with every character as literal UTF-8, because the API server's YAML decoder refuses
    the surrogate-pair escapes (``\\ud83d\\ude80``) JSON writers use for characters outside the
    BMP (400 "found invalid Unicode character escape code"); only the characters YAML cannot
    carry literally are escaped (BMP escapes, which it accepts)."""
    text = orjson.dumps(obj)
    return _NOT_LITERAL_IN_YAML.sub(lambda found: b"\\u%04x" % ord(found.group().decode()), text)


_CAUSES: list[tuple[tuple[type[BaseException], ...], str]] = [
    ((urllib3.exceptions.NameResolutionError, socket.gaierror), "name not resolved"),
    ((ConnectionRefusedError,), "connection refused"),
    ((ssl.SSLError, urllib3.exceptions.SSLError), "TLS error"),
    ((urllib3.exceptions.ReadTimeoutError,), "timed out waiting for a reply"),
    ((urllib3.exceptions.ConnectTimeoutError, TimeoutError), "connection timed out"),
    ((ConnectionResetError, urllib3.exceptions.ProtocolError), "connection closed by the server"),
]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (urllib3's ``reason``, causes, contexts), outermost first."""
    found: list[BaseException] = []
    pending: list[object] = [exc]
    while pending:
        current = pending.pop(0)
        if isinstance(current, BaseException) and not any(current is seen for seen in found):
            found.append(current)
            pending.extend((getattr(current, "reason", None), current.__cause__, current.__context__))
    return found


def transport_cause(exc: BaseException) -> str:
    """Why a request did not reach the API server or got no answer, in a few words ("connection
    refused", "name not resolved", "timed out waiting for a reply", ...), not urllib3's reprs."""
    chain = _chain(exc)

    def found(*kinds: type[BaseException]) -> bool:
        # urllib3's NewConnectionError derives from ConnectTimeoutError: a refusal is no timeout
        return any(isinstance(e, kinds) and type(e) is not urllib3.exceptions.NewConnectionError for e in chain)

    for kinds, words in _CAUSES:
        if found(*kinds):
            return words
    failed = next((e for e in chain if isinstance(e, OSError) and e.errno), None)
    if failed is not None and failed.errno is not None:
        return os.strerror(failed.errno).lower()
    return " ".join(str(exc).split()) or type(exc).__name__


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the API server could not be reached or could not serve: no answer
    (refused, reset, timed out) or a 5xx / 429 answer. A refusal (400, 403, 404, 410, ...) is an
    answer: the server is there."""
    if isinstance(exc, ApiException):
        return exc.status is not None and (exc.status >= 500 or exc.status == 429)
    return isinstance(exc, TRANSPORT_ERRORS)


def explain(exc: BaseException, action: str, server: str | None = None, *, namespace: str | None = None) -> str:
    """A message for a failed ``action`` that says what to do about the usual causes (one line).

    Refusals are named by what they mean (:mod:`.refusals`): bad credentials, the permission that
    is missing, the CRD or the namespace that does not exist. ``namespace``: the client's, named in
    the fix when the server's message does not name it."""
    if isinstance(exc, DiscoveryError):  # ours (a stream line over the bound): it says what happened already
        return f"{action} failed: {exc}"
    if isinstance(exc, ApiException):
        meaning = explain_refusal(exc, namespace)
        return f"{action} failed: {meaning or status_message(exc)}"
    where = f" {server}" if server else ""
    return f"{action} failed: cannot reach the Kubernetes API server{where} ({transport_cause(exc)})"


@dataclass(frozen=True)
class Cluster:
    """A configured API client and the namespace its configuration names (None: it names none)."""

    api_client: client.ApiClient
    #: the kubeconfig's current-context namespace; in a pod, the service account's namespace
    namespace: str | None


def _configured(configuration: client.Configuration) -> client.ApiClient:
    # one attempt per request: urllib3 would otherwise retry a timed-out GET three times, making
    # a request last four times its timeout; the backend retries itself (writes within
    # write_timeout, list/watch threads with backoff)
    configuration.retries = False
    return client.ApiClient(configuration)


def _kubeconfig_cluster(config_file: str) -> Cluster:
    configuration = client.Configuration()
    config.load_kube_config(config_file=config_file, client_configuration=configuration, persist_config=False)
    _, current = config.list_kube_config_contexts(config_file=config_file)
    namespace = ((current or {}).get("context") or {}).get("namespace")
    return Cluster(_configured(configuration), namespace if isinstance(namespace, str) else None)


def load_cluster(kubeconfig: str | os.PathLike[str] | None = None) -> Cluster:
    """In-cluster configuration when running in a pod, else the kubeconfig (``kubeconfig`` or the default)."""
    if kubeconfig is not None:
        try:
            return _kubeconfig_cluster(os.fspath(kubeconfig))
        except Exception as exc:  # the client library raises what its YAML parser raises for junk
            raise BackendUnavailable(f"cannot load the kubeconfig {os.fspath(kubeconfig)}: {exc}") from exc
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        pass
    else:
        try:
            namespace: str | None = Path(SERVICE_ACCOUNT_NAMESPACE).read_text(encoding="utf-8").strip() or None
        except OSError:
            namespace = None
        return Cluster(_configured(configuration), namespace)
    try:  # KUBECONFIG read now: the client library reads it once, when it is imported
        return _kubeconfig_cluster(os.environ.get("KUBECONFIG") or "~/.kube/config")
    except Exception as exc:
        raise BackendUnavailable(
            "no Kubernetes configuration: not running in a pod (no service account) and no usable kubeconfig "
            f"(KUBECONFIG or ~/.kube/config; or pass kubeconfig=...): {exc}"
        ) from exc


@dataclass(frozen=True)
class Resource:
    """A namespaced resource this client lists and watches (raw JSON)."""

    plural: str
    call: Callable[..., Any]  # the client's list function, namespace and label selector bound
    group: str = ""  # its API group ("": the core group)

    @property
    def qualified_name(self) -> str:
        """The name RBAC rules and the API server's refusals use: ``endpointslices.discovery.k8s.io``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _read_json(response: urllib3.HTTPResponse) -> Any:
    try:
        return orjson.loads(response.data)
    finally:
        response.release_conn()


class KubeApi:
    """One namespace of one cluster: list/watch of CRs and readiness objects, apply and delete of CRs.

    ``request_timeout`` (seconds) bounds each request: connecting plus waiting for the answer
    (a LIST page, an apply, a delete); for a watch, only connecting, since a watch stays open
    for minutes. None: 10 s to connect and 30 s per read (a watch: 330 s per read).
    """

    def __init__(self, api_client: client.ApiClient, namespace: str, *, request_timeout: float | None = None) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.request_timeout = OPTIONS.check("request_timeout", request_timeout)
        self.server = str(api_client.configuration.host or "")
        self._timeout: float | tuple[float, float] = (
            REQUEST_TIMEOUT if self.request_timeout is None else self.request_timeout
        )
        connect = REQUEST_TIMEOUT[0] if self.request_timeout is None else self.request_timeout
        self._watch_timeout = (connect, WATCH_READ_TIMEOUT)
        self.custom = client.CustomObjectsApi(api_client)
        self.version = client.VersionApi(api_client)
        self._core: client.CoreV1Api | None = None  # made when first used (see core)
        self.authorization = client.AuthorizationV1Api(api_client)
        discovery = client.DiscoveryV1Api(api_client)
        self.worker_metadata = Resource(
            PLURAL,
            partial(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL),
            GROUP,
        )
        self.endpoint_slices = Resource(
            "endpointslices",
            partial(discovery.list_namespaced_endpoint_slice, namespace, label_selector=DISCOVERY_SELECTOR),
            "discovery.k8s.io",
        )
        self.pods = Resource("pods", self._list_pods)

    @property
    def core(self) -> client.CoreV1Api:
        """The client's core API, made when first used: from release 37 on, the official client
        builds the pydantic models of the whole core group when it is first made (about 0.5 s),
        which a reader in pod mode never needs."""
        if self._core is None:
            self._core = client.CoreV1Api(self.api_client)
        return self._core

    def _list_pods(self, **kwargs: Any) -> Any:
        return self.core.list_namespaced_pod(self.namespace, label_selector=DISCOVERY_SELECTOR, **kwargs)

    # -- reads --------------------------------------------------------------------------------------
    def server_version(self, deadline: float | None = None) -> None:
        """``GET /version``: whether the API server answers (anyone may ask it, in a default
        cluster). Raises what the request raises: ApiException for an answer that is not 2xx, a
        ``TRANSPORT_ERRORS`` one for no answer. With a ``deadline`` (a time of
        ``time.monotonic()``) the request ends by then (it gets at least :data:`MIN_TRY` s)."""
        timeout: float | tuple[float, float] = self._timeout
        if deadline is not None:
            longest = REQUEST_TIMEOUT[1] if self.request_timeout is None else self.request_timeout
            timeout = min(longest, max(deadline - time.monotonic(), MIN_TRY))
        # the client types its answer as VersionInfo; without preloading the content, it is the raw response
        response = cast(urllib3.HTTPResponse, self.version.get_code(_preload_content=False, _request_timeout=timeout))
        try:  # read to the end: a connection returned to the pool with the body unread gives the next
            response.read()  # request that body for its own answer ("connection closed by the server")
        finally:
            response.release_conn()

    def list_page(self, resource: Resource, *, limit: int = LIST_PAGE_SIZE, token: str | None = None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"limit": limit, "_preload_content": False, "_request_timeout": self._timeout}
        if token:
            kwargs["_continue"] = token
        page: dict[str, Any] = _read_json(resource.call(**kwargs))
        return page

    def collection_version(self, resource: Resource) -> str:
        """The resourceVersion of a consistent read of ``resource`` now, at the cost of one object:
        a LIST with ``limit=1`` (without a resourceVersion it is read from etcd, and its
        ``metadata.resourceVersion`` is the revision it was read at)."""
        return str((self.list_page(resource, limit=1).get("metadata") or {}).get("resourceVersion", ""))

    def list_all(self, resource: Resource, summarize: Callable[[dict[str, Any]], T]) -> tuple[dict[str, T], str]:
        """``summarize`` of every object (by name) and the list's resourceVersion; pages are
        restarted when a token expires. Each page is freed once summarized."""
        while True:
            items: dict[str, T] = {}
            token: str | None = None
            try:
                while True:
                    page = self.list_page(resource, token=token)
                    for item in page.get("items") or []:
                        items[item["metadata"]["name"]] = summarize(item)
                    meta = page.get("metadata") or {}
                    token = meta.get("continue")
                    if not token:
                        return items, str(meta.get("resourceVersion", ""))
            except ApiException as exc:
                if exc.status != 410 or token is None:
                    raise
                log.info("listing %s: the continue token expired; listing again", resource.plural)

    def watch(
        self, resource: Resource, resource_version: str, opened: Callable[[Any], None]
    ) -> Iterator[dict[str, Any]]:
        """Watch events after ``resource_version`` (BOOKMARKs included) until the server ends the stream.

        ``opened(response)`` is called with the streaming response so another thread can abort it.
        Raises :class:`Gone` on a 410 ERROR event, ApiException for other ERROR events and
        :class:`~discovery_sync.ndjson.LineTooLong` for a line over the bound.
        """
        response = resource.call(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
            _preload_content=False,
            _request_timeout=self._watch_timeout,
        )
        opened(response)
        ended = False
        try:
            chunks = response.stream(amt=None, decode_content=False)
            for line in split_lines(chunks, f"the Kubernetes API server {self.server}"):
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError as exc:  # only the last line can lack its end: a cut stream
                    raise CutStream(f"the watch stream ended inside an event ({exc})") from None
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise Gone(status.get("message") or "the resourceVersion is too old")
                    raise ApiException(status=status.get("code"), reason=status.get("reason")) from None
                yield event
            ended = True
        finally:
            if not ended:  # unread data left: the connection cannot go back to the pool as it is
                with contextlib.suppress(Exception):
                    response.close()
            response.release_conn()

    def read_pod(self, name: str) -> dict[str, Any] | None:
        """The Pod ``name`` of this namespace as raw JSON; None when there is none (404)."""
        try:
            response = self.core.read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        pod: dict[str, Any] = _read_json(cast(urllib3.HTTPResponse, response))
        return pod

    def review_access(self, verb: str, group: str, resource: str) -> dict[str, Any]:
        """Whether this client's credentials may ``verb`` the ``resource`` of API ``group`` ("" for
        the core group) in this namespace: a SelfSubjectAccessReview, whose ``status`` (``allowed``,
        ``denied``, ``reason``, ``evaluationError``) is returned. Raises what the request raises."""
        attributes = client.V1ResourceAttributes(namespace=self.namespace, verb=verb, group=group, resource=resource)
        review = client.V1SelfSubjectAccessReview(
            api_version="authorization.k8s.io/v1",
            kind="SelfSubjectAccessReview",
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes),
        )
        # the client types its answer as a model; without preloading the content, it is the raw response
        response = cast(
            urllib3.HTTPResponse,
            self.authorization.create_self_subject_access_review(
                review, _preload_content=False, _request_timeout=self._timeout
            ),
        )
        answer = _read_json(response)
        status = answer.get("status") if isinstance(answer, dict) else None
        return status if isinstance(status, dict) else {}

    # -- writes -------------------------------------------------------------------------------------
    def apply_worker_metadata(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of the whole CR as field manager ``dynamo-worker``, forcing ownership,
        its text as the server's YAML decoder reads it (:func:`apply_body`).

        Returns the stored object (read raw: the client's typed answer is None for 201 Created).
        The official client serialises a dict body itself (with escapes the server refuses), so the
        prepared bytes go out through the client's own request path: its generic request methods
        where it has them (releases from 37 on, whose typed methods accept only a dict), else its
        typed method, to which a content type with a charset parameter passes bytes unchanged.
        """
        data = apply_body(body)
        if hasattr(self.api_client, "param_serialize"):
            response = self._apply_prepared(name, data)
        else:  # the client answers as object; without preloading the content, it is the raw response
            response = cast(
                urllib3.HTTPResponse,
                self.custom.patch_namespaced_custom_object(
                    group=GROUP,
                    version=VERSION,
                    namespace=self.namespace,
                    plural=PLURAL,
                    name=name,
                    body=cast(Any, data),  # typed for the releases that take only a dict
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type=f"{APPLY_CONTENT_TYPE}; charset=utf-8",
                    _request_timeout=self._timeout,
                    _preload_content=False,
                ),
            )
        stored: dict[str, Any] = _read_json(response)
        return stored

    def _apply_prepared(self, name: str, data: bytes) -> Any:
        """PATCH the apply body ``data`` through the client's generic request methods; the raw
        response, ApiException (as the typed methods raise it) for an answer that is not 2xx."""
        method, url, headers, body, _ = self.api_client.param_serialize(
            method="PATCH",
            resource_path="/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            path_params={
                "group": GROUP,
                "version": VERSION,
                "namespace": self.namespace,
                "plural": PLURAL,
                "name": name,
            },
            query_params=[("fieldManager", FIELD_MANAGER), ("force", True)],
            header_params={"Content-Type": APPLY_CONTENT_TYPE, "Accept": "application/json"},
            body=data,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(
            method, url, header_params=headers, body=body, _request_timeout=self._timeout
        )
        raw = response.response  # urllib3's, unread
        if not 200 <= raw.status <= 299:
            try:
                response.read()
            finally:
                raw.release_conn()
            raise ApiException(http_resp=response)
        return raw

    def delete_worker_metadata(self, name: str, uid: str | None = None) -> bool:
        """Delete the CR (only the object with ``uid`` when given); False when it was not there."""
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, body=body, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or replaced by another object of that name
                return False
            raise
        return True

    def close(self) -> None:
        self.api_client.close()


def abort(response: Any) -> None:
    """Make a read blocked on the streaming ``response`` (in another thread) return at once."""
    with contextlib.suppress(Exception):
        response.shutdown()
