"""Short sentences about what ran, for the checkpoint and for operators; pure functions.

- ``failure_reason(document)``: the worker's execution report (``appliance/engine/child.py`` →
  ``store/worker_store.py``: ``status``, ``reason``, ``error`` with ``message``/``stack``) as the
  bounded text the checkpoint keeps in ``failure_reason``, e.g. ``uncaught exception: Error:
  boom``. None when the report says nothing failed.
- ``retry_note(...)``: what a retry-waiting occurrence is waiting for, e.g. ``retrying at
  2027-01-15T08:02:00Z (attempt 2 of 3)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from appliance.core.occurrence import REASON_BYTES_MAX

FAILED_STATUSES: Final = frozenset({"failed", "timed_out", "lost", "cancelled", "fenced"})
ELLIPSIS: Final = "…"


def bounded(text: str, bytes_max: int = REASON_BYTES_MAX) -> str:
    """``text`` cut at a character boundary so its UTF-8 form is at most ``bytes_max`` bytes."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= bytes_max:
        return text
    cut = raw[: bytes_max - len(ELLIPSIS.encode())].decode("utf-8", "ignore")
    return cut + ELLIPSIS


def _one_line(text: str) -> str:
    return " ".join(text.split())


def error_message(error: Any) -> str | None:
    """The thrown value's message as the report carries it (``{"message": ...}`` or text)."""
    if isinstance(error, Mapping):
        message = error.get("message")
        name = error.get("name")
        if isinstance(message, str) and message:
            if isinstance(name, str) and name and not message.startswith(name):
                return f"{name}: {message}"
            return message
        return None
    if isinstance(error, str) and error.strip():
        # The engine sends the stack ("Error: boom\n    at ...") or the bare message: the first
        # non-empty line is the thrown value's "Name: message".
        return next(line.strip() for line in error.splitlines() if line.strip())
    return None


def failure_reason(document: Mapping[str, Any] | None) -> str | None:
    """The checkpoint's ``failure_reason`` for one execution report (bounded, one line)."""
    if not isinstance(document, Mapping):
        return None
    status = document.get("status")
    if status not in FAILED_STATUSES:
        return None
    reason = document.get("reason")
    reason_text = reason if isinstance(reason, str) and reason else str(status).replace("_", " ")
    message = error_message(document.get("error"))
    has_message = message is not None and message not in reason_text
    return bounded(_one_line(f"{reason_text}: {message}" if has_message else reason_text))


def retry_note(
    record: Mapping[str, Any], max_retries: int | None, when: str | None = None
) -> str | None:
    """``retrying at T (attempt N of M)`` for a Pending occurrence that is a retry; else None.

    ``record`` is an occurrence as the list/detail views carry it (``state``, ``attempt``,
    ``retries_used``); ``when`` is its not-before instant already formatted for the reader (None:
    claimable now). M counts the attempts the policy allows, plus attempts fenced as never
    launched (they spend no retry).
    """
    if record.get("state") != "Pending":
        return None
    attempt, used = record.get("attempt"), record.get("retries_used")
    if not isinstance(attempt, int) or not isinstance(used, int) or used < 1:
        return None
    of = f" of {attempt - used + max_retries}" if isinstance(max_retries, int) else ""
    at = f"at {when}" if when else "now"
    return f"retrying {at} (attempt {attempt}{of})"
