"""``appliance admin describe ID|NAME`` and ``appliance admin apply FILE [--dry-run]``.

``describe`` reads ``GET /scheduler/v1/schedules/{id}`` (a NAME is looked up in ``list`` first):
the whole definition with its code, enabled or not, next runs (their jittered start too; held
while paused), the newest outcomes, live occurrences, counters and changes.

``apply`` is declarative (``kubectl apply``, ``nomad job run``): the file's definition must have a
``name``, the schedule of that name is found among the live ones (names are unique among them,
issue 35) and is created when there is none, or updated with exactly the fields that differ; the
same file applied twice changes nothing the second time (nothing is sent). ``--dry-run`` shows
the difference (a unified diff of the code) and sends nothing. The file is checked first, offline,
like ``admin schedule check`` (every problem, a syntax error with its line and column). A create
that loses a race to another apply of the same name is refused with the existing id and becomes
an update of that schedule, once. The lookup reads ``list``, a possibly stale local view: the
name rule at apply time is what makes the outcome right, the view only picks the command.
"""

from __future__ import annotations

import argparse
import difflib
import json
from datetime import datetime
from typing import Any, Final

from appliance.cli.admin_endpoints import Failed, UsageError, send
from appliance.cli.admin_text import escape, iso_time, relative_time
from appliance.core.definition import DefinitionProblems, definition_to_json, parse_definition
from appliance.core.errors import InvalidDefinition
from appliance.core.limits import Limits
from appliance.engine.syntax import syntax_problem
from appliance.http import HttpClient

SCHEDULES_PATH: Final = "/scheduler/v1/schedules"
COMMANDS_PATH: Final = "/scheduler/v1/commands"
FIELDS: Final = ("name", "cron", "timezone", "policy", "code")
CODE_LINES_SHOWN_MAX: Final = 400


def describe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("schedule", metavar="ID|NAME", help="a schedule id or its name")


def apply_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE|-", help="a definition JSON file with a name")
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change; send nothing"
    )


