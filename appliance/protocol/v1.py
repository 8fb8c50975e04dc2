"""Wire protocol version 1: the one module both ends of the runner-worker wire import.

Theory of operation. The runner (``appliance/runner/``, through the core's committed claim) and
the worker (``appliance/worker/``) speak about an invocation in the same words: the *binding*
the owner committed, the *invocation* ``(namespace, schedule_id, occurrence_id, attempt)`` that
is the deduplication key, the *execution id* derived from it, the paths, and the answers each
route may give. They are defined here once; each end keeps only its own parsing strictness
(the core checks a command, the worker checks a request) and imports the names from here.

Pure: no clock, no I/O; instants are carried as the RFC 3339 texts the wire holds.

Id limit: ``ID_MAX`` is 2^53 - 1 for every id of the wire (schedule, occurrence, attempt,
epoch). The core creates every one of them and never goes past 2^53 - 1 (``core/occurrence.py``
``INT_MAX``: a number stays exact in JSON readers that use doubles), and the worker hands them
to the script as JavaScript numbers (``scheduled.schedule_id`` ...), which are exact only up to
2^53 - 1. A larger id on the wire can only be a forgery or a bug, so both ends refuse it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, fields
from typing import Any, Final

PROTOCOL_VERSION: Final = 1
ID_MAX: Final = 2**53 - 1
ID_DIGITS_MAX: Final = len(str(ID_MAX))  # 16

# ---- paths -------------------------------------------------------------------------------------

EXEC_PATH: Final = "/api/scheduled/v1/exec"  # runner -> worker
EXECUTIONS_PREFIX: Final = "/api/scheduled/v1/executions/"  # + execution id
EXECUTIONS_ROUTE: Final = EXECUTIONS_PREFIX + "{execution_id}"
CANCEL_PATH: Final = "/api/scheduled/v1/cancel"  # runner -> worker
ADMIT_PATH: Final = "/scheduler/v1/admit"  # worker -> runner (admission)

# ---- every answer ------------------------------------------------------------------------------

EXEC_ACCEPTED: Final = "accepted"  # the 202's state
# The ``state`` of a repeated exec (200) and the ``status`` of an observation.
STATE_RESERVED: Final = "reserved"
STATE_FENCED: Final = "fenced"
# The statuses an execution ends in, in the order documents and metric labels list them.
FINISHED_STATUS_ORDER: Final = ("completed", "failed", "timed_out", "cancelled", "lost")
FINISHED_STATUSES: Final = frozenset(FINISHED_STATUS_ORDER)
EXECUTION_STATUSES: Final = ("running", *FINISHED_STATUS_ORDER)
OBSERVED_STATUSES: Final = (STATE_RESERVED, STATE_FENCED, *EXECUTION_STATUSES)
# Exec refusals (403): this request launched nothing.
EXEC_REFUSED_CODES: Final = ("binding_mismatch", "grant_expired", "admission_refused", "fenced")
# Exec stops (503): before anything durable (pool_full, engine_unavailable) or after a fence.
EXEC_STOPPED_CODES: Final = (
    "pool_full",
    "engine_unavailable",
    "admission_uncertain",
    "admission_unavailable",
    "permit_refused",
    "consume_refused",
    "submit_failed",
)
# A malformed request (400).
REQUEST_ERROR_CODES: Final = ("protocol_version", "invalid_request", "malformed_json")
OBSERVE_UNKNOWN_CODE: Final = "unknown_execution"  # 404
# The ``result`` of a cancel.
CANCEL_FENCED_BEFORE_CONSUME: Final = "fenced_before_consume"
CANCEL_STOPPED: Final = "stopped"
CANCEL_COMPLETED: Final = "completed"
CANCEL_STOPPING: Final = "stopping"
CANCEL_UNKNOWN: Final = "unknown"
CANCEL_RESULTS: Final = (
    CANCEL_FENCED_BEFORE_CONSUME,
    CANCEL_STOPPED,
    CANCEL_COMPLETED,
    CANCEL_STOPPING,
    CANCEL_UNKNOWN,
)
# The admission route's answers: 409 not the owner, 403 a definite refusal, 503 uncertain.
ADMIT_NOT_OWNER_CODE: Final = "not_owner"
ADMIT_REFUSED_CODES: Final = (
    "binding_mismatch",
    "attempt_not_running",
    "stale_epoch",
    "fenced",
    "grant_expired",
    "incarnation_mismatch",
)
ADMIT_UNCERTAIN_CODE: Final = "uncertain"
# What an exec or observation answer states about the engine (``capacity``: top-level in a 200 or
# 202, inside ``error`` of an error document): its limits, the slots free to start at once and
# the room left in its queue. Optional: an owner that finds none dispatches as before pacing.
CAPACITY_FIELDS: Final = ("max_concurrent", "max_queued", "free_slots", "queue_room")


def error_document(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """``{"protocol": 1, "error": {"code", "message", ...}}``: every error body of both ends."""
    return {"protocol": PROTOCOL_VERSION, "error": {"code": code, "message": message, **extra}}


# ---- the invocation and its execution id -------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    """The deduplication key of an attempt (SPEC §6): never a leader epoch or incarnation."""

    namespace: str
    schedule_id: int
    occurrence_id: int
    attempt: int

    def key(self) -> tuple[str, int, int, int]:
        return (self.namespace, self.schedule_id, self.occurrence_id, self.attempt)


INVOCATION_FIELDS: Final = tuple(f.name for f in fields(Invocation))


def check_invocation_key(invocation: Invocation) -> None:
    """``ValueError`` naming the field unless the key is a namespace and three ids in range."""
    if not isinstance(invocation.namespace, str) or not invocation.namespace:
        raise ValueError(
            f"invocation namespace must be a non-empty string: {invocation.namespace!r}"
        )
    for name in ("schedule_id", "occurrence_id", "attempt"):
        value = getattr(invocation, name)
        if type(value) is not int or not 0 <= value <= ID_MAX:
            raise ValueError(f"invocation {name} must be an integer in [0, {ID_MAX}]: {value!r}")


def invocation_document(invocation: Invocation) -> dict[str, Any]:
    """The invocation as the wire writes it (a permit and an observation repeat it)."""
    return {name: getattr(invocation, name) for name in INVOCATION_FIELDS}


def execution_id(invocation: Invocation) -> str:
    """The worker's id for an invocation, derived so a lost exec answer can still observe it."""
    return f"s{invocation.schedule_id}-o{invocation.occurrence_id}-a{invocation.attempt}"


