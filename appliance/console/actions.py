"""The console's write actions (opt-in, ``console.actions``): what each button may send.

Theory of operation (SPEC §12 "The console is not management"). Six operator commands and no
others: ``run_now``, ``enable``, ``disable``, ``pause``, ``resume``, ``cancel``. Each enters the
one command table exactly as a management command does — ``check_arguments`` with the
``operator`` role (so a field the table does not know is refused with its name), the bounded
queue, the runner loop — and its answer keeps management's semantics (``run_command``): 200
certain, 400/404/422 definite refusal (nothing changed), 409 not the owner, 503 ``accepted:
false`` (not queued: try again later) or 503 ``uncertain`` (inspect before acting; never repeat
blindly). ``acknowledge_stopped`` (recovery) and the admin commands are not in the list, and the
module refuses to load if the table ever marks one of the six as needing more than the
operator role.

A button is a link to a confirmation page (``GET /confirm``); only its form posts the action,
with the session's CSRF token. ``run_now`` carries a ``request_id`` drawn for that page, so a
form posted twice (a double click, a reload) runs the schedule once: the checkpoint answers the
repeat with the first answer.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.commands.table import ADMIN_ACTIONS, COMMANDS, OPERATOR, RECOVERY_ACTIONS
from appliance.management.commands import Refused, check_arguments
from appliance.management.gateway import CommandGateway
from appliance.management.replies import Outcome, error_outcome, run_command

CONSOLE_ACTIONS: Final = ("run_now", "enable", "disable", "pause", "resume", "cancel")
if set(CONSOLE_ACTIONS) & (RECOVERY_ACTIONS | ADMIN_ACTIONS) or any(
    COMMANDS[a].role != OPERATOR for a in CONSOLE_ACTIONS
):  # pragma: no cover - a table change that would widen the console
    raise RuntimeError("a console action needs more than the operator role")

ACTION_FIELD: Final = {
    "run_now": "id",
    "enable": "id",
    "disable": "id",
    "cancel": "occurrence_id",
    "pause": None,
    "resume": None,
}
FORM_FIELDS_MAX: Final = 8


@dataclass(frozen=True)
class Prompt:
    """What the confirmation page asks and posts."""

    question: str
    verb: str
    fields: dict[str, str]
    back: str


def prompt(action: str, target: int | None, label: str | None) -> Prompt:
    """The confirmation of ``action`` on ``target`` (a schedule or occurrence id)."""
    name = f"“{label}”" if label else (f"#{target}" if target is not None else "")
    if action == "run_now":
        return Prompt(
            f"Run schedule {target} {name} once now? It goes through its overlap policy and the "
            "running limit.",
            "Run now",
            {"id": str(target), "request_id": f"console-{secrets.token_hex(12)}"},
            f"/schedules/{target}",
        )
    if action == "enable":
        return Prompt(
            f"Enable schedule {target} {name}? It resumes from now, without a backlog.",
            "Enable",
            {"id": str(target)},
            f"/schedules/{target}",
        )
    if action == "disable":
        return Prompt(
            f"Disable schedule {target} {name}? Future slots are not selected; occurrences "
            "already selected still run.",
            "Disable",
            {"id": str(target)},
            f"/schedules/{target}",
        )
    if action == "cancel":
        return Prompt(
            f"Cancel occurrence {target}? Cancellation is requested now; it is Cancelled only "
            "once the engine confirms the stop, and completion may still win.",
            "Request cancellation",
            {"occurrence_id": str(target)},
            f"/occurrences/{target}",
        )
    if action == "pause":
        return Prompt(
            "Pause all scheduling, cluster-wide? Nothing is selected or started until resume; "
            "running work continues.",
            "Pause",
            {},
            "/",
        )
    if action == "resume":
        return Prompt(
            "Resume scheduling? The paused span is skipped (counted missed).",
            "Resume",
            {},
            "/",
        )
    raise ValueError(f"action: {action} is not a console action")


def parse_form(body: bytes) -> dict[str, str]:
    """A urlencoded form of at most ``FORM_FIELDS_MAX`` fields, each given once."""
    from urllib.parse import parse_qsl

    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=FORM_FIELDS_MAX,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        message = f"the form is not readable: {type(exc).__name__}"
        raise Refused(400, "invalid_form", message) from None
    form: dict[str, str] = {}
    for key, value in pairs:
        if key in form:
            raise Refused(400, "invalid_form", f"{key}: given twice")
        form[key] = value
    return form


def command_of(form: Mapping[str, str], limits: Any) -> dict[str, Any]:
    """The checked command document of a posted form (``Refused`` naming the field)."""
    action = form.get("action", "")
    if action not in CONSOLE_ACTIONS:
        raise Refused(
            400, "not_a_console_action", f"action: must be one of {', '.join(CONSOLE_ACTIONS)}"
        )
    arguments: dict[str, Any] = {}
    field = ACTION_FIELD[action]
    if field is not None:
        text = form.get(field, "")
        if not (text.isascii() and text.isdigit()) or len(text) > 16:
            raise Refused(400, "invalid_command", f"{field}: must be an integer id", field=field)
        arguments[field] = int(text)
    if action == "run_now" and form.get("request_id"):
        arguments["request_id"] = form["request_id"]
    known = {"action", "csrf", "confirmed", "request_id", *([field] if field else [])}
    unknown = sorted(set(form) - known)
    if unknown:
        raise Refused(400, "invalid_command", f"{unknown[0]}: unknown field", field=unknown[0])
    return check_arguments(action, arguments, OPERATOR, limits)


def execute(gateway: CommandGateway, command: Mapping[str, Any], timeout_s: float) -> Outcome:
    """Management's ``run_command`` with the operator role: the same certain/uncertain answers."""
    if command.get("action") not in CONSOLE_ACTIONS:
        return error_outcome(400, "not_a_console_action", "action: not a console action")
    return run_command(gateway, command, OPERATOR, timeout_s)


@dataclass(frozen=True)
class Verdict:
    kind: str  # done, refused, not_owner, not_accepted, uncertain
    heading: str
    message: str


def verdict(action: str, outcome: Outcome) -> Verdict:
    """How the result page words an outcome (management's meaning, in the operator's terms)."""
    body = outcome.body
    error = body.get("error") if isinstance(body.get("error"), Mapping) else {}
    if outcome.status == 200:
        if action == "cancel":
            return Verdict(
                "done",
                "Cancellation requested",
                "The occurrence is Cancelling: it is Cancelled only once the engine confirms the "
                "work stopped, and completion may still win.",
            )
        return Verdict("done", "Done", str(body.get("meaning", "committed")))
    if outcome.status == 409:
        hint = body.get("error", {}).get("leader_hint") or body.get("leader_hint")
        where = f" The owner is {hint}: open its console." if hint else ""
        return Verdict(
            "not_owner",
            "Not sent: this voter is not the owner",
            f"The command was not accepted here.{where}",
        )
    if outcome.status == 503 and body.get("accepted") is False:
        return Verdict(
            "not_accepted",
            "Not accepted",
            f"{error.get('message', 'the runner did not take the command')} Nothing changed; "
            "trying again later is safe.",
        )
    if outcome.status == 503:
        safe = body.get("retry_safe") is True
        return Verdict(
            "uncertain",
            "Outcome uncertain",
            f"{error.get('message', 'the outcome is not known')} "
            + (
                "Repeating this confirmation is safe."
                if safe
                else "Look at the state before acting again."
            ),
        )
    return Verdict(
        "refused",
        "Refused: nothing changed",
        str(error.get("message", "the command was refused")),
    )
