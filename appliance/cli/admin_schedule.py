"""``appliance admin schedule check FILE [--json] [--limits FILE]``: a definition, offline.

Validates one schedule definition file (the ``create`` document; a whole ``{"action": "create",
"definition": {...}}`` command works too) with the same ``parse_definition`` the runner uses, and
reports EVERY problem at once with its field path (a syntax error in ``code`` with its line and
column: V8 parses it, nothing runs) — on stderr as ``path: message`` lines, or
with ``--json`` as one document on stdout. ``--limits`` names a JSON file with the runner's
``limits`` (``CatchUp.cap`` is bounded by ``limits.outstanding``); the default limits otherwise.
On success it prints the normalized definition's summary: the policy with every default written
out, and the next fire times. Exit 0 valid, 2 invalid. Nothing is sent anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any, Final

from appliance.cli.admin_text import escape
from appliance.config.common import read_json_file
from appliance.core.calendar import compile_schedule
from appliance.core.definition import DefinitionProblems, definition_to_json, parse_definition
from appliance.core.errors import InvalidConfig, InvalidDefinition
from appliance.core.limits import Limits, parse_limits
from appliance.engine.syntax import syntax_problem

EXIT_OK: Final = 0
EXIT_INVALID: Final = 2
DEFINITION_FILE_BYTES_MAX: Final = 256 * 1024  # a 64 KiB definition, escaped, fits
NEXT_SHOWN: Final = 3


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("schedule", help="check schedule definitions offline")
    tools = parser.add_subparsers(dest="schedule_command", metavar="ACTION")
    tools.required = True
    check = tools.add_parser(
        "check",
        help="validate a definition file, reporting every problem at once",
        description="Validate a schedule definition offline with the runner's rules. Exit 0 "
        "and print the normalized definition (defaults written out), or exit 2 and print every "
        "problem with its field path.",
    )
    check.add_argument("file", metavar="FILE", help="the definition JSON file")
    check.add_argument("--json", action="store_true", help="print one JSON document")
    check.add_argument("--limits", metavar="FILE", help="a JSON file with the runner's limits")
    check.set_defaults(func=run_check)


def looks_like_definition(document: Any) -> bool:
    """A definition (or a create command) rather than a runner/worker config."""
    if isinstance(document, dict) and document.get("action") == "create":
        document = document.get("definition")
    return (
        isinstance(document, dict)
        and "code" in document
        and "cron" in document
        and "node_id" not in document
    )


def check_document(document: Any, limits: Limits) -> tuple[dict[str, Any] | None, list[list[str]]]:
    """(the normalized definition JSON or None, every problem as [path, message])."""
    if isinstance(document, dict) and document.get("action") == "create":
        document = document.get("definition", document)
    code = document.get("code") if isinstance(document, dict) else None
    # V8 parses the code (nothing runs): a syntax error with its line and column (issue 35).
    problem = syntax_problem(code) if isinstance(code, str) else None
    syntax = [["code", str(problem)]] if problem is not None else []
    try:
        parsed = parse_definition(document, limits)
    except DefinitionProblems as problems:
        return None, [[path or "$", message] for path, message in problems.problems] + syntax
    except InvalidDefinition as err:
        return None, [["$", str(err)], *syntax]
    if syntax:
        return None, syntax
    return definition_to_json(parsed), []


def _limits(path: str | None) -> Limits:
    if path is None:
        return Limits()
    value = read_json_file(path, DEFINITION_FILE_BYTES_MAX)
    if isinstance(value, dict) and "limits" in value:
        value = value["limits"]  # a whole runner config works too
    return parse_limits(value)


def run_check(args: argparse.Namespace, stdout: Any = None, stderr: Any = None) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        limits = _limits(args.limits)
        document = read_json_file(args.file, DEFINITION_FILE_BYTES_MAX)
    except (InvalidConfig, InvalidDefinition) as exc:
        problems = [[p or "$", m] for p, m in getattr(exc, "problems", [("$", str(exc))])]
        return _report(args, out, err, None, problems)
    normalized, problems = check_document(document, limits)
    return _report(args, out, err, normalized, problems)


def _next_runs(normalized: dict[str, Any]) -> list[str]:
    compiled = compile_schedule(normalized["cron"], normalized["timezone"])
    now = datetime.now(UTC).replace(microsecond=0)
    return [
        t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for t in compiled.next_fire_times(now, NEXT_SHOWN)
    ]


def _report(
    args: argparse.Namespace,
    out: Any,
    err: Any,
    normalized: dict[str, Any] | None,
    problems: list[list[str]],
) -> int:
    if args.json:
        document: dict[str, Any] = {"ok": not problems, "file": args.file, "problems": problems}
        if normalized is not None:
            summary = {k: v for k, v in normalized.items() if k != "code"}
            summary["code_bytes"] = len(normalized["code"].encode("utf-8", "surrogatepass"))
            document["definition"] = summary
            document["next_runs"] = _next_runs(normalized)
        print(json.dumps(document, indent=2, ensure_ascii=False), file=out)
        return EXIT_INVALID if problems else EXIT_OK
    if problems:
        count = len(problems)
        print(
            f"{escape(args.file)}: invalid definition ({count} problem{'s' if count > 1 else ''})",
            file=err,
        )
        for path, message in problems:
            print(f"  {escape(path)}: {escape(message)}", file=err)
        return EXIT_INVALID
    assert normalized is not None
    policy = normalized["policy"]
    print("ok", file=out)
    name = normalized.get("name")
    print(f"  name: {escape(name) if name is not None else '(none)'}", file=out)
    print(f"  cron {escape(normalized['cron'])} in {escape(normalized['timezone'])}", file=out)
    print(
        f"  policy: missed {json.dumps(policy['missed'])}, overlap {policy['overlap']}, "
        f"retry {policy['retry']['max_retries']} after {policy['retry']['delay_seconds']} s",
        file=out,
    )
    print(f"  next runs: {', '.join(_next_runs(normalized))}", file=out)
    return EXIT_OK
