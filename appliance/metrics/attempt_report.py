"""One attempt as an operator sees it: value, error, console output and timings, bounded.

Where each piece is kept (docs/management.md "What ran"): the checkpoint keeps only the short
``failure_reason`` of an occurrence (``appliance.owner.report_text.failure_reason``, e.g.
``uncaught exception: Error: boom``). The completion value, the thrown error's message and stack,
the console output, the timings and the egress records (issue 32) live with the execution at
the worker (its store's execution
record) and are fetched on demand through the executions route, like output always was; they
are kept as long as the worker keeps the execution (the worker's retention must not prune an
execution before its occurrence leaves the runner's retention).

``attempt_report(document)`` shapes one execution document of the worker into the reply of the
``occurrences/{id}/output`` route: every text bounded (value as JSON, stack, output), the error
split into its message line and its stack, and the run's duration from its two instants.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from appliance.egress.record import bounded_report
from appliance.owner.report_text import retry_note
from appliance.protocol.v1 import FINISHED_STATUSES, invocation_of

VALUE_JSON_BYTES_MAX: Final = 16 * 1024
STACK_BYTES_MAX: Final = 8 * 1024
MESSAGE_BYTES_MAX: Final = 1024
OUTPUT_BYTES_MAX: Final = 64 * 1024
# The statuses of an attempt whose report will not change: the worker's finished ones
# (docs/protocol.md), and an execution fenced or retired (no longer kept).
FINAL_STATUSES: Final = FINISHED_STATUSES | {"fenced", "retired"}


def _cut(text: str, bytes_max: int) -> tuple[str, bool]:
    raw = text.encode("utf-8", "replace")
    if len(raw) <= bytes_max:
        return text, False
    return raw[:bytes_max].decode("utf-8", "ignore"), True


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def error_parts(error: Any) -> dict[str, Any] | None:
    """The thrown value as ``{"message", "stack", "stack_truncated"}`` (bounded), or None."""
    if not isinstance(error, str) or not error.strip():
        return None
    lines = error.strip("\n").splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip())
    message, _ = _cut(lines[first].strip(), MESSAGE_BYTES_MAX)
    rest = "\n".join(lines[first + 1 :])
    stack, truncated = _cut(rest, STACK_BYTES_MAX) if rest.strip() else (None, False)
    return {"message": message, "stack": stack, "stack_truncated": truncated}


def value_parts(value: Any) -> dict[str, Any]:
    """The completion value as bounded JSON text: ``{"json", "truncated"}``."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    cut, truncated = _cut(text, VALUE_JSON_BYTES_MAX)
    return {"json": cut, "truncated": truncated}


def attempt_report(document: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's view of one execution document (see the module docstring)."""
    output = document.get("output") if isinstance(document.get("output"), Mapping) else {}
    text = output.get("text") if isinstance(output.get("text"), str) else ""
    raw_bytes = len(text.encode("utf-8", "replace"))
    shown, cut = _cut(text, OUTPUT_BYTES_MAX)
    started, finished = _instant(document.get("started_at")), _instant(document.get("finished_at"))
    duration_ms = (
        round((finished - started).total_seconds() * 1000)
        if started is not None and finished is not None
        else None
    )
    status = document.get("status")
    return {
        "status": status,
        "reason": document.get("reason"),
        "note": document.get("note"),
        # A value only for a completed run (a failed run's result is always null).
        "value": value_parts(document.get("result")) if status == "completed" else None,
        "error": error_parts(document.get("error")),
        "started_at": document.get("started_at"),
        "finished_at": document.get("finished_at"),
        "duration_ms": duration_ms,
        "output": {
            "text": shown,
            "bytes": raw_bytes,
            "truncated": bool(output.get("truncated")) or cut,
        },
        # Each request the script made outside (issue 32), bounded; None without egress.
        "egress": bounded_report(document.get("egress")),
    }


ATTEMPTS_FETCHED_MAX: Final = 5  # the newest dispatched attempts whose reports are fetched


def attempt_of(execution_id: str) -> int | None:
    """The attempt number in a derived execution id (``s1-o2-a3`` → 3), by the wire's grammar
    (appliance/protocol/v1.py); None for anything else."""
    invocation = invocation_of(execution_id, namespace="-")
    return invocation.attempt if invocation is not None else None


def dispatched_attempts(detail: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per attempt that reached Running (from the timeline): its states in order."""
    attempts: dict[int, list[str]] = {}
    for step in detail.get("timeline") or []:
        if isinstance(step, Mapping) and isinstance(step.get("attempt"), int):
            attempts.setdefault(step["attempt"], []).append(str(step.get("state")))
    return [
        {"attempt": n, "states": states}
        for n, states in sorted(attempts.items())
        if "Running" in states
    ]


Observe = Callable[[str], tuple[str | None, Any]]


def occurrence_extras(
    detail: Mapping[str, Any], max_retries: int | None, observe: Observe
) -> dict[str, Any]:
    """What the occurrence detail adds: a ``note`` (a retry's "retrying at T (attempt N of M)")
    and ``attempts``, each dispatched attempt with its execution id and, for the newest
    ``ATTEMPTS_FETCHED_MAX``, its report fetched from the worker (or why it is unavailable)."""
    note = retry_note(detail, max_retries, detail.get("not_before_at"))
    attempts = dispatched_attempts(detail)
    fetched_from = max(0, len(attempts) - ATTEMPTS_FETCHED_MAX)
    for i, entry in enumerate(attempts):
        eid = f"s{detail.get('schedule_id')}-o{detail.get('id')}-a{entry['attempt']}"
        entry["execution_id"] = eid
        if i < fetched_from:
            entry["report"] = None
            entry["report_unavailable"] = "older attempt: ask the output route with ?attempt=N"
            continue
        try:
            status, document = observe(eid)
        except Exception as exc:  # a probe that fails says so; the detail still answers
            status, document = None, f"{type(exc).__name__}"
        if status is None or not isinstance(document, Mapping):
            entry["report"] = None
            entry["report_unavailable"] = f"the worker did not return it: {str(document)[:200]}"
        else:
            entry["report"] = attempt_report(document)
            if isinstance(document.get("worker_id"), str):
                entry["worker_id"] = document["worker_id"]  # where it ran (a fleet, issue 33)
    return {"note": note, "attempts": attempts}