_ID_TEXT: Final = rf"(0|[1-9][0-9]{{0,{ID_DIGITS_MAX - 1}}})"
_EXECUTION_ID: Final = re.compile(rf"s{_ID_TEXT}-o{_ID_TEXT}-a{_ID_TEXT}")


def invocation_of(text: str, namespace: str) -> Invocation | None:
    """The invocation an execution id names in ``namespace``, or None if it is not one."""
    match = _EXECUTION_ID.fullmatch(text)
    if match is None:
        return None
    schedule_id, occurrence_id, attempt = (int(group) for group in match.groups())
    if max(schedule_id, occurrence_id, attempt) > ID_MAX:
        return None
    return Invocation(namespace, schedule_id, occurrence_id, attempt)


# ---- the payload digest -----------------------------------------------------------------------


def payload_sha256(code: str) -> str:
    """The binding's ``payload_sha256``: SHA-256 of the code's UTF-8, as 64 lowercase hex digits.

    The one digest of a schedule's code: the claim binds it, the worker checks it before it
    consumes, history and management show it (``code_sha256``). Lone surrogates are passed
    through rather than refused so a digest can always be shown; a definition never holds one."""
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


# ---- the binding -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Authority:
    """Execution authority: the grant expiry and the engine limits the worker must apply."""

    expires_at: str  # RFC 3339 with an offset
    timeout_seconds: int
    heap_mb: int
    session: str


@dataclass(frozen=True)
class Binding:
    """The claim the owner committed, repeated verbatim in every message about an invocation."""

    namespace: str
    schedule_id: int
    schedule_name: str | None
    occurrence_id: int
    attempt: int
    owner: str
    epoch: int
    worker_id: str
    payload_sha256: str
    due_time: str  # RFC 3339; the core writes YYYY-MM-DDTHH:MM:SSZ
    authority: Authority

    @property
    def invocation(self) -> Invocation:
        return Invocation(self.namespace, self.schedule_id, self.occurrence_id, self.attempt)

    @property
    def execution_id(self) -> str:
        return execution_id(self.invocation)


BINDING_FIELDS: Final = tuple(f.name for f in fields(Binding))
AUTHORITY_FIELDS: Final = tuple(f.name for f in fields(Authority))


def binding_document(binding: Binding) -> dict[str, Any]:
    """The binding as the wire writes it (field order as declared)."""
    out: dict[str, Any] = {name: getattr(binding, name) for name in BINDING_FIELDS}
    out["authority"] = {name: getattr(binding.authority, name) for name in AUTHORITY_FIELDS}
    return out


def binding_of(document: dict[str, Any]) -> Binding:
    """Structural decode of a binding document whose fields were already checked."""
    authority = Authority(**document["authority"])
    return Binding(**{**document, "authority": authority})


# ---- retention (issue 19; docs/worker.md "Retention") ------------------------------------------

# The runner states its retention floor W — every occurrence id at or below it has left the
# committed checkpoint — as this query parameter of the exec and observation requests. A query
# parameter, not a body field: a worker from before retention refuses unknown body fields
# (invalid_request) but never reads the query, so it ignores W and simply prunes nothing.
RETAINED_THROUGH_PARAM: Final = "retained_through"
# The worker's definite answer for an invocation at or below W: exec 403 (nothing launched, and
# nothing ever will be), observation 410, cancel 410 when it keeps no record.
RETIRED_CODE: Final = "retired"


def retained_through_text(value: int) -> str:
    """The query string carrying W (``retained_through=<W>``)."""
    if type(value) is not int or not 0 <= value <= ID_MAX:
        raise ValueError(f"{RETAINED_THROUGH_PARAM} must be an integer in [0, {ID_MAX}]: {value!r}")
    return f"{RETAINED_THROUGH_PARAM}={value}"


def parse_retained_through(text: str | None) -> int | None:
    """W from the query parameter's text (None when absent); ``ValueError`` naming the field
    unless it is a decimal integer in [0, ID_MAX] without sign or leading zeros."""
    if text is None:
        return None
    if not re.fullmatch(_ID_TEXT, text) or int(text) > ID_MAX:
        raise ValueError(
            f"{RETAINED_THROUGH_PARAM} must be a decimal integer in [0, {ID_MAX}]: {text[:32]!r}"
        )
    return int(text)
