"""Wire client of the etcd backend: etcd v3 through its JSON gateway with ``requests``, the calls needed.

Keys and values travel base64-encoded; int64s arrive as strings and zero values are omitted
(so a PUT event has no ``type``). Requests go to one endpoint at a time and fail over to the
next on connection errors; a user/password pair is exchanged for a token that is renewed when
the server says it expired.

Every reply is read only through the accessors below (``_object``, ``_int_field``, ``_b64``...),
which raise ``_Malformed``; :func:`_parsed` turns that into a :class:`BackendUnavailable` naming
the call and quoting the reply. A server answering HTTP 200 with JSON of the wrong shape thus
makes every public call raise BackendUnavailable, never KeyError, TypeError or binascii.Error.

A server that cannot be reached is a BackendUnavailable too, whose message is one line naming the
endpoint(s) and the cause in words (:func:`failure_cause`: connection refused, timed out, name not
resolved, TLS error, reset...), never the reprs of requests' and urllib3's exceptions. That, and
HTTP 5xx, is an :class:`Unreachable`: the gateway tells its client of each (and of the first answer
after one) through :meth:`EtcdGateway.report_to`, which is how the client's connection state learns
that etcd is away and back.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import http.client
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import requests
import urllib3

from discovery_sync.errors import BackendUnavailable, DiscoveryError, UnknownRecordType, ValidationError
from discovery_sync.identity import RecordKind
from discovery_sync.model import DiscoveryInstance, instance_from_json
from discovery_sync.ndjson import split_lines
from discovery_sync.unknown_kinds import skip_unknown

from .deadlines import MIN_PATIENCE, Patience
from .members import Members

log = logging.getLogger("discovery_sync.backends.etcd")

REQUEST_TIMEOUT = 10.0  # seconds a unary request may take in all (the request_timeout option's default)
CONNECT_TIMEOUT = 3.05  # seconds connecting may take of it (and of opening a watch stream), at most
#: seconds each endpoint is given at least by a call with a deadline, even when (nearly) none is left
MIN_TRY = MIN_PATIENCE
QUOTE_LIMIT = 200  # characters of a malformed reply quoted in an error message
WATCH = "/v3/watch"

T = TypeVar("T")


def b64(data: bytes | str) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str | None) -> bytes:
    """Decode a base64 field of etcd's; BackendUnavailable when it is not base64."""
    return _b64(text, "the field")


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


# -- reading replies: the one place a reply's shape is checked ----------------------------------------
class _Malformed(BackendUnavailable):
    """A reply of the wrong shape, raised by the accessors; :func:`_parsed` adds the call and the reply."""


_INTEGER = re.compile(r"-?[0-9]{1,19}")
_INT64 = range(-(2**63), 2**63)


