"""Wire protocol version 1, worker side: request documents parsed strictly (docs/protocol.md).

Theory of operation: every body is one JSON object with ``"protocol": 1``; another version is
refused with ``protocol_version`` before anything else is looked at, and unknown fields anywhere
are refused (naming the field). The binding is kept twice: parsed (the protocol's ``Binding``,
for the checks the worker makes) and verbatim (``document``, the exact JSON object the runner
sent), because the binding is what the worker stores, repeats to the admission route and
compares — the worker never re-serializes a binding of its own making. The types, the id limit,
the execution id and the answers are the protocol module's (``appliance/protocol/v1.py``),
shared with the runner; this module holds only the worker's strict parsing.

The invocation ``(namespace, schedule_id, occurrence_id, attempt)`` is the deduplication key; the
execution id ``s{schedule_id}-o{occurrence_id}-a{attempt}`` is derived from it, so a runner whose
exec answer was lost can still observe the invocation by id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from appliance.config.common import HEAP_MB_MAX, HEAP_MB_MIN, IDENT, TIMEOUT_SECONDS_MAX
from appliance.config.rfc3339 import rfc3339_rule
from appliance.core.schema import INVALID, Custom, Field, Integer, Obj, Problems, Text, validate
from appliance.protocol.v1 import (
    ID_MAX,
    PROTOCOL_VERSION,
    Authority,
    Binding,
    Invocation,
    invocation_of,
)
from appliance.protocol.v1 import execution_id as execution_id_of

__all__ = [
    "AUTHORITY_RULE",
    "BINDING_RULE",
    "CODE_BYTES_MAX",
    "ID_MAX",
    "PROTOCOL_VERSION",
    "Authority",
    "Binding",
    "CancelRequest",
    "ExecRequest",
    "Invocation",
    "WireError",
    "execution_id_of",
    "invocation_of",
    "parse_cancel",
    "parse_exec",
]

CODE_BYTES_MAX: Final = 64 * 1024  # SPEC §3: a definition's code is at most 64 KiB of UTF-8
TEXT_BYTES_MAX: Final = 128
_HEX64: Final = re.compile(r"[0-9a-f]{64}")


class WireError(Exception):
    """A request document that breaks the protocol: answered 400 with ``code`` and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class ExecRequest:
    binding: Binding
    document: dict[str, Any]  # the binding exactly as received (JSON object)
    code: str


@dataclass(frozen=True)
class CancelRequest:
    binding: Binding
    document: dict[str, Any]  # the binding exactly as received (JSON object)


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
    """The protocol's binding: the parsed values, with the instants as the texts received."""
    authority = Authority(
        **{**parsed["authority"], "expires_at": document["authority"]["expires_at"]}
    )
    return Binding(**{**parsed, "due_time": document["due_time"], "authority": authority})


def parse_exec(body: dict[str, Any]) -> ExecRequest:
    parsed = _parse(EXEC_RULE, body)
    document = body["binding"]
    return ExecRequest(_binding(parsed["binding"], document), document, parsed["code"])


def parse_cancel(body: dict[str, Any]) -> CancelRequest:
    parsed = _parse(CANCEL_RULE, body)
    document = body["binding"]
    return CancelRequest(_binding(parsed["binding"], document), document)
