"""The one argument check of an operator command, for every adapter (stdin, HTTP, MCP, admin).

Theory of operation: a command document is ``{"action": ..., <fields>}``; its row in
``table.py`` names the fields, which are required, which are ids, and a further check
(``args.py``). ``check_arguments`` applies them in one order — the action, unknown fields, the
recovery attestation, required fields, ids, the definition's shape, the row's check — and raises
``CommandRefused`` naming the field. Each adapter maps the refusal to its own reply (stdin's
``OperatorError``, management's ``Refused``); none checks a field itself. Authorization is the
adapter's (stdin has no roles), and parsing a definition against the limits in force is done
where those limits are known (the management adapter, the owner).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from appliance.commands.args import ArgumentError
from appliance.commands.table import COMMANDS
from appliance.protocol.v1 import ID_MAX

__all__ = ["ATTESTATION_FIELD", "CommandRefused", "check_arguments"]

ATTESTATION_FIELD: Final = "dispatcher_and_work_quiesced"
ATTESTATION_MESSAGE: Final = (
    f"{ATTESTATION_FIELD}: must be exactly true, attested by a human who has established that "
    "the old dispatcher cannot submit and the accepted work has stopped"
)


class CommandRefused(ValueError):
    """A command refused before anything was submitted: status 400, a code, the field, and
    ``shape`` when the document's shape is wrong (types, required and unknown fields) rather
    than its content (MCP reports the first as invalid params, the second as a tool error)."""

    def __init__(
        self, code: str, message: str, *, field: str | None = None, shape: bool = False
    ) -> None:
        super().__init__(message)
        self.status = 400
        self.code = code
        self.message = message
        self.field = field
        self.shape = shape


def _shape(message: str, field: str | None) -> CommandRefused:
    return CommandRefused("invalid_command", message, field=field, shape=True)


def check_action(action: Any) -> str:
    if not isinstance(action, str) or action not in COMMANDS:
        raise _shape(f"action: must be one of {', '.join(sorted(COMMANDS))}", "action")
    return action


def check_arguments(
    action: str,
    arguments: Any,
    *,
    definition: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """The stdin document (``{"action": action, ...}``) for checked ``arguments``; raises
    ``CommandRefused``. ``definition``, when given, parses a definition's content (it raises
    its own refusal); without it only its shape (an object) is checked here."""
    check_action(action)
    if not isinstance(arguments, Mapping):
        raise _shape("arguments must be a JSON object", None)
    spec = COMMANDS[action]
    for key in arguments:
        if key not in spec.fields:
            raise _shape(f"{key}: unknown field for {action}", str(key))
    if ATTESTATION_FIELD in spec.fields and arguments.get(ATTESTATION_FIELD) is not True:
        # Missing or anything but literal true: the human attestation was not given. A content
        # refusal, never a shape one, so MCP reports it as a tool error an agent must not fix
        # by itself.
        raise CommandRefused("attestation_required", ATTESTATION_MESSAGE, field=ATTESTATION_FIELD)
    for key in spec.required:
        if key not in arguments:
            raise _shape(f"{key}: required for {action}", key)
    document: dict[str, Any] = {"action": action}
    for key in spec.fields:
        if key not in arguments:
            continue  # an optional field (spec.optional)
        value = arguments[key]
        if key in spec.id_fields and (type(value) is not int or not 1 <= value <= ID_MAX):
            # bool is an int in Python; true is not an id.
            raise _shape(f"{key}: must be an integer id in [1, {ID_MAX}]", key)
        if key == "definition":
            if not isinstance(value, Mapping):
                raise _shape("definition: must be a JSON object", "definition")
            value = definition(value) if definition is not None else dict(value)
        document[key] = value
    if spec.check is not None:
        try:
            spec.check(document)
        except ArgumentError as err:
            raise CommandRefused(
                "invalid_command", str(err), field=err.field, shape=err.shape
            ) from None
    return document
