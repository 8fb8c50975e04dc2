"""The structured log schema of every appliance process, and its two renderings.

Theory of operation
-------------------
Each decision is ONE record, a flat JSON object (schema version ``LOG_SCHEMA_VERSION``):

``ts``     number, Unix seconds with milliseconds, the real (unscaled) wall clock of the host;
``node``   string, the voter's ``node_id`` (the worker logs its ``worker_id``);
``event``  string, a stable name from ``EVENTS`` (new events may be added; none is renamed);
then event fields, whose names carry their unit (``late_ms``) and which are ids, states, codes
and short reasons only — never a credential and never source code (the writer drops fields named
like one). docs/operations.md lists every event and its fields.

The machine form (``json``, the default) is one canonical-ish JSON object per line, stable for log
pipelines. The human form (``text``) is a rendering of the SAME record —
``2027-01-15T08:04:01.000Z v1 dispatch_accepted occurrence=2 attempt=1 late_ms=1000.0`` — made
by :class:`LogFormatStream`, a stream wrapper that re-renders each JSON line as it is written, so
the writer (``DecisionLog``) stays one code path and the two forms cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO

LOG_SCHEMA_VERSION: Final = 1
LOG_FORMATS: Final = ("json", "text")
LogFormat = Literal["json", "text"]
ENVELOPE: Final = ("ts", "node", "event")

# event -> its fields (besides the envelope), for docs and the schema test.
EVENTS: Final[Mapping[str, tuple[str, ...]]] = {
    "started": ("management_addr", "cluster_addr", "admission_addr", "voters", "time_scale"),
    "grant_expiry_warning": ("message",),
    "contract_in_force": ("amendment", "config_amendment", "grant_expires_at", "message"),
    "contract_amended": ("amendment", "kind"),
    "ownership_acquired": ("epoch", "term", "reobserve", "resume_cancelling", "fenced"),
    "ownership_lost": ("epoch", "leader_hint"),
    "ownership_retry": ("reason",),
    "charging_adopted": ("rules",),
    "charging_refused": ("reason",),
    "charging_retry": ("reason",),
    "initial_schedules": ("ids",),
    "initial_schedules_refused": ("reason",),
    "binding_unknown": ("occurrence", "attempt"),
    "loop_error": ("error",),
    "list_failed": ("error",),
    "loop_queue_full": ("dropped",),
    "selection": ("at", "created", "dropped", "ignored", "retired", "late_ms"),
    "observation_refused": ("at", "reason"),
    "retry_due": ("occurrences",),
    "claim": ("occurrence", "schedule", "attempt", "epoch", "worker", "late_ms"),
    "claim_refused": ("occurrence", "attempt", "reason"),
    "claim_uncertain": ("occurrence", "attempt", "reason"),
    "claim_adopted": ("occurrence", "attempt"),
    "admission": ("status", "occurrence", "attempt", "epoch", "late_ms", "refusal"),
    "dispatch_accepted": ("occurrence", "attempt", "execution_id", "late_ms", "slot"),
    "dispatch_not_dispatched": ("occurrence", "attempt", "sends", "delay_s"),
    "dispatch_retired": ("occurrence", "attempt", "detail"),
    # Paced dispatch (appliance/owner/pacing.py).
    "capacity_wait": ("occurrence", "attempt", "worker", "waiting", "in_flight", "window"),
    "capacity_send": ("occurrence", "attempt", "worker", "waiting", "late_ms"),
    "capacity_wait_noted": ("asked", "noted", "outcome"),
    "capacity_waiting_cleared": ("dropped", "waiting"),
    "worker_capacity": (
        "worker",
        "max_concurrent",
        "max_queued",
        "free_slots",
        "queue_room",
        "stated",
        "pacing",
    ),
    # The fleet (issue 33, appliance/owner/fleet_decisions.py).
    "placement_wait": ("occurrence", "reason"),
    "placement_found": ("occurrence", "worker"),
    "worker_unreachable": ("worker", "failed_calls", "in_flight"),
    "worker_reachable": ("worker",),
    "unreachable_fenced": ("occurrence", "attempt", "worker"),
    "unreachable_fence_refused": ("occurrence", "attempt", "reason"),
    "unreachable_fence_uncertain": ("occurrence", "attempt", "reason"),
    "admission_credentials_kept": ("error",),
    "dispatch_fenced": ("occurrence", "attempt", "state", "reason"),
    "dispatch_fenced_refused": ("occurrence", "attempt", "reason"),
    "dispatch_fenced_uncertain": ("occurrence", "attempt", "reason"),
    "outcome": ("occurrence", "attempt", "state", "reason", "worker_status"),
    "outcome_refused": ("occurrence", "attempt", "reason"),
    "outcome_uncertain": ("occurrence", "attempt", "reason"),
    "cancel_unresolved": ("occurrence", "attempt", "why"),
    "operator": ("action", "id", "occurrence_id"),
    "operator_refused": ("action", "reason"),
    "proposal_uncertain": ("reason",),
    "draining": ("open_tasks",),
    "shutdown": ("at",),
    "stopped": (),
    "fatal": ("error",),
}


def format_ts(ts: Any) -> str:
    """``ts`` (Unix seconds) as RFC 3339 UTC with milliseconds; anything else as given."""
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return str(ts)
    try:
        instant = datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError):
        return str(ts)
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"


def _text_value(value: Any) -> str:
    if isinstance(value, str):
        # Bare when it cannot be confused with the separators; quoted (JSON) otherwise.
        if value and not any(c.isspace() or c in '="' for c in value):
            return value
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def render_text(record: Mapping[str, Any]) -> str:
    """One record as a human line: ``<ts> <node> <event> key=value ...`` (fields in order)."""
    head = [
        format_ts(record.get("ts")),
        str(record.get("node", "-")),
        str(record.get("event", "-")),
    ]
    fields = [f"{k}={_text_value(v)}" for k, v in record.items() if k not in ENVELOPE]
    return " ".join(head + fields)


class LogFormatStream:
    """A text stream that writes each JSON log line either unchanged or re-rendered as text.

    Lines that are not a JSON object (a traceback, a third-party message) pass through unchanged,
    so nothing written to the stream is ever lost.
    """

    def __init__(self, inner: TextIO, log_format: LogFormat = "json") -> None:
        if log_format not in LOG_FORMATS:
            raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
        self._inner = inner
        self._format = log_format
        self._lock = threading.Lock()
        self._pending = ""

    @property
    def log_format(self) -> str:
        return self._format

    def write(self, text: str) -> int:
        if self._format == "json":
            return self._inner.write(text)
        with self._lock:
            data = self._pending + text
            lines = data.split("\n")
            self._pending = lines.pop()
            for line in lines:
                self._inner.write(_rendered(line) + "\n")
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _rendered(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line
    return render_text(record) if isinstance(record, dict) else line


def log_stream(inner: TextIO, log_format: str = "json") -> TextIO:
    """``inner`` itself for ``json``; a re-rendering wrapper for ``text``."""
    if log_format == "json":
        return inner
    return LogFormatStream(inner, log_format)  # type: ignore[arg-type,return-value]


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-format json|text`` (json: one JSON object per line, the stable schema)."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="json",
        help="decision log on stderr: json (one object per line, stable schema; default) or "
        "text (the same records for humans)",
    )
