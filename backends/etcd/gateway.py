"""etcd v3 through its JSON gateway, with ``requests``: the few calls discovery needs.

Keys and values travel base64-encoded; int64s arrive as strings and zero values are omitted
(so a PUT event has no ``type``). Requests go to one endpoint at a time and fail over to the
next on connection errors; a user/password pair is exchanged for a token that is renewed when
the server says it expired.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import requests

from discovery_sync.errors import BackendUnavailable, DiscoveryError, ValidationError
from discovery_sync.model import DiscoveryInstance, instance_from_json

log = logging.getLogger("discovery_sync.backends.etcd")

REQUEST_TIMEOUT = (3.05, 10.0)  # connect, read


def b64(data: bytes | str) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyValue:
        return cls(
            unb64(data.get("key")),
            unb64(data.get("value")),
            int(data.get("create_revision", 0)),
            int(data.get("mod_revision", 0)),
            int(data.get("lease", 0)),
        )


def abort_stream(response: requests.Response) -> None:
    """Make a read blocked on ``response`` (in another thread) return at once."""
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    response.close()


def parse_value(kv: KeyValue) -> DiscoveryInstance | None:
    """The record stored in ``kv``, or None (with a warning) when it is unreadable."""
    try:
        return instance_from_json(kv.value)
    except ValidationError as exc:
        log.warning("skipping unreadable record %s: %s", kv.key.decode("utf-8", "replace"), exc)
        return None


class EtcdError(DiscoveryError):
    """The server refused a request (its message is included)."""


class EtcdGateway:
    def __init__(
        self,
        endpoints: list[str],
        *,
        username: str | None = None,
        password: str | None = None,
        verify: str | bool = True,
        cert: tuple[str, str] | None = None,
    ) -> None:
        if not endpoints:
            raise BackendUnavailable("no etcd endpoints given")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._current = 0
        self._credentials = (username, password) if username else None
        self._token: str | None = None
        self._lock = threading.Lock()
        self.session = self._new_session(verify, cert)
        self._verify, self._cert = verify, cert

    @staticmethod
    def _new_session(verify: str | bool, cert: tuple[str, str] | None) -> requests.Session:
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=16)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.verify = verify
        session.cert = cert
        return session

    def stream_session(self) -> requests.Session:
        """A session of its own for a long-lived watch stream."""
        return self._new_session(self._verify, self._cert)

    # -- plumbing ---------------------------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        if self._credentials and self._token is None:
            self._authenticate()
        return {"Authorization": self._token} if self._token else {}

    def _authenticate(self) -> None:
        user, password = self._credentials
        reply = self._post_raw("/v3/auth/authenticate", {"name": user, "password": password}, {})
        self._token = reply.get("token")

    def _post_raw(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        errors = []
        for attempt in range(len(self.endpoints)):
            with self._lock:
                endpoint = self.endpoints[(self._current + attempt) % len(self.endpoints)]
            try:
                response = self.session.post(endpoint + path, json=body, headers=headers, timeout=REQUEST_TIMEOUT)
            except requests.RequestException as exc:
                errors.append(f"{endpoint}: {exc}")
                continue
            with self._lock:
                self._current = self.endpoints.index(endpoint)
            return self._decode(response, path)
        raise BackendUnavailable(f"no etcd endpoint answered {path}: " + "; ".join(errors))

    @staticmethod
    def _decode(response: requests.Response, path: str) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            raise BackendUnavailable(f"etcd answered {path} with HTTP {response.status_code} and no JSON") from None
        if response.status_code != 200 or ("error" in data and "header" not in data):
            message = data.get("message") or data.get("error") or response.text
            raise EtcdError(f"etcd refused {path}: {message}")
        return data

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._post_raw(path, body, self.headers())
        except EtcdError as exc:
            if self._credentials and "token" in str(exc).lower():
                self._token = None  # expired or invalid token: authenticate again once
                return self._post_raw(path, body, self.headers())
            raise

    # -- calls ------------------------------------------------------------------------------------
    def range(self, key: bytes, range_end: bytes | None = None, *, limit: int = 0) -> tuple[list[KeyValue], int]:
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        if limit:
            body["limit"] = limit
        reply = self.post("/v3/kv/range", body)
        return [KeyValue.from_json(kv) for kv in reply.get("kvs", [])], int(reply["header"]["revision"])

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return int(self.post("/v3/kv/put", body)["header"]["revision"])

    def create(self, key: bytes, value: bytes, lease: int = 0) -> tuple[bool, KeyValue | None]:
        """Put ``key`` only if it does not exist; otherwise return the stored pair."""
        put: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            put["lease"] = str(lease)
        reply = self.post(
            "/v3/kv/txn",
            {
                "compare": [{"key": b64(key), "target": "VERSION", "result": "EQUAL", "version": "0"}],
                "success": [{"request_put": put}],
                "failure": [{"request_range": {"key": b64(key)}}],
            },
        )
        if reply.get("succeeded"):
            return True, None
        kvs = reply["responses"][0]["response_range"].get("kvs", [])
        return False, KeyValue.from_json(kvs[0]) if kvs else None

    def delete(self, key: bytes) -> None:
        self.post("/v3/kv/deleterange", {"key": b64(key)})

    def lease_grant(self, ttl: int, lease_id: int = 0) -> tuple[int, int]:
        body: dict[str, Any] = {"TTL": str(ttl)}
        if lease_id:
            body["ID"] = str(lease_id)
        reply = self.post("/v3/lease/grant", body)
        if reply.get("error"):
            raise EtcdError(f"etcd refused the lease: {reply['error']}")
        return int(reply["ID"]), int(reply["TTL"])

    def lease_keepalive(self, lease_id: int) -> int:
        """The lease's remaining TTL; 0 when the lease has expired."""
        reply = self.post("/v3/lease/keepalive", {"ID": str(lease_id)})
        return int(reply.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease_id: int) -> None:
        self.post("/v3/lease/revoke", {"ID": str(lease_id)})

    def watch(
        self,
        session: requests.Session,
        key: bytes,
        range_end: bytes,
        start_revision: int,
        read_timeout: float,
        opened: Callable[[requests.Response], None] = lambda response: None,
    ) -> Iterator[dict[str, Any]]:
        """Yield the ``result`` objects of a watch stream until it ends or fails (raises).

        ``opened`` receives the streaming response, so another thread can abort it with
        :func:`abort_stream`."""
        body = {
            "create_request": {
                "key": b64(key),
                "range_end": b64(range_end),
                "start_revision": str(start_revision),
                "prev_kv": True,
                "progress_notify": True,
            }
        }
        with self._lock:
            endpoint = self.endpoints[self._current]
        response = session.post(
            endpoint + "/v3/watch", json=body, headers=self.headers(), stream=True, timeout=(3.05, read_timeout)
        )
        opened(response)
        try:
            if response.status_code != 200:
                raise BackendUnavailable(f"etcd refused the watch: HTTP {response.status_code} {response.text[:200]}")
            decoder = json.JSONDecoder()
            text = codecs.getincrementaldecoder("utf-8")()
            buffer = ""
            for chunk in response.iter_content(chunk_size=None):
                buffer += text.decode(chunk)
                while True:  # messages are concatenated JSON objects, not aligned to chunks
                    buffer = buffer.lstrip()
                    if not buffer:
                        break
                    try:
                        message, end = decoder.raw_decode(buffer)
                    except ValueError:
                        break  # incomplete: wait for more bytes
                    buffer = buffer[end:]
                    if "error" in message:
                        raise BackendUnavailable(f"the etcd watch stream failed: {message['error']}")
                    yield message.get("result", {})
        finally:
            response.close()
