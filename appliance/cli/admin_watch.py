"""``appliance admin watch`` and ``appliance admin output OCC --follow``: the change feed, live.

Both read ``GET /scheduler/v1/events`` (docs/management.md "Watching"), the one route the web
console's live view reads as well. It is a local view any voter answers, so the first endpoint
that answers serves it; the cursor is the Raft index, so after a failover (an endpoint that stops
answering) the next endpoint continues from the same cursor and nothing is shown twice. A read is
safe to repeat: a request that fails is asked again (of the next endpoint) after a short pause.

- ``watch`` prints one line per committed change (``--json``: one JSON object per line) until
  Ctrl-C, ``--count N`` events or ``--for-s S`` seconds; ``--schedule``/``--occurrence`` filter
  on the voter. A gap (the voter no longer holds what came after the cursor) is said on stderr.
- ``output OCC --follow`` prints the latest attempt's console output as it grows, each finished
  attempt's result (value or error, timings) as the output route does, and ends when the
  occurrence is terminal: exit 0 when it Succeeded, 1 otherwise (Failed, Cancelled, Unknown ...).
  The worker reports a running attempt's output so far (docs/protocol.md), so a line shows within
  about ``FOLLOW_WAIT_MS`` of the script writing it; each look prints only what lies past what
  was printed (``_Follow.printed``), so no line is printed twice.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlencode

from appliance.cli.admin_endpoints import Failed, send
from appliance.cli.admin_text import escape, iso_time
from appliance.http import HttpClient
from appliance.metrics.attempt_report import FINAL_STATUSES

EVENTS_PATH: Final = "/scheduler/v1/events"
WATCH_WAIT_MS: Final = 20_000  # the long poll; the route caps it at 25 s
FOLLOW_WAIT_MS: Final = 1_000  # how often the output of a running attempt is looked at
RETRY_PAUSE_S: Final = 1.0


def watch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", type=int, metavar="ID", help="changes of one schedule")
    parser.add_argument("--occurrence", type=int, metavar="ID", help="changes of one occurrence")
    parser.add_argument(
        "--after",
        type=int,
        metavar="CURSOR",
        help="start after this cursor (a Raft index; 0: everything the voter still holds); "
        "default: from now",
    )
    parser.add_argument("--count", type=int, metavar="N", help="stop after N changes")
    parser.add_argument("--for-s", type=float, metavar="S", help="stop after S seconds")


@dataclass
class Endpoint:
    """The endpoints to ask, in order; the client and bearer to ask them with."""

    client: HttpClient
    bases: list[str]
    token: str
    notes: Callable[[str], None]

    def get(self, query: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = EVENTS_PATH + "?" + urlencode({k: v for k, v in query.items() if v is not None})
        sent = send(self.client, self.bases, self.token, "GET", path, None)
        return sent.status, sent.reply


def _ask(endpoint: Endpoint, query: dict[str, Any], until: float | None) -> dict[str, Any] | None:
    """One reply of the feed; a failed request is asked again (a read) until ``until``."""
    while True:
        try:
            status, reply = endpoint.get(query)
        except Failed as exc:
            endpoint.notes(f"appliance: {exc}; asking again")
        else:
            if status == 200 and reply.get("ok") is True:
                return reply
            raise Failed(_error_text(status, reply))
        if until is not None and time.monotonic() >= until:
            return None
        time.sleep(RETRY_PAUSE_S)


def _error_text(status: int, reply: dict[str, Any]) -> str:
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    return f"HTTP {status} {escape(str(error.get('code')))}: {escape(str(error.get('message')))}"


# ---- watch ---------------------------------------------------------------------------------------


def event_line(event: dict[str, Any], tz: Any) -> str:
    """One committed change as a line: when, its cursor, what changed."""
    at = iso_time(event.get("at"), tz)
    head = f"{at}  #{event.get('index')}  "
    kind = event.get("kind")
    if kind == "occurrence":
        before = event.get("previous") or "new"
        text = (
            f"occurrence {event.get('occurrence_id')} (schedule {event.get('schedule_id')}) "
            f"attempt {event.get('attempt')}: {before} -> {event.get('state')}"
        )
        detail = event.get("failure_reason") or event.get("reason")
        if event.get("not_before"):
            detail = f"retry at {iso_time(event['not_before'], tz)}"
        if detail:
            text += f" ({escape(str(detail))})"
    elif kind == "schedule":
        name = event.get("name")
        named = f" {json.dumps(name, ensure_ascii=False)}" if name else ""
        text = f"schedule {event.get('schedule_id')}{escape(named)}: {event.get('change')}"
        if event.get("fields"):
            text += f" ({', '.join(str(f) for f in event['fields'])})"
    elif kind == "pause":
        text = "scheduling paused" if event.get("change") == "paused" else "scheduling resumed"
    elif kind == "owner":
        text = (
            f"ownership acquired by {escape(str(event.get('node')))} "
            f"(term {event.get('term')}, epoch {event.get('epoch')})"
        )
    else:
        text = escape(json.dumps(event, ensure_ascii=False))
    if event.get("resync"):
        text += " [resync]"
    return head + text


def watch(args: argparse.Namespace, endpoint: Endpoint, out: Any, tz: Any) -> int:
    until = None if args.for_s is None else time.monotonic() + max(args.for_s, 0.0)
    shown = 0
    cursor = args.after
    base = {"schedule_id": args.schedule, "occurrence_id": args.occurrence}
    if cursor is None:  # from now: the cursor only
        reply = _ask(endpoint, dict(base), until)
        if reply is None:
            return 0
        cursor = reply["cursor"]
    while True:
        wait_ms = WATCH_WAIT_MS
        if until is not None:
            wait_ms = max(0, min(wait_ms, int((until - time.monotonic()) * 1000)))
        reply = _ask(endpoint, {**base, "after": cursor, "wait_ms": wait_ms}, until)
        if reply is None:
            return 0
        if reply.get("gap"):
            endpoint.notes(
                f"appliance: the voter no longer holds the changes after #{cursor} (it keeps "
                f"those after #{reply.get('first_cursor')}): some were missed; "
                "'appliance admin list' shows the state now"
            )
        for event in reply.get("events") or []:
            if args.json:
                print(json.dumps(event, ensure_ascii=False), file=out, flush=True)
            else:
                print(event_line(event, tz), file=out, flush=True)
            shown += 1
            if args.count is not None and shown >= args.count:
                return 0
        cursor = reply["cursor"]
        if until is not None and time.monotonic() >= until:
            return 0
        if reply.get("wait_refused"):
            time.sleep(RETRY_PAUSE_S)  # the voter had too many waiting: do not spin


# ---- follow --------------------------------------------------------------------------------------


@dataclass
class _Follow:
    attempt: int | None = None
    printed: int = 0  # characters of this attempt's console text already printed
    finished: set[int] = field(default_factory=set)  # attempts whose result was printed


def follow(
    occurrence_id: int,
    endpoint: Endpoint,
    out: Any,
    tz: Any,
    *,
    terminal: bool,
    as_json: bool,
    render_result: Callable[..., str],
) -> int:
    """Print the occurrence's console output as it grows and each attempt's result; the exit
    code once it is terminal (0 Succeeded, 1 otherwise)."""
    state = _Follow()
    cursor: int | None = None
    while True:
        query = {"occurrence_id": occurrence_id, "output": "true"}
        if cursor is not None:
            query.update(after=cursor, wait_ms=FOLLOW_WAIT_MS)
        reply = _ask(endpoint, query, None)
        if reply is None:  # pragma: no cover - _ask without a deadline always answers
            return 1
        if as_json:
            print(json.dumps(reply, ensure_ascii=False), file=out, flush=True)
        else:
            _show_output(reply.get("output"), state, out, tz, terminal, render_result)
        occurrence = reply.get("occurrence") or {}
        if occurrence.get("terminal") or occurrence.get("state") == "Unknown":
            if not as_json:
                print(_ending(occurrence), file=out, flush=True)
            return 0 if occurrence.get("state") == "Succeeded" else 1
        cursor = reply["cursor"]
        if reply.get("wait_refused"):
            time.sleep(RETRY_PAUSE_S)


def _show_output(
    report: Any,
    state: _Follow,
    out: Any,
    tz: Any,
    terminal: bool,
    render_result: Callable[..., str],
) -> None:
    if not isinstance(report, dict):
        return
    attempt = report.get("attempt")
    if attempt in state.finished:
        return
    if attempt != state.attempt:
        if state.attempt is not None:
            print(f"-- attempt {attempt} --", file=out, flush=True)
        state.attempt, state.printed = attempt, 0
    output = report.get("output") if isinstance(report.get("output"), dict) else {}
    text = str(output.get("text") or "")
    new = text[state.printed :]
    if new:
        print(escape(new, keep_layout=True) if terminal else new, end="", file=out, flush=True)
        state.printed = len(text)
    if report.get("status") in FINAL_STATUSES or report.get("finished_at"):
        if text and not text.endswith("\n"):
            print(file=out)
        # The result without the text already shown: the output route's trailer.
        result = render_result({**report, "output": {**output, "text": ""}}, tz=tz)
        print(result, file=out, flush=True)
        state.finished.add(attempt)


def _ending(occurrence: dict[str, Any]) -> str:
    state = occurrence.get("state")
    text = f"-- occurrence {occurrence.get('id')} is {state} (attempt {occurrence.get('attempt')})"
    if state == "Unknown":
        text += ": its outcome could not be proven; see 'appliance admin status'"
    elif occurrence.get("failure_reason") and state != "Succeeded":
        text += f": {escape(str(occurrence['failure_reason']))}"
    return text + " --"
