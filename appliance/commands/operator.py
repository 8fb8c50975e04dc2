"""Operator commands (seeds/001: one JSON object per stdin line) and their replies.

Theory of operation: ``parse_operator`` validates one command document strictly (exact fields
per action, unknown fields refused) into an ``OperatorCommand``; the runner loop executes it
and answers one JSON reply. Replies mirror the management HTTP statuses: ``{"ok": true, ...}`` on
success; otherwise ``{"ok": false, "status": 400|409|503, "error": {"code", "message"}}`` — 409
when this voter is not the acquired owner (with the leader it knows), 503 with
``"outcome": "uncertain", "retry_safe": false`` when a mutation may or may not have committed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from appliance.commands.checks import CommandRefused, check_action, check_arguments
from appliance.commands.table import COMMANDS, MUTATIONS
from appliance.core.errors import CoreError, InvalidDefinition

__all__ = [
    "ACTIONS",
    "MUTATIONS",
    "OperatorCommand",
    "OperatorError",
    "build_mutation",
    "error_reply",
    "parse_operator",
]

LINE_BYTES_MAX: Final = 256 * 1024  # a 64 KiB definition, escaped, fits
# action → argument fields; the rows live in appliance/commands/table.py.
ACTIONS: Final = {action: spec.fields for action, spec in COMMANDS.items()}


class OperatorError(Exception):
    def __init__(self, status: int, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields

    def reply(self) -> dict[str, Any]:
        return error_reply(self.status, self.code, self.message, **self.fields)


@dataclass(frozen=True)
class OperatorCommand:
    action: str
    args: dict[str, Any]


def error_reply(status: int, code: str, message: str, **fields: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {"ok": False, "status": status}
    error: dict[str, Any] = {"code": code, "message": message}
    for key, value in fields.items():
        if key in ("outcome", "retry_safe", "accepted"):
            reply[key] = value
        else:
            error[key] = value
    reply["error"] = error
    return reply


def parse_operator(line: str | bytes) -> OperatorCommand:
    """One stdin line as a checked command (``checks.check_arguments``); ``OperatorError``."""
    if len(line) > LINE_BYTES_MAX:
        raise OperatorError(413, "too_large", f"a command line is at most {LINE_BYTES_MAX} bytes")
    try:
        document = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise OperatorError(400, "invalid_json", "a command is one JSON object per line") from None
    if not isinstance(document, dict):
        raise OperatorError(400, "invalid_command", "a command must be a JSON object")
    try:
        action = check_action(document.get("action"))
        args = check_arguments(action, {k: v for k, v in document.items() if k != "action"})
    except CommandRefused as refused:
        raise OperatorError(refused.status, refused.code, refused.message) from None
    del args["action"]
    return OperatorCommand(action, args)


def build_mutation(
    command: OperatorCommand,
    at_s: int,
    check_definition: Callable[[Any], Any],
    planned: Callable[[Callable[..., Any], dict[str, Any], int], Any] | None = None,
) -> Any:
    """The core command a mutating operator command commits (its row's ``build``, or its
    ``plan`` run through ``planned(plan, args, at_s)``, which gives it the committed state and
    the calendar); ``check_definition`` parses a create's definition or raises ``OperatorError``.
    A plan's or a build's refusal (a ``CoreError``) is a definite 400: nothing was proposed."""
    spec = COMMANDS[command.action]
    args = dict(command.args)
    if "definition" in spec.fields:
        args["definition"] = check_definition(args["definition"])
    if spec.plan is not None and planned is not None:
        try:
            return planned(spec.plan, args, at_s)
        except CoreError as err:
            code = "invalid_definition" if isinstance(err, InvalidDefinition) else "refused"
            raise OperatorError(400, code, str(err)) from None
    if spec.build is None:
        raise OperatorError(400, "invalid_command", f"action: {command.action} changes nothing")
    try:
        return spec.build(args, at_s)
    except CoreError as err:  # a rule checked before proposing (e.g. the grant's horizon)
        raise OperatorError(400, "refused", str(err)) from None
