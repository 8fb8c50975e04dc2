"""V8 parses a definition's code without running it (appliance/engine/syntax.py, issue 35)."""

from __future__ import annotations

import json

import pytest

from appliance.engine.syntax import syntax_problem
from tests.runner.harness import Voter, definition


@pytest.mark.parametrize(
    ("code", "line", "column", "message"),
    [
        ("console.log(1", 1, 13, "missing ) after argument list"),
        ("var a = 1;\nlet b = ;\n", 2, 9, "Unexpected token ';'"),
        ("  foo(\n  bar(\n", 3, 1, "Unexpected end of input"),
        ("return 5", 1, 1, "Illegal return statement"),  # a global script, as the engine runs it
        ("'use strict'; with (a) {}", 1, 15, "Strict mode code may not include a with"),
        ('// a comment\n"use strict";\nvar x = 010;', 3, 9, "Octal literals"),
    ],
)
def test_a_syntax_error_is_found_with_its_line_and_column(
    code: str, line: int, column: int, message: str
) -> None:
    problem = syntax_problem(code)
    assert problem is not None
    assert (problem.line, problem.column) == (line, column)
    assert message in problem.message and problem.message.startswith("SyntaxError")


@pytest.mark.parametrize(
    "code",
    [
        "console.log('ok')",
        "let x = 1; x",  # twice: every check is a fresh isolate, never a redeclaration
        "let x = 1; x",
        "const end = Date.now() + 60000; while (Date.now() < end) {}",  # parsed, never run
        "throw new Error('boom')",
        "new Promise((resolve) => setTimeout(resolve, 10))",
        "var x = 010;",  # sloppy mode: fine
    ],
)
def test_valid_code_parses_and_never_runs(code: str) -> None:
    assert syntax_problem(code) is None


def test_create_and_update_with_a_syntax_error_are_refused_before_anything_is_proposed() -> None:
    with Voter() as v:
        bad = {**definition("bad"), "code": "console.log(1"}
        applied_before = v.machine.applied_index
        reply = v.command(json.dumps({"action": "create", "definition": bad}))
        assert reply["ok"] is False and reply["status"] == 400
        assert reply["error"]["code"] == "invalid_definition"
        assert reply["error"]["field"] == "definition.code"
        assert (reply["error"]["line"], reply["error"]["column"]) == (1, 13)
        assert "line 1, column 13" in reply["error"]["message"]
        assert v.machine.applied_index == applied_before  # nothing reached the log
        sid = v.command(json.dumps({"action": "create", "definition": definition("good")}))["id"]
        reply = v.command(json.dumps({"action": "update", "id": sid, "code": "if (x {"}))
        assert reply["status"] == 400 and reply["error"]["field"] == "code"
        code = v.machine.read(lambda st: st.schedules[sid].definition.code)
        assert code == "console.log(1)"
