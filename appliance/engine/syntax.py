"""Is this schedule's JavaScript valid syntax? V8 parses it, nothing runs (issue 35, item 5).

Theory of operation. ``console.log(1`` used to pass ``create`` and fail every minute with a
``SyntaxError``. The engine evaluates a definition's code as a global script (``harness.py``:
indirect eval), so the check compiles exactly that: a fresh V8 isolate (``mini-racer``) is given
the code behind a ``throw`` on the same line. V8 parses a whole script before it evaluates any of
it, so a syntax error is reported with its position, and valid code stops at the ``throw``
before its first statement: nothing of it runs. The position is read from V8's message (the
line number and the caret under the offending source line); the guard's width is taken off the
column of line 1. A script that opens with a ``"use strict"`` directive keeps it: the guard is
then itself strict, so strict-mode syntax errors are found too.

Every check gets its own isolate (closed at once): a script's top-level ``let``/``const`` are
declared before the ``throw``, and would make the same code a redeclaration in a reused context.
A check costs ~10 ms and is serialized by a lock. It runs where a command is accepted — the
voter's driver (``Runner.operator``, for stdin, HTTP and MCP alike) and ``admin schedule check``
— and never inside apply, which stays a pure function of state and command (SPEC §2).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Final

log = logging.getLogger("appliance.engine.syntax")

PARSE_TIMEOUT_S: Final = 5.0
PARSE_HEAP_BYTES_MAX: Final = 128 * 1024 * 1024
_GUARD_TOKEN: Final = "__appliance_parse_only__"
_GUARD: Final = f"throw {_GUARD_TOKEN!r};"
_STRICT_GUARD: Final = f"'use strict';{_GUARD}"
# A directive prologue that opens with "use strict" (after blank space and comments).
_USE_STRICT: Final = re.compile(
    r"""\A(?:\s|//[^\n]*(?:\n|\Z)|/\*.*?\*/)*(['"])use strict\1""", re.S
)
_LOCATION: Final = re.compile(r"^<anonymous>:(\d+): (SyntaxError: .*)$")
MESSAGE_CHARS_MAX: Final = 200

_lock = threading.Lock()


@dataclass(frozen=True)
class SyntaxProblem:
    """Where V8's parser stopped: 1-based line and column, and its message."""

    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.message} (line {self.line}, column {self.column})"


def syntax_problem(code: str) -> SyntaxProblem | None:
    """The first syntax error in ``code`` as V8 parses a global script, or None when it parses
    (or when V8 cannot be loaded here: then the engine's run is the only check, as before)."""
    try:
        from py_mini_racer import JSEvalException, JSParseException, MiniRacer
    except ImportError:  # pragma: no cover - mini-racer is a dependency
        return None
    guard = _STRICT_GUARD if _USE_STRICT.match(code) else _GUARD
    with _lock:
        try:
            racer = MiniRacer()
        except Exception as exc:  # the library failed to load: checking is not possible here
            log.warning("syntax check skipped: V8 is not available (%s)", exc)
            return None
        try:
            racer.set_hard_memory_limit(PARSE_HEAP_BYTES_MAX)
            racer.eval(guard + code, timeout_sec=PARSE_TIMEOUT_S)
        except JSParseException as exc:
            return _located(str(exc), len(guard))
        except JSEvalException as exc:
            if _GUARD_TOKEN in str(exc):
                return None  # parsed whole; stopped at the guard
            log.warning("syntax check inconclusive: %s", str(exc)[:MESSAGE_CHARS_MAX])
            return None
        finally:
            racer.close()
    return None  # pragma: no cover - the guard always throws


def _located(report: str, guard_chars: int) -> SyntaxProblem:
    """V8's report: ``<anonymous>:LINE: SyntaxError: ...``, the source line, a caret line."""
    lines = report.splitlines()
    match = _LOCATION.match(lines[0]) if lines else None
    if match is None:
        return SyntaxProblem(1, 1, report.strip().splitlines()[-1][:MESSAGE_CHARS_MAX])
    line = int(match.group(1))
    caret = lines[2] if len(lines) > 2 else ""
    column = caret.find("^") + 1 if "^" in caret else 1
    if line == 1:
        column = max(1, column - guard_chars)
    return SyntaxProblem(line, column, match.group(2)[:MESSAGE_CHARS_MAX])