def _quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``value`` (a parsed reply, or its text) as compact JSON, shortened to ``limit`` characters."""
    if isinstance(value, str | bytes):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    else:
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = "<unprintable>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parsed(what: str, raw: Any, parse: Callable[[Any], T]) -> T:
    """``parse(raw)``; a malformed ``raw`` raises BackendUnavailable naming ``what`` and quoting ``raw``.

    ``parse`` must read ``raw`` only through the accessors, so that any wrong shape is a ``_Malformed``.
    """
    try:
        return parse(raw)
    except _Malformed as exc:
        raise BackendUnavailable(f"etcd answered {what} with a malformed response ({exc}): {_quote(raw)}") from None


def _object(value: Any, what: str = "the response") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not a JSON object")
    return value


def _object_field(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """The required object ``obj[name]``."""
    if obj.get(name) is None:
        raise _Malformed(f'"{name}" is missing')
    return _object(obj[name], f'"{name}"')


def _list_field(obj: dict[str, Any], name: str) -> list[Any]:
    """The list ``obj[name]``; empty when absent (etcd omits empty lists)."""
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f'"{name}" is not a list: {_quote(value, 60)}')
    return value


def _int_field(obj: dict[str, Any], name: str, *, required: bool = False) -> int:
    """The int64 ``obj[name]``, sent as a decimal string (or a number); 0 when absent unless ``required``."""
    value = obj.get(name)
    if value is None:
        if required:
            raise _Malformed(f'"{name}" is missing')
        return 0
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
        raise _Malformed(f'"{name}" is not an integer: {_quote(obj[name], 60)}')
    return value


def _bool_field(obj: dict[str, Any], name: str) -> bool:
    """The boolean ``obj[name]``; False when absent."""
    value = obj.get(name, False)
    if not isinstance(value, bool):
        raise _Malformed(f'"{name}" is not a boolean: {_quote(value, 60)}')
    return value


def _str_field(obj: dict[str, Any], name: str) -> str:
    """The string ``obj[name]``; empty when absent."""
    value = obj.get(name, "")
    if not isinstance(value, str):
        raise _Malformed(f'"{name}" is not a string: {_quote(value, 60)}')
    return value


def _b64(value: Any, name: str) -> bytes:
    """The bytes of base64 ``value`` (the field ``name``); empty when absent."""
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise _Malformed(f"{name} is not a base64 string: {_quote(value, 60)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Malformed(f"{name} is not base64: {_quote(value, 60)}") from None


def _revision(obj: dict[str, Any]) -> int:
    """The store revision in ``obj``'s header, which every etcd reply carries."""
    return _int_field(_object_field(obj, "header"), "revision", required=True)


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, data: Any) -> KeyValue:
        """The pair in a reply (raises ``_Malformed``, a BackendUnavailable, when it is not one)."""
        kv = _object(data, "a key-value")
        return cls(
            _b64(kv.get("key"), '"key"'),
            _b64(kv.get("value"), '"value"'),
            _int_field(kv, "create_revision"),
            _int_field(kv, "mod_revision"),
            _int_field(kv, "lease"),
        )


@dataclass(frozen=True, slots=True)
class WatchEvent:
    deleted: bool
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchResult:
    """One message of a watch stream. ``revision`` is the header's: for a message without events
    (and not ``created``) it is a progress notification."""

    revision: int
    created: bool
    canceled: bool
    cancel_reason: str
    compact_revision: int
    events: tuple[WatchEvent, ...]


def parse_watch_result(result: dict[str, Any]) -> WatchResult:
    """The ``result`` object :meth:`EtcdGateway.watch` yields, checked; BackendUnavailable when malformed."""
    return _parsed(WATCH, result, _watch_result)


def _watch_result(value: Any) -> WatchResult:
    result = _object(value, '"result"')
    canceled = _bool_field(result, "canceled")
    # etcd cancels a watch whose start revision is compacted with a header without a revision
    revision = _int_field(_object_field(result, "header"), "revision", required=not canceled)
    return WatchResult(
        revision,
        _bool_field(result, "created"),
        canceled,
        _str_field(result, "cancel_reason"),
        _int_field(result, "compact_revision"),
        tuple(_watch_event(event) for event in _list_field(result, "events")),
    )


def _watch_event(value: Any) -> WatchEvent:
    event = _object(value, "an event")
    kind = _str_field(event, "type")
    if kind not in ("", "PUT", "DELETE"):
        raise _Malformed(f"unknown event type {_quote(kind, 60)}")
    return WatchEvent(kind == "DELETE", KeyValue.from_json(_object_field(event, "kv")))


def _range_reply(value: Any) -> tuple[list[KeyValue], int]:
    reply = _object(value)
    return [KeyValue.from_json(kv) for kv in _list_field(reply, "kvs")], _revision(reply)


def _header_reply(value: Any) -> int:
    return _revision(_object(value))


def _txn_create_reply(value: Any) -> tuple[bool, KeyValue | None]:
    reply = _object(value)
    _revision(reply)
    if _bool_field(reply, "succeeded"):
        return True, None
    responses = _list_field(reply, "responses")
    if not responses:
        raise _Malformed('the failed transaction has no "responses"')
    kvs = _list_field(_object_field(_object(responses[0], "responses[0]"), "response_range"), "kvs")
    return False, KeyValue.from_json(kvs[0]) if kvs else None


