"""A small client for etcd 3.4+'s HTTP/JSON gateway (``/v3/...``) over the project's HttpClient.

Theory of operation. etcd's gRPC gateway accepts the v3 API as JSON: keys and values are base64,
64-bit integers are strings. Each unary call here is one bounded POST through the pooled
``HttpClient`` (no redirects, no retries of its own, connect and read timeouts), so the outcome
of every call is one of three, as in the client:

- a decoded answer;
- ``EtcdUnavailable`` — definite: no endpoint took the request (every connect failed), or etcd
  refused it (4xx), so nothing was written;
- ``EtcdAmbiguous`` — a write may have been applied (reset or read timeout after sending, or a
  5xx such as "request timed out", which etcd may answer after proposing the write).

Failover between endpoints is explicit and safe: a refused connection moves to the next
endpoint (nothing was sent). A call marked ``idempotent`` (reads, keepalives, revokes) may also
be resent to the next endpoint after an ambiguous send or an error answer, because doing it
twice changes nothing; a write (a put inside a txn) never is here — the replication resends its
appends itself, and only because each is guarded by a compare that makes a resend harmless.
The watch stream does not fit a bounded request/response client and has its own reader
(``etcd_watch``).

Authentication (optional): with ``auth=(name, password)`` the client calls
``/v3/auth/authenticate`` and sends the token in ``Authorization``; an "invalid auth token"
answer (tokens expire) triggers one re-authentication and one resend — safe, as etcd refused the
first request before acting on it.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.http.client import AmbiguousSend, ConnectFailed, HttpClient, Response

KEY_RANGE_ALL: bytes = b"\x00"


class EtcdError(Exception):
    """Base of this module's errors."""


class EtcdUnavailable(EtcdError):
    """Definite: the request was not acted on (no endpoint reachable, or etcd refused it)."""


class EtcdAmbiguous(EtcdError):
    """The request may have been applied: never treat a write as "not done"."""


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class Compare:
    """One txn comparison: ``target`` is CREATE, MOD, VERSION or VALUE; ``result`` EQUAL etc."""

    key: bytes
    target: str
    result: str
    operand: int | bytes

    def as_json(self) -> dict[str, Any]:
        field = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version"}
        body: dict[str, Any] = {"key": b64(self.key), "target": self.target, "result": self.result}
        if self.target == "VALUE":
            if not isinstance(self.operand, bytes):
                raise TypeError("a VALUE comparison needs bytes")
            body["value"] = b64(self.operand)
        else:
            body[field[self.target]] = str(self.operand)
        return body


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    responses: tuple[dict[str, Any], ...]

    def ranges(self) -> list[list[KeyValue]]:
        """The key-values of each ``response_range`` in order."""
        return [
            [kv_from_json(kv) for kv in r["response_range"].get("kvs", [])]
            for r in self.responses
            if "response_range" in r
        ]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return KEY_RANGE_ALL


def kv_from_json(kv: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=unb64(kv["key"]),
        value=unb64(kv.get("value", "")),
        create_revision=int(kv.get("create_revision", 0)),
        mod_revision=int(kv.get("mod_revision", 0)),
        lease=int(kv.get("lease", 0)),
    )


def range_op(
    key: bytes, range_end: bytes | None = None, *, limit: int = 0, descending: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(key)}
    if range_end is not None:
        body["range_end"] = b64(range_end)
    if limit:
        body["limit"] = str(limit)
    if descending:
        body["sort_order"] = "DESCEND"
        body["sort_target"] = "KEY"
    return body


