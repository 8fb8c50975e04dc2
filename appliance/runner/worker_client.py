"""The runner's side of wire protocol 1 towards the worker: exec, observe, cancel.

See docs/protocol.md.

Theory of operation: each call makes exactly one request with the remote bearer through the shared
``HttpClient`` (no redirects, no automatic retries, bounded connect and read timeouts) and
classifies the answer into a small frozen result the loop can act on without knowing HTTP:

- ``ExecResult.kind``: ``accepted`` (202, or 200 for an invocation the worker already knows),
  ``refused`` (403: definite refusal before any permit was consumed), ``not_dispatched`` (a
  well-formed protocol-1 HTTP 503 whose error code is ``pool_full`` or ``engine_unavailable``:
  the worker answers so before it reserves anything), ``uncertain`` (anything else: another 503,
  a timeout, a dropped connection, a malformed answer — the attempt may have run).
- ``ObserveResult``: the execution's ``status`` or ``None`` with the reason it could not be read.
- ``CancelResult.result``: the worker's ``result`` field, or ``None`` when the call failed.
- Retention: exec and observation carry the owner's floor W as the ``retained_through`` query
  parameter (docs/worker.md "Retention"); a worker's ``retired`` answer for an invocation at or
  below W is ``ExecResult.kind == "retired"`` / ``ObserveResult.status == "retired"`` — definite:
  that invocation left the checkpoint and is never launched.

The worker's ``ConnectFailed`` is kept apart in ``detail`` for the logs, but still classified
``uncertain`` for exec: the issue asks that an unreachable worker makes the attempt Unknown.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any, Final

from appliance.http.client import AmbiguousSend, ConnectFailed, HttpClient
from appliance.owner.dispatch_outcome import NOT_DISPATCHED_CODES
from appliance.owner.worker_answers import (
    CancelResult,
    Capacity,
    ExecResult,
    ObserveResult,
    capacity_of,
)
from appliance.protocol.v1 import (
    CANCEL_PATH,
    EXEC_PATH,
    PROTOCOL_VERSION,
    RETIRED_CODE,
    retained_through_text,
)
from appliance.protocol.v1 import EXECUTIONS_PREFIX as EXECUTIONS_PATH
from appliance.secret import Secret

RESPONSE_BYTES_MAX: Final = 512 * 1024
CONNECT_TIMEOUT_MS: Final = 2_000
EXEC_READ_TIMEOUT_MS: Final = 30_000  # exec waits for the admission commit and the submit
OBSERVE_READ_TIMEOUT_MS: Final = 5_000
CANCEL_READ_TIMEOUT_MS: Final = 30_000  # the worker waits for the child to be reaped


def _body(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(value, dict) or value.get("protocol") != PROTOCOL_VERSION:
        return None
    return value


def _not_dispatched(status: int, document: dict[str, Any] | None) -> bool:
    """Only a well-formed protocol-1 error document, exactly, with a not-dispatched code."""
    if status != 503 or document is None or set(document) != {"protocol", "error"}:
        return False
    error = document["error"]
    return (
        isinstance(error, dict)
        and error.get("code") in NOT_DISPATCHED_CODES
        and isinstance(error.get("message"), str)
    )


def _with_floor(path: str, retained_through: int | None) -> str:
    return path if retained_through is None else f"{path}?{retained_through_text(retained_through)}"


def _retired(status: int, document: dict[str, Any] | None, expected_status: int) -> bool:
    """The worker's definite ``retired`` answer (at or below the floor W), exactly."""
    return status == expected_status and _error_code(document) == RETIRED_CODE


def _error_code(document: dict[str, Any] | None) -> str:
    if document is None:
        return "no_error_code"
    error = document.get("error")
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return error["code"][:64]
    return "no_error_code"


def _capacity(document: dict[str, Any] | None) -> Capacity | None:
    """The worker's ``capacity``: top-level in a 200/202, inside ``error`` otherwise."""
    if document is None:
        return None
    if "capacity" in document:
        return capacity_of(document["capacity"])
    error = document.get("error")
    return capacity_of(error.get("capacity")) if isinstance(error, dict) else None