def _lease_grant_reply(value: Any, requested: int) -> tuple[int, int]:
    reply = _object(value)
    _revision(reply)
    error = _str_field(reply, "error")
    if error:
        raise EtcdError(f"etcd refused the lease: {_quote(error)}")
    lease_id = _int_field(reply, "ID", required=True)
    if lease_id <= 0:
        raise _Malformed(f"{lease_id} is not a lease id")
    if requested and lease_id != requested:
        raise _Malformed(f"lease {lease_id:x} was granted instead of {requested:x}")
    return lease_id, _int_field(reply, "TTL")


_UINT64 = range(2**64)


def _status_leader(value: Any) -> int:
    """The member id of the leader in a status reply: a uint64 (as a decimal string); 0, which
    etcd omits, while the member knows no leader."""
    reply = _object(value)
    _revision(reply)
    leader = reply.get("leader", 0)
    if isinstance(leader, str) and leader.isascii() and leader.isdigit() and len(leader) <= 20:
        leader = int(leader)
    if isinstance(leader, bool) or not isinstance(leader, int) or leader not in _UINT64:
        raise _Malformed(f'"leader" is not a member id: {_quote(leader, 60)}')
    return leader


def _lease_keepalive_reply(value: Any) -> int:
    result = _object_field(_object(value), "result")
    _revision(result)
    return _int_field(result, "TTL")  # omitted (0) once the lease has expired


def _token_reply(value: Any) -> str:
    token = _str_field(_object(value), "token")
    if not token:
        raise _Malformed('no "token"')
    return token