def put_op(key: bytes, value: bytes, *, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


class EtcdGateway:
    """Unary v3 calls against a list of endpoints (``http(s)://host:port``). Thread-safe."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        auth: tuple[str, str] | None = None,
        connect_timeout_ms: int = 1_000,
        request_timeout_ms: int = 5_000,
        response_bytes_max: int = 8 * 1024 * 1024,
        client: HttpClient | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self.endpoints = tuple(e.rstrip("/") for e in endpoints)
        self.request_timeout_ms = request_timeout_ms
        self._client = client or HttpClient(
            connect_timeout_ms=connect_timeout_ms,
            read_timeout_ms=request_timeout_ms,
            response_bytes_max=response_bytes_max,
        )
        self._auth = auth
        self._token: str | None = None
        self._lock = threading.Lock()
        self._current = 0  # index of the endpoint that answered last

    # -- plumbing --------------------------------------------------------------------------------

    def close(self) -> None:
        self._client.close()

    def endpoint(self) -> str:
        """The endpoint that answered last (the watch stream starts there)."""
        with self._lock:
            return self.endpoints[self._current]

    def token(self) -> str | None:
        return self._token

    def _rotate(self, failed: int) -> None:
        with self._lock:
            if self._current == failed:
                self._current = (failed + 1) % len(self.endpoints)

    def call(
        self,
        path: str,
        body: dict[str, Any],
        *,
        idempotent: bool,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the current endpoint, failing over as the doc says;
        with ``deadline_s`` (monotonic) no attempt waits past it."""
        last: EtcdError | None = None
        reauthenticated = False
        attempts = len(self.endpoints) * (2 if idempotent else 1)
        for _ in range(attempts):
            read_timeout_ms = self.request_timeout_ms
            if deadline_s is not None:
                read_timeout_ms = min(read_timeout_ms, int((deadline_s - time.monotonic()) * 1000))
                if read_timeout_ms <= 0:
                    raise last or EtcdUnavailable("deadline passed before etcd answered")
            with self._lock:
                at = self._current
            origin = self.endpoints[at]
            try:
                response = self._post(origin, path, body, read_timeout_ms)
            except ConnectFailed as exc:
                last = EtcdUnavailable(f"{origin}: {exc.reason}")
                self._rotate(at)
                continue
            except AmbiguousSend as exc:
                last = EtcdAmbiguous(f"{origin}: {exc.reason}")
                if not idempotent:
                    raise last from None
                self._rotate(at)
                continue
            if response.status == 200:
                return dict(response.json())
            error = _error_text(response)
            if self._auth is not None and "invalid auth token" in error and not reauthenticated:
                reauthenticated = True
                self._token = None
                continue
            text = f"{origin}: etcd answered {response.status}: {error}"
            if not idempotent:
                # A 5xx may be "request timed out" after etcd proposed the write: not definite.
                raise EtcdAmbiguous(text) if response.status >= 500 else EtcdUnavailable(text)
            last = EtcdUnavailable(text)
            self._rotate(at)
        if last is None:  # pragma: no cover - attempts >= 1
            raise EtcdUnavailable("no endpoint was tried")
        raise last

    def _post(self, origin: str, path: str, body: dict[str, Any], read_timeout_ms: int) -> Response:
        headers = {"Content-Type": "application/json"}
        if self._auth is not None:
            headers["Authorization"] = self._authenticate(origin)
        return self._client.post(
            origin + path,
            json.dumps(body, separators=(",", ":")).encode(),
            headers=headers,
            read_timeout_ms=read_timeout_ms,
        )

    def _authenticate(self, origin: str) -> str:
        token = self._token
        if token is not None:
            return token
        if self._auth is None:  # pragma: no cover - guarded by the caller
            raise EtcdUnavailable("no credentials")
        name, password = self._auth
        body = json.dumps({"name": name, "password": password}).encode()
        response = self._client.post(origin + "/v3/auth/authenticate", body)
        if response.status != 200:
            raise EtcdUnavailable(f"{origin}: authentication refused ({response.status})")
        token = str(response.json()["token"])
        self._token = token
        return token

    # -- the v3 calls the replication uses -------------------------------------------------------

    def range(
        self,
        key: bytes,
        range_end: bytes | None = None,
        *,
        limit: int = 0,
        descending: bool = False,
        serializable: bool = False,
        deadline_s: float | None = None,
    ) -> tuple[int, list[KeyValue]]:
        """(header revision, key-values); linearizable unless ``serializable``."""
        body = range_op(key, range_end, limit=limit, descending=descending)
        if serializable:
            body["serializable"] = True
        answer = self.call("/v3/kv/range", body, idempotent=True, deadline_s=deadline_s)
        kvs = [kv_from_json(kv) for kv in answer.get("kvs", [])]
        return int(answer["header"]["revision"]), kvs

    def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[dict[str, Any]],
        failure: Sequence[dict[str, Any]] = (),
        *,
        idempotent: bool = False,
    ) -> TxnResult:
        body = {
            "compare": [c.as_json() for c in compare],
            "success": list(success),
            "failure": list(failure),
        }
        answer = self.call("/v3/kv/txn", body, idempotent=idempotent)
        return TxnResult(
            succeeded=bool(answer.get("succeeded", False)),
            revision=int(answer["header"]["revision"]),
            responses=tuple(answer.get("responses", [])),
        )

    def lease_grant(self, ttl_s: int) -> tuple[int, int]:
        """(lease id, granted TTL in seconds). Not idempotent: a lost answer leaks a lease that
        simply expires."""
        answer = self.call("/v3/lease/grant", {"TTL": str(ttl_s)}, idempotent=False)
        if answer.get("error"):
            raise EtcdUnavailable(f"lease grant refused: {answer['error']}")
        return int(answer["ID"]), int(answer["TTL"])

    def lease_keepalive(self, lease_id: int, *, deadline_s: float | None = None) -> int:
        """The lease's refreshed TTL in seconds; 0 when the lease no longer exists."""
        answer = self.call(
            "/v3/lease/keepalive", {"ID": str(lease_id)}, idempotent=True, deadline_s=deadline_s
        )
        return int(answer.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease_id: int) -> None:
        self.call("/v3/lease/revoke", {"ID": str(lease_id)}, idempotent=True)

    def status(self) -> dict[str, Any]:
        return self.call("/v3/maintenance/status", {}, idempotent=True)


def _error_text(response: Response) -> str:
    try:
        answer = response.json()
    except (ValueError, UnicodeDecodeError):
        return response.body[:200].decode("utf-8", "replace")
    if isinstance(answer, dict):
        return str(answer.get("message") or answer.get("error") or answer)[:200]
    return str(answer)[:200]
