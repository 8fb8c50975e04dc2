"""Which definite refusals the runner loop answered, and the HTTP status each deserves.

The loop answers a command that the core refused on apply (committed, nothing changed) or that
failed validation before it was proposed with the stdin shape ``{"ok": false, "status": 400,
"error": {"code": "refused" | "invalid_definition" | ..., "message": <the core's reason>}}``.
Those outcomes are certain: the command did not and will not take effect. ``classify`` turns the
core's reason into a machine-readable kind by its documented wording (appliance/core/txn.py,
occurrence.py, policy_apply.py), without changing the loop:

- 404 ``no_such_schedule`` / ``no_such_occurrence`` — the id names nothing (never created,
  deleted, or retired from retention);
- 422 ``not_allowed_in_state`` — the occurrence's state forbids the command (cancel of a
  Succeeded occurrence, acknowledge of a Running one);
- 422 ``schedule_limit`` / ``checkpoint_full`` — a committed limit refused the change;
- 422 ``name_taken`` — another live schedule has the name (``existing_id`` names it);
- 400 ``invalid_definition`` / ``attestation_required`` / ``invalid_command`` — the command itself
  is malformed for the core;
- 422 ``refused`` — any other committed refusal (the reason is still the core's).

A reply that is not a definite refusal (an uncertain outcome, not-owner, not accepted) gives None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

MESSAGE_CHARS_MAX: Final = 512  # a core reason is a sentence; never relay more

# (how it matches, the wording, status, code); first match wins.
_BY_REASON: Final = (
    ("prefix", "id: no schedule ", 404, "no_such_schedule"),
    ("prefix", "occurrence_id: no occurrence ", 404, "no_such_occurrence"),
    ("contains", ": acknowledge_stopped needs explicit ", 400, "attestation_required"),
    ("contains", " is not allowed in state ", 422, "not_allowed_in_state"),
    ("prefix", "schedules: limit of ", 422, "schedule_limit"),
    ("prefix", "schedules: id space exhausted", 422, "schedule_limit"),
    ("prefix", "checkpoint: would ", 422, "checkpoint_full"),
    ("contains", " is already the name of schedule ", 422, "name_taken"),
    ("prefix", "definition", 400, "invalid_definition"),
)
# Codes the loop gives to refusals decided before proposing (validation): kept as they are.
_BEFORE_PROPOSING: Final = frozenset(
    {"invalid_definition", "invalid_command", "invalid_json", "attestation_required"}
)


# Facts a refusal may carry besides its message, relayed as they are (issue 35): the field, the
# line and column of a syntax error, the schedule that already has a name.
DETAIL_FIELDS: Final = ("field", "line", "column", "existing_id")


@dataclass(frozen=True)
class Refusal:
    """A definite refusal: nothing changed, and the same command would be refused again."""

    status: int
    code: str
    message: str
    details: tuple[tuple[str, Any], ...] = ()


def classify_reason(message: str) -> Refusal:
    """The kind of a core refusal reason (committed apply that refused the command)."""
    text = message[:MESSAGE_CHARS_MAX]
    for how, wording, status, code in _BY_REASON:
        if text.startswith(wording) if how == "prefix" else wording in text:
            return Refusal(status, code, text)
    return Refusal(422, "refused", text)


def classify(reply: Mapping[str, Any]) -> Refusal | None:
    """The definite refusal a loop reply reports, or None (success, uncertain, not owner...)."""
    if reply.get("ok") is not False or reply.get("status") != 400:
        return None
    if reply.get("outcome") == "uncertain" or reply.get("accepted") is False:
        return None
    error = reply.get("error")
    if not isinstance(error, Mapping):
        return None
    code, message = error.get("code"), error.get("message")
    if not isinstance(message, str):
        return None
    details = tuple(
        (key, error[key])
        for key in DETAIL_FIELDS
        if isinstance(error.get(key), str | int) and not isinstance(error.get(key), bool)
    )
    if code == "refused":
        found = classify_reason(message)
        return Refusal(found.status, found.code, found.message, details)
    if code in _BEFORE_PROPOSING:
        return Refusal(400, str(code), message[:MESSAGE_CHARS_MAX], details)
    return None