def _watch_messages(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The ``result`` objects of the watch stream's ``lines`` (each holds one JSON message or more)."""
    decoder = json.JSONDecoder()
    for line in lines:
        text = line.decode("utf-8", "replace").strip()
        while text:
            try:
                message, end = decoder.raw_decode(text)
            except (ValueError, RecursionError):
                raise BackendUnavailable(f"etcd sent a line that is not JSON on {WATCH}: {_quote(text)}") from None
            text = text[end:].lstrip()
            if isinstance(message, dict) and "error" in message:
                raise BackendUnavailable(f"the etcd watch stream failed: {_quote(message['error'])}")
            yield _parsed(WATCH, message, lambda value: _object_field(_object(value), "result"))


def abort_stream(response: requests.Response) -> None:
    """Make a read blocked on ``response`` (in another thread) return at once."""
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    response.close()


def parse_value(kv: KeyValue) -> DiscoveryInstance | None:
    """The record stored in ``kv``, or None when it is unreadable (with a warning) or of a type this
    version does not know (a newer runtime's kind: said once, :mod:`discovery_sync.unknown_kinds`)."""
    try:
        return instance_from_json(kv.value)
    except UnknownRecordType as exc:
        key = kv.key.decode("utf-8", "replace")
        skip_unknown(log, _bucket_of(key), key, exc)
        return None
    except ValidationError as exc:
        log.warning("skipping unreadable record %s: %s", kv.key.decode("utf-8", "replace"), exc)
        return None


def _bucket_of(key: str) -> str:
    """The bucket prefix of a record key (``{root}v1/instances``), or the key when it holds none."""
    for kind in RecordKind:
        at = key.find(f"{kind.bucket}/")
        if at >= 0:
            return key[: at + len(kind.bucket)]
    return key


# -- why a request failed, in words ----------------------------------------------------------------
_ERRNO_CAUSES = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset by the server",
    errno.ECONNABORTED: "connection aborted",
    errno.EPIPE: "connection closed by the server",
    errno.ETIMEDOUT: "connection timed out",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.EADDRNOTAVAIL: "address not available",
}


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it wraps (arguments, urllib3's ``reason``, causes and contexts), outermost first."""
    found: list[BaseException] = []
    pending: list[Any] = [exc]
    while pending:
        current = pending.pop(0)
        if not isinstance(current, BaseException) or any(current is seen for seen in found):
            continue
        found.append(current)
        pending.extend(current.args)
        pending.extend((getattr(current, "reason", None), current.__cause__, current.__context__))
    return found


def _first_line(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _seconds_text(seconds: float) -> str:
    """A request timeout as people write it: to a tenth of a second (a timeout cut to the time
    left before a deadline, 0.2994 s, reads 0.3), a smaller one to two digits."""
    return f"{round(seconds, 1):g}" if seconds >= 0.1 else f"{seconds:.2g}"


def failure_cause(exc: BaseException) -> str:
    """Why a request failed, in a few words: "connection refused", "connection timed out",
    "no reply within 5 s", "name not resolved", "TLS error: ...", "connection reset by the server"...

    ``exc`` is what requests raised (or what it wraps); the text never holds urllib3's reprs.
    """
    chain = _causes(exc)

    def first(*kinds: type[BaseException]) -> BaseException | None:
        return next((e for e in chain if isinstance(e, kinds)), None)

    tls = first(ssl.SSLError)
    if tls is not None or first(requests.exceptions.SSLError, urllib3.exceptions.SSLError) is not None:
        verify_message = getattr(tls, "verify_message", None)
        reason = f"certificate verify failed: {verify_message}" if verify_message else getattr(tls, "reason", None)
        if not reason and tls is not None:  # made by hand, not by the ssl module: its text
            reason = re.sub(r"^\[SSL: [A-Z_]+\]\s*|\s*\(_ssl\.c:\d+\)$", "", str(tls.args[-1] if tls.args else tls))
        return f"TLS error: {_first_line(str(reason).lower().replace('_', ' ')) or 'the handshake failed'}"
    if first(socket.gaierror, urllib3.exceptions.NameResolutionError) is not None:
        return "name not resolved"
    if first(ConnectionRefusedError) is not None:
        return "connection refused"
    if first(requests.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError) is not None:
        return "connection timed out"
    read_timeout = first(requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError)
    if read_timeout is not None:
        seconds = re.search(r"read timeout=([0-9.]+)", str(read_timeout))
        return f"no reply within {_seconds_text(float(seconds.group(1)))} s" if seconds else "no reply in time"
    if first(http.client.RemoteDisconnected) is not None:  # a ConnectionResetError without an errno
        return "connection closed by the server without a reply"
    if first(ConnectionResetError) is not None:
        return "connection reset by the server"
    failed = next((e for e in chain if isinstance(e, OSError) and e.errno), None)
    if failed is not None and failed.errno is not None:
        return _ERRNO_CAUSES.get(failed.errno) or os.strerror(failed.errno).lower()
    if first(urllib3.exceptions.ProtocolError) is not None:
        return "connection closed by the server without a reply"
    if first(requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema) is not None:
        return "the endpoint is not a valid URL"
    innermost = chain[-1]
    text = _first_line(str(innermost))
    if not text or "Pool(" in text or "Max retries" in text or "Connection(" in text:
        return f"{type(innermost).__name__} (no further detail)"
    return f"{type(innermost).__name__}: {text}"


class EtcdError(DiscoveryError):
    """The server refused a request (its message is included)."""


class Unreachable(BackendUnavailable):
    """etcd could not be reached (refused, timed out, reset...) or could not serve a request (HTTP
    5xx: no leader, overloaded, shutting down): a fault of the link, unlike a refusal (:class:`EtcdError`)
    or a malformed reply, which are answers."""


def _ignore_failure(message: str) -> None:
    return None


def _ignore_answer() -> None:
    return None


def _refusal(data: Any, text: str) -> str:
    """The message of an error reply (JSON of any shape)."""
    if isinstance(data, dict):
        message = data.get("message") or data.get("error")
        if message:
            return _quote(message)
    return _quote(text)


class EtcdGateway:
    """The calls the backend makes, each tried on the members in turn (:mod:`.members`), each attempt
    bounded by the patience of its kind (:mod:`.deadlines`) and the whole by ``request_timeout``."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        username: str | None = None,
        password: str | None = None,
        verify: str | bool = True,
        cert: tuple[str, str] | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        patience: Patience | None = None,
    ) -> None:
        """``request_timeout``: seconds each unary request may take in all, every member tried and
        connecting included (which may take ``CONNECT_TIMEOUT`` of it at most, as may opening a
        watch stream); ``patience``: how long one member may take (default: that of a 10 s TTL)."""
        if not endpoints:
            raise BackendUnavailable("no etcd endpoints given")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.members = Members(self.endpoints)
        self._credentials = (username, password) if username else None
        self._token: str | None = None
        self.session = self._new_session(verify, cert)
        self._verify, self._cert = verify, cert
        self.request_timeout = request_timeout
        self.connect_timeout = min(CONNECT_TIMEOUT, request_timeout)
        self.patience = patience or Patience.for_ttl(10, request_timeout)
        #: set by :meth:`interrupt`: every call but a ``final`` one refuses at once
        self.closing = False
        #: a request failed as :class:`Unreachable` and none got an answer since (see :meth:`report_to`)
        self.failing = False
        self._on_failure: Callable[[str], None] = _ignore_failure
        self._on_answer: Callable[[], None] = _ignore_answer
        self._link_lock = threading.Lock()  # keeps ``failing`` and the reports it leads to in order

    def report_to(self, on_failure: Callable[[str], None], on_answer: Callable[[], None]) -> None:
        """From now on call ``on_failure(message)`` for every request (or watch stream, through
        :meth:`failed`) that fails because etcd cannot be reached or cannot serve it
        (:class:`Unreachable`), and ``on_answer()`` for the first one that gets an answer after
        such a failure (a refusal or a malformed reply is an answer too). Both are called in the
        thread of the request, under a lock of the gateway that nothing else is taken under: they
        must only note the change. A request that is answered while nothing failed costs one
        attribute read."""
        with self._link_lock:
            self._on_failure, self._on_answer = on_failure, on_answer

    def failed(self, message: str) -> None:
        """A request or stream failed as :class:`Unreachable` (see :meth:`report_to`); nothing
        once the client shuts down (:meth:`interrupt` cut it: no fault of etcd's)."""
        if self.closing:
            return
        with self._link_lock:
            self.failing = True
            self._on_failure(message)

    def answered(self) -> None:
        """A request or stream got an answer (see :meth:`report_to`); free unless one failed before."""
        if self.failing:
            with self._link_lock:
                if self.failing:
                    self.failing = False
                    self._on_answer()

    def interrupt(self) -> None:
        """The client shuts down: every request under way fails at once (its connection is cut)
        and every later one but a ``final`` one refuses."""
        self.closing = True
        self.members.connections.cut()

    def _new_session(self, verify: str | bool, cert: tuple[str, str] | None) -> requests.Session:
        session = requests.Session()
        adapter = self.members.connections.adapter(pool_connections=4, pool_maxsize=16)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.verify = verify
        session.cert = cert
        return session

    def stream_session(self) -> requests.Session:
        """A session of its own for a long-lived watch stream."""
        return self._new_session(self._verify, self._cert)

    # -- plumbing ---------------------------------------------------------------------------------
    def headers(self, deadline: float | None = None) -> dict[str, str]:
        """The headers of a request: the token, logging in first when there is none (within
        ``deadline``, a time of ``time.monotonic()``; None: each request within ``request_timeout``)."""
        if self._credentials and self._token is None:
            self._authenticate(*self._credentials, deadline=deadline)
        return {"Authorization": self._token} if self._token else {}

    def _authenticate(self, user: str, password: str | None, *, deadline: float | None = None) -> None:
        path = "/v3/auth/authenticate"
        reply = self._post_raw(path, {"name": user, "password": password}, {}, deadline=deadline)
        self._token = _parsed(path, reply, _token_reply)

    def _attempt_timeout(self, left: float, members_left: int, patience: float | None) -> Any:
        """The urllib3 timeout of one attempt: ``patience`` (None: an equal share of the ``left``
        seconds among the ``members_left``, as connecting asks), cut to the time left, at least
        :data:`MIN_TRY`; of it, ``connect_timeout`` at most to connect."""
        wanted = left / members_left if patience is None else patience
        total = max(min(wanted, left, self.request_timeout), MIN_TRY)
        return urllib3.Timeout(connect=min(self.connect_timeout, total), total=total)

    def _post_raw(
        self,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        *,
        deadline: float | None = None,
        patience: float | None = None,
        on_overdue: Callable[[str, str], None] | None = None,
        final: bool = False,
    ) -> Any:
        """POST to the members in turn until one answers (see the class docstring); an attempt
        that fails sets its member aside (``on_overdue(member, cause)`` is told when it timed out)
        and the next member is tried. Unreachable naming each member and why it failed when none
        answers by ``deadline`` (a time of ``time.monotonic()``; default ``request_timeout`` from
        now). Without a ``patience`` the members share the time left (connecting)."""
        end = deadline if deadline is not None else time.monotonic() + self.request_timeout
        if deadline is None and patience is None:
            patience = self.patience.write
        order = self.members.order()
        errors: dict[str, str] = {}
        for attempt, endpoint in enumerate(order):
            if self.closing and not final:
                raise BackendUnavailable("the client is shutting down")
            timeout = self._attempt_timeout(end - time.monotonic(), len(order) - attempt, patience)
            outcome = self._attempt(endpoint, path, body, headers, timeout, on_overdue, alone=len(order) == 1)
            if isinstance(outcome, str):
                errors[endpoint] = outcome
                continue
            self.members.answered(endpoint)
            if self.failing and outcome.status_code < 500:
                self.answered()
            try:
                return self._decode(outcome, path)
            except Unreachable as exc:
                self.failed(str(exc))
                raise
        failure = Unreachable("cannot reach etcd at " + "; ".join(f"{e}: {errors[e]}" for e in self.endpoints))
        self.failed(str(failure))
        raise failure

    def _attempt(
        self,
        endpoint: str,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        timeout: Any,
        on_overdue: Callable[[str, str], None] | None,
        *,
        alone: bool,
    ) -> requests.Response | str:
        """One attempt on ``endpoint``: its response, or why it failed (its member then set aside).
        An HTTP 5xx is a failure unless the member is the only one (``alone``)."""
        try:
            response = self.session.post(endpoint + path, json=body, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            cause = failure_cause(exc)
            self._member_failed(endpoint, cause, _timed_out(exc), on_overdue)
            return cause
        except (AttributeError, ValueError):
            # http.client reading a connection shut under it may fail so: a cut, when one was made
            if not (self.closing or self.members.is_aside(endpoint)):
                raise
            return "connection cut (the member was set aside)"
        if response.status_code >= 500 and not alone:
            unserved = _unserved(response, path)
            self._member_failed(endpoint, unserved, False, None)
            return unserved
        return response

    def _member_failed(
        self, endpoint: str, cause: str, timed_out: bool, on_overdue: Callable[[str, str], None] | None
    ) -> None:
        """An attempt on ``endpoint`` failed: set it aside (unless the client is closing, which cut
        it), and tell ``on_overdue`` when it did not answer in time."""
        if self.closing:
            return
        self.members.set_aside(endpoint, cause)
        if timed_out and on_overdue is not None:
            on_overdue(endpoint, cause)

    @staticmethod
    def _decode(response: requests.Response, path: str) -> Any:
        """The JSON of a successful reply, of any shape (the caller checks it with :func:`_parsed`);
        :class:`Unreachable` for HTTP 5xx, EtcdError for a refusal."""
        unavailable = response.status_code >= 500  # no leader, overloaded, shutting down: retrying may help
        try:
            data = response.json()
        except (ValueError, RecursionError):
            raise (Unreachable if unavailable else BackendUnavailable)(
                f"etcd answered {path} with HTTP {response.status_code} and no JSON: {_quote(response.text)}"
            ) from None
        refused = isinstance(data, dict) and "error" in data and "header" not in data
        if unavailable:
            raise Unreachable(
                f"etcd could not serve {path} (HTTP {response.status_code}): {_refusal(data, response.text)}"
            )
        if response.status_code != 200 or refused:
            raise EtcdError(f"etcd refused {path}: {_refusal(data, response.text)}")
        return data

    def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        patience: float | None = None,
        deadline: float | None = None,
        on_overdue: Callable[[str, str], None] | None = None,
        final: bool = False,
    ) -> Any:
        """The JSON reply to ``body`` (unchecked: read it with :func:`_parsed`); see :meth:`_post_raw`."""
        options: dict[str, Any] = {"patience": patience, "deadline": deadline, "on_overdue": on_overdue, "final": final}
        try:
            return self._post_raw(path, body, self.headers(), **options)
        except EtcdError as exc:
            if self._credentials and "token" in str(exc).lower():
                self._token = None  # expired or invalid token: authenticate again once
                return self._post_raw(path, body, self.headers(), **options)
            raise

    def _call(self, path: str, body: dict[str, Any], parse: Callable[[Any], T], **options: Any) -> T:
        """POST ``body`` to ``path`` and read the reply with ``parse``; malformed → BackendUnavailable.
        ``options``: those of :meth:`post` (default: a write's patience)."""
        return _parsed(path, self.post(path, body, **options), parse)

    # -- calls ------------------------------------------------------------------------------------
    def server_status(self, deadline: float | None = None) -> int:
        """Ask the server how it is (``/v3/maintenance/status``, which needs no permission): the store
        revision. With a ``deadline`` (a time of ``time.monotonic()``), logging in and asking end
        by then, the members sharing the time left (each at least :data:`MIN_TRY` seconds)."""
        path = "/v3/maintenance/status"
        return _parsed(path, self._post_raw(path, {}, self.headers(deadline), deadline=deadline), _header_reply)

    def member_leader(self, member: str, timeout: float) -> int:
        """Ask ``member`` alone for its status within ``timeout`` seconds: the id of the leader it
        follows, 0 when it knows none. Unreachable when it does not answer (or answers 5xx)."""
        path = "/v3/maintenance/status"
        try:
            response = self.session.post(member + path, json={}, headers=self.headers(), timeout=timeout)
        except requests.RequestException as exc:
            raise Unreachable(f"{member}: {failure_cause(exc)}") from None
        if response.status_code >= 500:
            raise Unreachable(f"{member}: {_unserved(response, path)}")
        self.members.answered(member)
        self.answered()
        return _parsed(path, self._decode(response, path), _status_leader)

    def range(self, key: bytes, range_end: bytes | None = None, *, limit: int = 0) -> tuple[list[KeyValue], int]:
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        if limit:
            body["limit"] = limit
        return self._call("/v3/kv/range", body, _range_reply, patience=self.patience.read)

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return self._call("/v3/kv/put", body, _header_reply)

    def create(self, key: bytes, value: bytes, lease: int = 0) -> tuple[bool, KeyValue | None]:
        """Put ``key`` only if it does not exist; otherwise return the stored pair."""
        put: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            put["lease"] = str(lease)
        body = {
            "compare": [{"key": b64(key), "target": "VERSION", "result": "EQUAL", "version": "0"}],
            "success": [{"request_put": put}],
            "failure": [{"request_range": {"key": b64(key)}}],
        }
        return self._call("/v3/kv/txn", body, _txn_create_reply)

    def delete(self, key: bytes) -> None:
        self._call("/v3/kv/deleterange", {"key": b64(key)}, _header_reply)

    def lease_grant(self, ttl: int, lease_id: int = 0) -> tuple[int, int]:
        """Grant a lease (with ``lease_id`` when not 0): its id and TTL."""
        body: dict[str, Any] = {"TTL": str(ttl)}
        if lease_id:
            body["ID"] = str(lease_id)
        return self._call("/v3/lease/grant", body, partial(_lease_grant_reply, requested=lease_id))

    def lease_keepalive(
        self,
        lease_id: int,
        *,
        deadline: float | None = None,
        on_overdue: Callable[[str, str], None] | None = None,
    ) -> int:
        """The lease's remaining TTL; 0 when the lease has expired. Each member gets the
        keep-alive's patience; ``on_overdue(member, cause)`` is told of each that did not answer
        in time, before the next is tried; ``deadline`` (a time of ``time.monotonic()``) ends the
        tries."""
        return self._call(
            "/v3/lease/keepalive",
            {"ID": str(lease_id)},
            _lease_keepalive_reply,
            patience=self.patience.keepalive,
            deadline=deadline,
            on_overdue=on_overdue,
        )

    def confirm_quorum(
        self,
        key: bytes,
        *,
        deadline: float | None = None,
        on_overdue: Callable[[str, str], None] | None = None,
    ) -> None:
        """A linearizable read of the one key ``key`` (no value), with the keep-alive's patience: a
        member answers it only once the leader has heard from a quorum, so a leader cut off from the
        others, which may still renew leases for a second or two, is caught. One key, not a range
        with a limit of 1: etcd counts every key of a range whatever the limit (6.6 ms at 100,000
        records against 1.3 ms at 1,000, on every keep-alive of every client)."""
        body = {"key": b64(key), "keys_only": True}
        self._call(
            "/v3/kv/range",
            body,
            _header_reply,
            patience=self.patience.keepalive,
            deadline=deadline,
            on_overdue=on_overdue,
        )

    def lease_revoke(self, lease_id: int, *, deadline: float | None = None) -> None:
        """Revoke the lease (etcd deletes every key attached to it); also while :attr:`closing`."""
        self._call("/v3/lease/revoke", {"ID": str(lease_id)}, _header_reply, deadline=deadline, final=True)

    def watch(
        self,
        session: requests.Session,
        key: bytes,
        range_end: bytes,
        start_revision: int,
        read_timeout: float,
        opened: Callable[[requests.Response], None] = lambda response: None,
        member: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield the ``result`` objects (checked with :func:`parse_watch_result`) of a watch stream
        on ``member`` (default: the preferred one) until it ends or fails: BackendUnavailable for
        an error or a malformed message, ``requests.ReadTimeout`` when nothing arrived for
        ``read_timeout`` seconds, another ``requests.RequestException`` when the connection failed.

        ``opened`` receives the streaming response, so another thread can abort it with
        :func:`abort_stream`."""
        body: dict[str, Any] = {
            "create_request": {
                "key": b64(key),
                "range_end": b64(range_end),
                "start_revision": str(start_revision),
                "prev_kv": True,
                "progress_notify": True,
            }
        }
        if self.closing:
            raise BackendUnavailable("the client is shutting down")
        response = session.post(
            (member or self.members.preferred()) + WATCH,
            json=body,
            headers=self.headers(),
            stream=True,
            timeout=(self.connect_timeout, read_timeout),
        )
        opened(response)
        try:
            if response.status_code != 200:
                failure = Unreachable if response.status_code >= 500 else BackendUnavailable
                raise failure(f"etcd refused the watch: HTTP {response.status_code} {_quote(response.text)}")
            yield from _watch_messages(split_lines(_chunks(response), f"etcd on {WATCH}"))
        finally:
            response.close()


def _timed_out(exc: BaseException) -> bool:
    """Whether a request failed because the member did not answer in time (not a refusal, which
    urllib3 makes a kind of connect timeout)."""
    for cause in _causes(exc):
        if isinstance(cause, urllib3.exceptions.NewConnectionError):
            return False
        if isinstance(cause, requests.Timeout | urllib3.exceptions.TimeoutError):
            return True
    return False


def _unserved(response: requests.Response, path: str) -> str:
    """The words of an HTTP 5xx reply (no leader, overloaded, shutting down)."""
    try:
        data: Any = response.json()
    except (ValueError, RecursionError):
        data = None
    return f"etcd could not serve {path} (HTTP {response.status_code}): {_refusal(data, response.text)}"


def _chunks(response: requests.Response) -> Iterator[bytes]:
    """The body of a streaming response as it arrives; a read timeout is ``requests.ReadTimeout``
    (requests reports one in the middle of a body as a ConnectionError)."""
    try:
        yield from response.iter_content(chunk_size=None)
    except requests.ConnectionError as exc:
        if exc.args and isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError):
            raise requests.ReadTimeout(*exc.args, response=response) from exc
        raise