class WorkerClient:
    def __init__(
        self,
        origin_url: str | Callable[[], str],
        bearer: Secret,
        client: HttpClient | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: verifies an https worker against the cluster CA and presents the
        voter's certificate when the worker asks (appliance.http.tls.origin_client_context).
        A callable ``origin_url`` gives the URL in force for each call (``amend_remote``)."""
        self._origin_of = origin_url if callable(origin_url) else (lambda: origin_url)
        self._bearer = bearer
        self._client = client or HttpClient(
            connect_timeout_ms=CONNECT_TIMEOUT_MS, ssl_context=ssl_context
        )

    def close(self) -> None:
        self._client.close()

    def _post(
        self, path: str, document: dict[str, Any], read_timeout_ms: int, *, fresh: bool = False
    ) -> Any:
        return self._client.post(
            self._origin_of().rstrip("/") + path,
            _body(document),
            headers={"Content-Type": "application/json"},
            bearer=self._bearer,
            read_timeout_ms=read_timeout_ms,
            response_bytes_max=RESPONSE_BYTES_MAX,
            fresh_connection=fresh,
        )

    def execute(
        self, binding: dict[str, Any], code: str, retained_through: int | None = None
    ) -> ExecResult:
        document = {"protocol": PROTOCOL_VERSION, "binding": binding, "code": code}
        path = _with_floor(EXEC_PATH, retained_through)
        try:
            # A new connection: a kept-alive one the worker closes as idle (it does under
            # connection pressure) could meet our request on the wire, and an exec whose fate
            # is unknown is an Unknown (docs/http.md).
            response = self._post(path, document, EXEC_READ_TIMEOUT_MS, fresh=True)
        except ConnectFailed as exc:
            return ExecResult("uncertain", detail=f"worker unreachable: {exc.reason}")
        except AmbiguousSend as exc:
            return ExecResult("uncertain", detail=f"ambiguous send: {exc.reason}")
        answer = _json(response.body)
        capacity = _capacity(answer)
        stated = answer is not None
        if response.status in (200, 202) and answer is not None:
            execution_id = answer.get("execution_id")
            if isinstance(execution_id, str):
                return ExecResult(
                    "accepted",
                    execution_id,
                    detail=str(answer.get("state")),
                    capacity=capacity,
                    protocol_answer=True,
                )
        if _retired(response.status, answer, 403):
            return ExecResult("retired", code=RETIRED_CODE, detail="at or below the floor W")
        if response.status == 403:
            return ExecResult(
                "refused",
                code=_error_code(answer),
                detail="worker refused",
                capacity=capacity,
                protocol_answer=stated,
            )
        if _not_dispatched(response.status, answer):
            return ExecResult(
                "not_dispatched",
                code=_error_code(answer),
                detail="worker answered HTTP 503",
                capacity=capacity,
                protocol_answer=True,
            )
        return ExecResult(
            "uncertain",
            code=_error_code(answer),
            detail=f"worker answered HTTP {response.status}",
            capacity=capacity,
            protocol_answer=stated,
        )

    def observe(self, execution_id: str, retained_through: int | None = None) -> ObserveResult:
        path = _with_floor(EXECUTIONS_PATH + execution_id, retained_through)
        try:
            response = self._client.get(
                self._origin_of().rstrip("/") + path,
                bearer=self._bearer,
                read_timeout_ms=OBSERVE_READ_TIMEOUT_MS,
                response_bytes_max=RESPONSE_BYTES_MAX,
            )
        except (ConnectFailed, AmbiguousSend) as exc:
            return ObserveResult(None, detail=exc.reason)
        answer = _json(response.body)
        if _retired(response.status, answer, 410):
            return ObserveResult(RETIRED_CODE, detail="at or below the floor W", answered=True)
        if response.status != 200 or answer is None or not isinstance(answer.get("status"), str):
            return ObserveResult(
                None,
                detail=f"HTTP {response.status} {_error_code(answer)}",
                answered=answer is not None,
            )
        return ObserveResult(answer["status"], answer, capacity=_capacity(answer), answered=True)

    def cancel(self, binding: dict[str, Any]) -> CancelResult:
        document = {"protocol": PROTOCOL_VERSION, "binding": binding}
        try:
            response = self._post(CANCEL_PATH, document, CANCEL_READ_TIMEOUT_MS)
        except (ConnectFailed, AmbiguousSend) as exc:
            return CancelResult(None, detail=exc.reason)
        answer = _json(response.body)
        if response.status != 200 or answer is None or not isinstance(answer.get("result"), str):
            return CancelResult(None, detail=f"HTTP {response.status} {_error_code(answer)}")
        report = answer.get("report")
        return CancelResult(answer["result"], report if isinstance(report, dict) else None)
