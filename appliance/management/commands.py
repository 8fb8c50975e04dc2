"""Validation and authorization of one management command, before it may enter the queue.

Theory of operation. HTTP (``POST /scheduler/v1/commands``, the two GET routes) and MCP tools
carry the same commands as stdin (seeds/001's seven, and those of issue 22); this module
is their one gate. ``check_command`` returns the normalized stdin document to submit, or raises
``Refused`` with the HTTP status of seeds/001 "Error behavior":

- 403 ``recovery_required``: ``acknowledge_stopped`` by anyone but the recovery credential
  (decided first: an operator learns nothing about the command's validity);
- 400 naming the field: unknown action, unknown/missing fields, non-integer ids, a definition that
  fails ``parse_definition`` with the runner's limits, a missing or non-``true``
  ``dispatcher_and_work_quiesced`` attestation.

Every refusal carries ``shape=True`` when the problem is the document's shape (types, required and
unknown fields) rather than its content: MCP reports shape problems as JSON-RPC invalid params and
content problems as a tool error (``isError``). Messages name fields, never echo the source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from appliance.commands.checks import CommandRefused, check_action
from appliance.commands.checks import check_arguments as shared_check
from appliance.commands.table import (
    ADMIN_ACTIONS,
    COMMANDS,
    MUTATIONS,
    READS,
    RECOVERY_ACTIONS,
)
from appliance.core.definition import DefinitionProblems, definition_to_json, parse_definition
from appliance.core.limits import Limits
from appliance.protocol.v1 import ID_MAX  # the one id limit of the wire: no larger id exists

__all__ = ["ID_MAX", "MUTATIONS", "RECOVERY_ACTIONS", "Refused", "check_arguments", "check_command"]

# action → argument fields (the stdin document without ``action``); order is documentation order.
# The rows live in appliance/commands/table.py.
COMMAND_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    action: spec.fields for action, spec in COMMANDS.items()
}


class Refused(Exception):
    """A command refused before the queue; nothing was submitted."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        shape: bool = False,
        problems: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.shape = shape
        self.problems = problems  # every (field, message) of an invalid definition

    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        if self.problems:
            error["problems"] = self.problems
        return error


def allowed_actions(role: str) -> frozenset[str]:
    """What a management role may do (seeds/001 "Authorization matrix", plus issue 20's admin
    role: the contract amendments and the reads, nothing else; no other role amends)."""
    if role == "recovery":
        return frozenset(COMMAND_FIELDS) - ADMIN_ACTIONS
    if role == "operator":
        return frozenset(COMMAND_FIELDS) - RECOVERY_ACTIONS - ADMIN_ACTIONS
    if role == "admin":
        return ADMIN_ACTIONS | READS
    return frozenset()


def authorize(action: str, role: str) -> None:
    if action in allowed_actions(role):
        return
    if action in ADMIN_ACTIONS:
        raise Refused(
            403,
            "admin_required",
            f"{action} requires the separate management admin credential "
            "(management.admin_bearer_env)",
        )
    if action in RECOVERY_ACTIONS:
        raise Refused(
            403,
            "recovery_required",
            f"{action} requires the separate management recovery credential",
        )
    raise Refused(403, "forbidden", f"{action} is not allowed with the {role} credential")


def _shape(message: str, field: str | None) -> Refused:
    return Refused(400, "invalid_command", message, field=field, shape=True)


def check_arguments(action: str, arguments: Any, role: str, limits: Limits) -> dict[str, Any]:
    """Validate ``arguments`` (the stdin command without ``action``) for ``action`` and ``role``.

    The role is decided first (an operator learns nothing about a recovery command's
    validity), then the one argument check every adapter shares (appliance/commands/checks.py).
    Returns the stdin document to submit; raises ``Refused``.
    """
    try:
        check_action(action)
    except CommandRefused as refused:
        raise _refused(refused) from None
    authorize(action, role)
    try:
        return shared_check(action, arguments, definition=lambda v: _definition(v, limits))
    except CommandRefused as refused:
        raise _refused(refused) from None


def _refused(refused: CommandRefused) -> Refused:
    return Refused(
        refused.status, refused.code, refused.message, field=refused.field, shape=refused.shape
    )


def _definition(value: Any, limits: Limits) -> dict[str, Any]:
    try:
        parsed = parse_definition(dict(value), limits, "definition")
    except DefinitionProblems as problems:
        field, message = problems.problems[0]
        more = len(problems.problems) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise Refused(
            400,
            "invalid_definition",
            f"{field}: {message}{suffix}",
            field=field,
            problems=[{"field": f, "message": m} for f, m in problems.problems],
        ) from None
    return definition_to_json(parsed)


def check_command(document: Any, role: str, limits: Limits) -> dict[str, Any]:
    """Validate one tagged command document (``{"action": ..., ...}``) for ``role``."""
    if not isinstance(document, Mapping):
        raise _shape("a command must be a JSON object", None)
    action = document.get("action")
    arguments = {key: value for key, value in document.items() if key != "action"}
    return check_arguments(action, arguments, role, limits)
