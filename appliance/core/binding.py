"""The claim's binding: what the owner commits about one invocation attempt, and its wire form.

Theory of operation
-------------------
A claim binds namespace, schedule, occurrence, attempt, owner/epoch, worker, payload digest and
execution authority (SPEC §6, seeds/000 "Ownership is a committed transition"). The binding is
repeated verbatim in every message about the invocation (docs/protocol.md), and admission compares
it field by field with the committed claim: a worker never launches anything whose binding differs
in any field from the one the runner admitted.

The *invocation* is ``(namespace, schedule_id, occurrence_id, attempt)``: deduplication is by
invocation, never by epoch, so no new leader and no new worker incarnation gets a second permit.

The types (``Binding``, ``Authority``, ``Invocation``) are the wire protocol's own
(``appliance/protocol/v1.py``), shared with the worker; this module adds the core's checks.

Everything here is pure: instants are whole seconds, RFC 3339 texts are parsed and formatted
without a clock, and every text is bounded so a claim part has a maximum size.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from appliance.core.canonical import canonical_json
from appliance.core.occurrence import INSTANT_MAX_S, INT_MAX
from appliance.core.state_errors import InvalidCommand
from appliance.protocol.v1 import (
    AUTHORITY_FIELDS,
    BINDING_FIELDS,
    ID_MAX,
    INVOCATION_FIELDS,
    Authority,
    Binding,
    Invocation,
    binding_document,
    binding_of,
    invocation_document,
)

# Every free text of a binding (and an incarnation id) encodes to at most this many JSON bytes:
# 128 UTF-8 bytes of a name, each escaped at worst as \u00XX.
TEXT_JSON_BYTES_MAX = 768
RFC3339_BYTES_MAX = 64
NODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
TIMEOUT_SECONDS_RANGE = (1, 86_400)

# Charging rules 2 (state.py) bound a claim by what a valid runner config and worker produce, so a
# live record's reserve can be sized by them: namespace and worker_id are IDENT (config/common.py),
# the session printable ASCII without spaces (config/runner.py), the expiry ``format_utc`` of the
# config's instant (``YYYY-MM-DDTHH:MM:SS.ffffffZ`` at most: 27 bytes), and the worker
# incarnation a worker store's ``uuid4().hex`` (32 hex digits; IDENT-like names up to 32 pass).
IDENT_V2 = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SESSION_V2 = re.compile(r"[\x21-\x7e]{0,128}")
INCARNATION_V2 = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
EXPIRES_AT_V2_BYTES_MAX = 27
HEAP_MB_RANGE = (16, 4096)


# ---- pure time and digest helpers --------------------------------------------------------------


def instant_text(at_s: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` for whole seconds since the epoch (no clock read)."""
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def due_time_matches(text: str, due_s: int) -> bool:
    return text == instant_text(due_s)


