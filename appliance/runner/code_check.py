"""The syntax check of a command's JavaScript, before the command enters the runner loop.

``create`` carries ``definition.code`` and ``update`` may carry ``code``; both are parsed by V8
(``appliance.engine.syntax``: parsed, never run) on the caller's thread in ``Runner.operator``,
so stdin, HTTP and MCP share it and nothing with a syntax error is ever proposed. A refusal is
definite (400 ``invalid_definition``), naming the field, the line and the column. Apply never
parses JavaScript: it stays a pure function of state and command (SPEC §2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.commands.operator import OperatorCommand, error_reply
from appliance.engine.syntax import syntax_problem


def code_of(command: OperatorCommand) -> tuple[str, str] | None:
    """(field, code) of the JavaScript a command carries, if any."""
    args = command.args
    if command.action == "create":
        definition = args.get("definition")
        code = definition.get("code") if isinstance(definition, Mapping) else None
        return ("definition.code", code) if isinstance(code, str) else None
    if command.action == "update" and isinstance(args.get("code"), str):
        return "code", args["code"]
    return None


def code_refusal(command: OperatorCommand) -> dict[str, Any] | None:
    """The definite refusal of a command whose code does not parse, or None."""
    found = code_of(command)
    if found is None:
        return None
    field, code = found
    problem = syntax_problem(code)
    if problem is None:
        return None
    return error_reply(
        400,
        "invalid_definition",
        f"{field}: {problem}",
        field=field,
        line=problem.line,
        column=problem.column,
    )