class Session:
    """One CLI run's requests: to the owner among the endpoints (admin_endpoints.send)."""

    def __init__(self, client: HttpClient, bases: list[str], token: str) -> None:
        self.client, self.bases, self.token = client, bases, token

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        sent = send(self.client, self.bases, self.token, "GET", path, None)
        return sent.status, sent.reply

    def command(self, document: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        body = json.dumps(document).encode()
        sent = send(self.client, self.bases, self.token, "POST", COMMANDS_PATH, body)
        return sent.status, sent.reply


class Refused(Exception):
    """A reply that is not a success: the CLI prints it (admin_ops.describe_error) and exits 1."""

    def __init__(self, status: int, reply: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.reply = status, reply


def _ok(status: int, reply: dict[str, Any]) -> dict[str, Any]:
    if status != 200 or reply.get("ok") is not True:
        raise Refused(status, reply)
    return reply


def schedules_named(session: Session, name: str) -> list[int]:
    reply = _ok(*session.get(SCHEDULES_PATH))
    result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
    return [
        s["id"]
        for s in result.get("schedules") or []
        if isinstance(s, dict) and (s.get("definition") or {}).get("name") == name
    ]


def resolve(session: Session, text: str) -> int:
    """``ID|NAME`` → a schedule id (a name must name exactly one live schedule)."""
    if text.isascii() and text.isdigit():
        if int(text) < 1:
            raise UsageError("ID must be a positive integer")
        return int(text)
    found = schedules_named(session, text)
    if not found:
        raise Failed(f"no live schedule is named {json.dumps(text, ensure_ascii=False)}")
    if len(found) > 1:
        raise Failed(
            f"{len(found)} schedules are named {json.dumps(text, ensure_ascii=False)} "
            f"(ids {', '.join(map(str, found))}, from before names were unique): use an id"
        )
    return found[0]


def describe(session: Session, text: str) -> dict[str, Any]:
    schedule_id = resolve(session, text)
    return _ok(*session.get(f"{SCHEDULES_PATH}/{schedule_id}"))


# ---- rendering -----------------------------------------------------------------------------------


def voter_now_s(reply: dict[str, Any]) -> float | None:
    """The answering voter's clock (``now``), which relative times are measured from."""
    text = reply.get("now")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _when(value: Any, now_s: float, tz: Any) -> str:
    return f"{relative_time(value, now_s)} ({iso_time(value, tz)})"


def _policy_text(policy: dict[str, Any]) -> str:
    retry = policy.get("retry") or {}
    text = (
        f"missed {json.dumps(policy.get('missed'))}, overlap {policy.get('overlap')}, "
        f"retry {retry.get('max_retries')} after {retry.get('delay_seconds')} s"
    )
    if policy.get("jitter_seconds"):
        text += f", jitter up to {policy['jitter_seconds']} s"
    return text


def _outcome(o: dict[str, Any], now_s: float) -> str:
    last = (o.get("timeline") or [{}])[-1]
    text = (
        f"occurrence {o.get('id')} due {relative_time(o.get('due_at'), now_s)}: "
        f"{o.get('state')} (attempt {o.get('attempt')}, {relative_time(last.get('at'), now_s)})"
    )
    if o.get("failure_reason") and o.get("state") != "Succeeded":
        text += f": {o['failure_reason']}"
    return escape(text)


def render_describe(reply: dict[str, Any], now_s: float, tz: Any) -> str:
    schedule = reply.get("schedule") or {}
    definition = schedule.get("definition") or {}
    name = definition.get("name")
    state = "enabled" if schedule.get("enabled") else "disabled"
    lines = [
        f"schedule {schedule.get('id')}"
        + (f" {escape(json.dumps(name, ensure_ascii=False))}" if name else "")
        + f" ({state})",
        f"cron       {escape(str(definition.get('cron')))} in "
        f"{escape(str(definition.get('timezone')))}",
        f"policy     {_policy_text(definition.get('policy') or {})}",
        f"created    {_when(schedule.get('created_at'), now_s, tz)}",
    ]
    changes = schedule.get("changes") or []
    if changes:
        last = changes[-1]
        lines.append(
            f"updated    {len(changes)} time(s), last {relative_time(last.get('at'), now_s)} "
            f"({', '.join(last.get('fields') or [])})"
        )
    if reply.get("paused"):
        lines.append(
            f"PAUSED     scheduling is paused since {iso_time(reply['paused'].get('since'), tz)}: "
            "the next runs are held until 'appliance admin resume'"
        )
    runs = reply.get("next_runs") or []
    held = " (held)" if reply.get("next_runs_held") else ""
    if not schedule.get("enabled"):
        lines.append("next runs  none: disabled ('appliance admin enable ID')")
    for i, run in enumerate(runs):
        start = ""
        if run.get("starts_at") != run.get("slot"):
            start = f", starts {iso_time(run.get('starts_at'), tz)} (jitter)"
        label = "next runs" if i == 0 else ""
        lines.append(f"{label:<10} {_when(run.get('slot'), now_s, tz)}{start}{held}")
    live = reply.get("live") or []
    for i, o in enumerate(live):
        lines.append(f"{'live' if i == 0 else '':<10} {_outcome(o, now_s)}")
    outcomes = reply.get("last_outcomes") or []
    for i, o in enumerate(outcomes):
        lines.append(f"{'last' if i == 0 else '':<10} {_outcome(o, now_s)}")
    if not outcomes:
        lines.append("last       (no finished occurrence retained)")
    counts = reply.get("counts") or {}
    dropped = reply.get("dropped") or {}
    lines.append(
        "counts     "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + "; dropped "
        + ", ".join(f"{k} {v}" for k, v in dropped.items())
    )
    code = str(definition.get("code") or "")
    code_lines = code.splitlines() or [""]
    shown = code_lines[:CODE_LINES_SHOWN_MAX]
    lines.append(
        f"code       {schedule.get('code_bytes')} bytes, sha256 {schedule.get('code_sha256')}:"
    )
    lines += [f"  {escape(line, keep_layout=True)}" for line in shown]
    if len(code_lines) > len(shown):
        lines.append(f"  … ({len(code_lines) - len(shown)} more lines; --json has it whole)")
    lines.append("(a local view of this voter's replica; it may lag the acquired owner)")
    return "\n".join(lines)


# ---- apply ---------------------------------------------------------------------------------------


def checked_definition(document: Any) -> dict[str, Any]:
    """The file's definition, normalized like the runner does (defaults written out); every
    problem at once (UsageError), a syntax error in the code with its line and column."""
    problems: list[str] = []
    code = document.get("code") if isinstance(document, dict) else None
    if isinstance(code, str) and (problem := syntax_problem(code)) is not None:
        problems.append(f"code: {problem}")
    try:
        parsed = parse_definition(document, Limits(), "definition")
    except DefinitionProblems as found:
        problems = [f"{field}: {message}" for field, message in found.problems] + problems
    except InvalidDefinition as err:
        problems.insert(0, str(err))
    if problems:
        raise UsageError("the definition is invalid:\n  " + "\n  ".join(map(escape, problems)))
    normalized = definition_to_json(parsed)
    if normalized.get("name") is None:
        raise UsageError("apply finds the schedule by its name: the definition needs a name")
    return normalized


def differences(current: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """field → its new value, for every field that differs (policy compared whole)."""
    return {f: wanted.get(f) for f in FIELDS if current.get(f) != wanted.get(f)}


def diff_text(schedule_id: int | None, current: dict[str, Any], changes: dict[str, Any]) -> str:
    lines = []
    for field, value in changes.items():
        if field == "code":
            continue
        before = json.dumps(current.get(field), ensure_ascii=False, sort_keys=True)
        after = json.dumps(value, ensure_ascii=False, sort_keys=True)
        lines.append(escape(f"  {field}: {before} -> {after}"))
    if "code" in changes:
        lines.append("  code:")
        diff = difflib.unified_diff(
            str(current.get("code") or "").splitlines(),
            str(changes["code"]).splitlines(),
            f"schedule {schedule_id} (committed)",
            "the file",
            lineterm="",
        )
        lines += [f"    {escape(line, keep_layout=True)}" for line in diff]
    return "\n".join(lines)


def apply(session: Session, wanted: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """Create or update the schedule named like ``wanted``; what was (or would be) done."""
    name = wanted["name"]
    found = schedules_named(session, name)
    if len(found) > 1:
        raise Failed(
            f"{len(found)} live schedules are named {json.dumps(name, ensure_ascii=False)} "
            f"(ids {', '.join(map(str, found))}, from before names were unique): delete or "
            "rename all but one, then apply again"
        )
    if not found:
        if dry_run:
            return {"action": "create", "id": None, "changes": wanted, "dry_run": True}
        status, reply = session.command({"action": "create", "definition": wanted})
        error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        if status == 422 and error.get("code") == "name_taken":  # created meanwhile
            return _update(session, int(error["existing_id"]), wanted, dry_run)
        result = _ok(status, reply).get("result") or {}
        return {"action": "create", "id": result.get("id"), "changes": wanted, "dry_run": False}
    return _update(session, found[0], wanted, dry_run)


def _update(session: Session, schedule_id: int, wanted: dict[str, Any], dry_run: bool) -> dict:
    described = _ok(*session.get(f"{SCHEDULES_PATH}/{schedule_id}"))
    current = (described.get("schedule") or {}).get("definition") or {}
    changes = differences(current, wanted)
    outcome: dict[str, Any] = {
        "action": "update" if changes else "unchanged",
        "id": schedule_id,
        "changes": changes,
        "current": current,
        "dry_run": dry_run,
    }
    if not changes or dry_run:
        return outcome
    reply = _ok(*session.command({"action": "update", "id": schedule_id, **changes}))
    outcome["fields"] = (reply.get("result") or {}).get("fields")
    return outcome


def render_apply(outcome: dict[str, Any]) -> str:
    would = "would be " if outcome["dry_run"] else ""
    trailer = "\n(dry run: nothing was sent)" if outcome["dry_run"] else ""
    if outcome["action"] == "create":
        wanted = outcome["changes"]
        ident = "" if outcome["id"] is None else f" {outcome['id']}"
        return (
            f"schedule{ident} {escape(json.dumps(wanted.get('name'), ensure_ascii=False))} "
            f"{would}created: {escape(str(wanted.get('cron')))} in "
            f"{escape(str(wanted.get('timezone')))}, code "
            f"{len(str(wanted.get('code')).encode('utf-8', 'surrogatepass'))} bytes{trailer}"
        )
    current = outcome["current"]
    label = (
        f"schedule {outcome['id']} {escape(json.dumps(current.get('name'), ensure_ascii=False))}"
    )
    if outcome["action"] == "unchanged":
        return f"{label}: unchanged (the file matches it); nothing was sent"
    fields = ", ".join(outcome.get("fields") or outcome["changes"])
    head = f"{label} {would}updated ({fields}):"
    return f"{head}\n{diff_text(outcome['id'], current, outcome['changes'])}{trailer}".rstrip()