def expires_at_s(text: str) -> int:
    """The grant expiry as whole seconds, rounded down: a fraction never extends the grant."""
    if not isinstance(text, str) or not 0 < len(text) <= RFC3339_BYTES_MAX or "T" not in text:
        raise InvalidCommand("authority.expires_at: must be an RFC 3339 instant with an offset")
    try:
        instant = datetime.fromisoformat(text)
    except ValueError as err:
        raise InvalidCommand(f"authority.expires_at: not RFC 3339 ({err})") from err
    if instant.tzinfo is None:
        raise InvalidCommand("authority.expires_at: must carry an offset (Z or +hh:mm)")
    seconds = int(instant.timestamp() // 1)
    return max(0, min(seconds, INSTANT_MAX_S))


# ---- validation ----------------------------------------------------------------------------------


def _check_text(field: str, value: Any, *, nullable: bool = False, empty: bool = False) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidCommand(f"{field}: must be a non-empty string")
    # Each character escapes to at most 6 JSON bytes, so short texts need no encoding to check.
    if (
        len(value) * 6 > TEXT_JSON_BYTES_MAX
        and len(canonical_json(value)) - 2 > TEXT_JSON_BYTES_MAX
    ):
        raise InvalidCommand(f"{field}: longer than {TEXT_JSON_BYTES_MAX} JSON bytes")


def _check_int(field: str, value: Any, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise InvalidCommand(f"{field}: must be an integer in [{low}, {high}]")


def check_node_id(field: str, value: Any) -> None:
    if not isinstance(value, str) or NODE_ID.fullmatch(value) is None:
        raise InvalidCommand(f"{field}: must be 1-64 characters of A-Za-z0-9_-")


def check_incarnation(value: Any) -> None:
    _check_text("incarnation", value)


def check_invocation(inv: Any) -> None:
    if not isinstance(inv, Invocation):
        raise InvalidCommand("invocation: must be an Invocation")
    _check_text("invocation.namespace", inv.namespace)
    _check_int("invocation.schedule_id", inv.schedule_id, 1, ID_MAX)
    _check_int("invocation.occurrence_id", inv.occurrence_id, 1, ID_MAX)
    _check_int("invocation.attempt", inv.attempt, 1, ID_MAX)


def check_binding(b: Any) -> None:
    """Shape and bounds of every field; equality with the state is the command's business."""
    if not isinstance(b, Binding) or not isinstance(b.authority, Authority):
        raise InvalidCommand("binding: must be a Binding with an Authority")
    check_invocation(b.invocation)
    _check_text("binding.schedule_name", b.schedule_name, nullable=True, empty=True)
    check_node_id("binding.owner", b.owner)
    _check_int("binding.epoch", b.epoch, 1, ID_MAX)
    _check_text("binding.worker_id", b.worker_id)
    if not isinstance(b.payload_sha256, str) or SHA256_HEX.fullmatch(b.payload_sha256) is None:
        raise InvalidCommand("binding.payload_sha256: must be 64 lowercase hex digits")
    if not isinstance(b.due_time, str) or len(b.due_time) != len("1970-01-01T00:00:00Z"):
        raise InvalidCommand("binding.due_time: must be YYYY-MM-DDTHH:MM:SSZ")
    a = b.authority
    expires_at_s(a.expires_at)
    _check_int("authority.timeout_seconds", a.timeout_seconds, *TIMEOUT_SECONDS_RANGE)
    _check_int("authority.heap_mb", a.heap_mb, *HEAP_MB_RANGE)
    _check_text("authority.session", a.session, empty=True)


def check_binding_v2(b: Binding) -> None:
    """The tighter bounds charging rules 2 rely on (after :func:`check_binding`)."""
    for field, value in (("binding.namespace", b.namespace), ("binding.worker_id", b.worker_id)):
        if IDENT_V2.fullmatch(value) is None:
            raise InvalidCommand(
                f"{field}: must be 1-128 characters of A-Za-z0-9_.- starting with a letter or digit"
            )
    if SESSION_V2.fullmatch(b.authority.session) is None:
        raise InvalidCommand("authority.session: must be at most 128 printable ASCII characters")
    if len(b.authority.expires_at.encode()) > EXPIRES_AT_V2_BYTES_MAX:
        raise InvalidCommand(f"authority.expires_at: longer than {EXPIRES_AT_V2_BYTES_MAX} bytes")


def check_incarnation_v2(value: str) -> None:
    if INCARNATION_V2.fullmatch(value) is None:
        raise InvalidCommand(
            "incarnation: must be 1-32 characters of A-Za-z0-9_.- starting with a letter or digit"
        )


def first_difference(a: Binding, b: Binding) -> str | None:
    """The first field (``authority.x`` for the nested ones) in which two bindings differ."""
    for name in BINDING_FIELDS:
        if name == "authority":
            for sub in AUTHORITY_FIELDS:
                if getattr(a.authority, sub) != getattr(b.authority, sub):
                    return f"authority.{sub}"
        elif getattr(a, name) != getattr(b, name):
            return name
    return None


# ---- JSON ----------------------------------------------------------------------------------------


def binding_to_json(b: Binding) -> dict[str, Any]:
    return binding_document(b)


def _exact_keys(field: str, value: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidCommand(f"{field}: must be an object")
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise InvalidCommand(f"{field}.{unknown[0]}: unknown field")
    missing = [n for n in names if n not in value]
    if missing:
        raise InvalidCommand(f"{field}.{missing[0]}: missing")
    return value


def binding_from_checkpoint(value: dict[str, Any]) -> Binding:
    """Structural decode of a binding already validated when its command was applied."""
    return binding_of(value)


def binding_from_json(value: Any) -> Binding:
    """Strict decode: unknown or missing fields are refused by name; then checks every field."""
    body = _exact_keys("binding", value, BINDING_FIELDS)
    authority = _exact_keys("binding.authority", body["authority"], AUTHORITY_FIELDS)
    binding = Binding(**{**body, "authority": Authority(**authority)})
    check_binding(binding)
    return binding


def invocation_to_json(inv: Invocation) -> dict[str, Any]:
    return invocation_document(inv)


def invocation_from_json(value: Any) -> Invocation:
    inv = Invocation(**_exact_keys("invocation", value, INVOCATION_FIELDS))
    check_invocation(inv)
    return inv


def worst_case_binding() -> Binding:
    """A binding whose canonical JSON is as long as any valid one can be (for part budgets)."""
    text = "\x01" * (TEXT_JSON_BYTES_MAX // 6)
    return Binding(
        namespace=text,
        schedule_id=INT_MAX,
        schedule_name=text,
        occurrence_id=INT_MAX,
        attempt=INT_MAX,
        owner="x" * 64,
        epoch=INT_MAX,
        worker_id=text,
        payload_sha256="f" * 64,
        due_time=instant_text(INSTANT_MAX_S),
        authority=Authority(
            expires_at="x" * RFC3339_BYTES_MAX,
            timeout_seconds=TIMEOUT_SECONDS_RANGE[1],
            heap_mb=HEAP_MB_RANGE[1],
            session=text,
        ),
    )


def worst_case_binding_v2() -> Binding:
    """The longest binding rules 2 admit, without a schedule name (the reserve adds the actual
    name's length: a claim's name is its schedule's)."""
    ident = "x" * 128
    return Binding(
        namespace=ident,
        schedule_id=INT_MAX,
        schedule_name=None,
        occurrence_id=INT_MAX,
        attempt=INT_MAX,
        owner="x" * 64,
        epoch=INT_MAX,
        worker_id=ident,
        payload_sha256="f" * 64,
        due_time=instant_text(INSTANT_MAX_S),
        authority=Authority(
            expires_at="x" * EXPIRES_AT_V2_BYTES_MAX,
            timeout_seconds=TIMEOUT_SECONDS_RANGE[1],
            heap_mb=HEAP_MB_RANGE[1],
            session='"' * 128,  # each escapes to two JSON bytes
        ),
    )
