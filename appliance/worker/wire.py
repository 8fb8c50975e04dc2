"""Wire protocol version 1, worker side: request documents parsed strictly (docs/protocol.md).

Theory of operation: every body is one JSON object with ``"protocol": 1``; another version is
refused with ``protocol_version`` before anything else is looked at, and unknown fields anywhere
are refused (naming the field). The binding is kept twice: parsed (``Binding``, for the checks the
worker makes) and verbatim (``Binding.document``, the exact JSON object the runner sent), because
the binding is what the worker stores, repeats to the admission route and compares — the worker
never re-serializes a binding of its own making.

The invocation ``(namespace, schedule_id, occurrence_id, attempt)`` is the deduplication key; the
execution id ``s{schedule_id}-o{occurrence_id}-a{attempt}`` is derived from it, so a runner whose
exec answer was lost can still observe the invocation by id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from appliance.config.common import HEAP_MB_MAX, HEAP_MB_MIN, IDENT, TIMEOUT_SECONDS_MAX
from appliance.config.rfc3339 import rfc3339_rule
from appliance.core.schema import INVALID, Custom, Field, Integer, Obj, Problems, Text, validate
from appliance.store.worker_store import Invocation

PROTOCOL_VERSION: Final = 1
ID_MAX: Final = 2**63 - 1
CODE_BYTES_MAX: Final = 64 * 1024  # SPEC §3: a definition's code is at most 64 KiB of UTF-8
TEXT_BYTES_MAX: Final = 128
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_EXECUTION_ID: Final = re.compile(
    r"s(0|[1-9][0-9]{0,18})-o(0|[1-9][0-9]{0,18})-a(0|[1-9][0-9]{0,18})"
)


class WireError(Exception):
    """A request document that breaks the protocol: answered 400 with ``code`` and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Authority:
    """The execution authority of the grant (SPEC §6)."""

    expires_at: datetime
    timeout_seconds: int
    heap_mb: int
    session: str


@dataclass(frozen=True)
class Binding:
    namespace: str
    schedule_id: int
    schedule_name: str | None
    occurrence_id: int
    attempt: int
    owner: str
    epoch: int
    worker_id: str
    payload_sha256: str
    due_time: datetime
    authority: Authority
    document: dict[str, Any]  # the binding exactly as received (JSON object)

    @property
    def invocation(self) -> Invocation:
        return Invocation(self.namespace, self.schedule_id, self.occurrence_id, self.attempt)

    @property
    def execution_id(self) -> str:
        return execution_id_of(self.invocation)


@dataclass(frozen=True)
class ExecRequest:
    binding: Binding
    code: str


def _nullable(rule: Any) -> Custom:
    def check(value: object, path: str, problems: Problems) -> Any:
        return None if value is None else rule.check(value, path, problems)

    return Custom(check)


_ID: Final = Integer(0, ID_MAX)
_NAME_TEXT: Final = Text(TEXT_BYTES_MAX, 0)
_SESSION_TEXT: Final = Text(TEXT_BYTES_MAX, 0)
_DIGEST: Final = Text(64, 64, _HEX64, "64 lowercase hex digits (SHA-256 of the code)")

AUTHORITY_RULE: Final = Obj(
    fields={
        "expires_at": Field(Custom(rfc3339_rule)),
        "timeout_seconds": Field(Integer(1, TIMEOUT_SECONDS_MAX)),
        "heap_mb": Field(Integer(HEAP_MB_MIN, HEAP_MB_MAX)),
        "session": Field(_SESSION_TEXT),
    },
    build=Authority,
)

BINDING_RULE: Final = Obj(
    fields={
        "namespace": Field(IDENT),
        "schedule_id": Field(_ID),
        "schedule_name": Field(_nullable(_NAME_TEXT), required=False, default=None),
        "occurrence_id": Field(_ID),
        "attempt": Field(_ID),
        "owner": Field(IDENT),
        "epoch": Field(_ID),
        "worker_id": Field(IDENT),
        "payload_sha256": Field(_DIGEST),
        "due_time": Field(Custom(rfc3339_rule)),
        "authority": Field(AUTHORITY_RULE),
    },
)

_PROTOCOL_FIELD: Final = Field(Integer(PROTOCOL_VERSION, PROTOCOL_VERSION))
EXEC_RULE: Final = Obj(
    fields={
        "protocol": _PROTOCOL_FIELD,
        "binding": Field(BINDING_RULE),
        "code": Field(Text(CODE_BYTES_MAX, 0, secret=True)),
    }
)
CANCEL_RULE: Final = Obj(fields={"protocol": _PROTOCOL_FIELD, "binding": Field(BINDING_RULE)})


def _check_version(body: dict[str, Any]) -> None:
    version = body.get("protocol")
    if isinstance(version, bool) or version != PROTOCOL_VERSION:
        raise WireError(
            "protocol_version", f"this worker speaks wire protocol {PROTOCOL_VERSION} only"
        )


def _parse(rule: Obj, body: dict[str, Any]) -> dict[str, Any]:
    _check_version(body)
    parsed, problems = validate(rule, body)
    if parsed is INVALID:
        shown = "; ".join(f"{path}: {message}" for path, message in problems[:8])
        raise WireError("invalid_request", shown)
    return parsed


def _binding(parsed: dict[str, Any], document: dict[str, Any]) -> Binding:
    return Binding(**parsed, document=document)


def parse_exec(body: dict[str, Any]) -> ExecRequest:
    parsed = _parse(EXEC_RULE, body)
    return ExecRequest(binding=_binding(parsed["binding"], body["binding"]), code=parsed["code"])


def parse_cancel(body: dict[str, Any]) -> Binding:
    parsed = _parse(CANCEL_RULE, body)
    return _binding(parsed["binding"], body["binding"])


def execution_id_of(invocation: Invocation) -> str:
    return f"s{invocation.schedule_id}-o{invocation.occurrence_id}-a{invocation.attempt}"


def invocation_of(execution_id: str, namespace: str) -> Invocation | None:
    """The invocation an execution id names in ``namespace``, or None if it is not one."""
    match = _EXECUTION_ID.fullmatch(execution_id)
    if match is None:
        return None
    schedule_id, occurrence_id, attempt = (int(group) for group in match.groups())
    if max(schedule_id, occurrence_id, attempt) > ID_MAX:
        return None
    return Invocation(namespace, schedule_id, occurrence_id, attempt)
