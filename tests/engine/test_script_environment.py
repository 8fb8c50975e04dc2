"""SPEC §7: what a script sees, and how its completion becomes a report."""

from __future__ import annotations

from collections.abc import Callable

from appliance.engine import Engine, ExecutionStatus
from appliance.engine.model import REASON_EXCEPTION

from .conftest import SCHEDULED, run


def test_console_methods_are_captured_in_order_with_levels(engine: Engine) -> None:
    report = run(
        engine,
        "console.log('plain', 1, {a: [1, 2]}); console.info('info');"
        "console.warn('careful'); console.error(new Error('bad')); 'ok'",
    )
    assert report.status is ExecutionStatus.COMPLETED
    lines = report.output.splitlines()
    assert lines[:3] == ['plain 1 {"a":[1,2]}', "info", "[warn] careful"]
    assert lines[3] == "[error] Error: bad"
    assert report.output_truncated is False


def test_output_exactly_at_the_limit_is_kept_whole(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(output_limit_bytes=16)
    report = run(engine, "console.log('x'.repeat(15))")  # 15 bytes + newline = 16
    assert report.output == "x" * 15 + "\n"
    assert report.output_truncated is False


def test_output_one_byte_over_the_limit_is_truncated(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(output_limit_bytes=16)
    report = run(engine, "console.log('x'.repeat(16)); console.log('never seen')")
    assert report.output == "x" * 16
    assert report.output_truncated is True
    assert report.status is ExecutionStatus.COMPLETED


def test_truncation_never_splits_a_multibyte_character(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(output_limit_bytes=7)
    report = run(engine, "console.log('ab\u00e9\U0001f600cd')")  # a b é(2) 😀(4) ...
    assert report.output == "ab\u00e9"
    assert len(report.output.encode("utf-8")) <= 7
    assert report.output_truncated is True


def test_huge_single_log_line_is_bounded_quickly(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(output_limit_bytes=1024)
    report = run(engine, "for (let i = 0; i < 50; i++) console.log('y'.repeat(1e6)); 'done'")
    assert report.result == "done"
    assert len(report.output.encode()) == 1024
    assert report.output_truncated is True


def test_completion_value_is_the_result(engine: Engine) -> None:
    report = run(engine, "const x = {total: 40}; x.total += 2; ({sum: x.total, list: [1, 'a']})")
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == {"sum": 42, "list": [1, "a"]}
    assert report.error is None and report.note is None


def test_returned_promise_is_awaited(engine: Engine) -> None:
    report = run(
        engine,
        "(async () => { await null; const v = await new Promise(r => setTimeout(() => r(7), 50));"
        " console.log('after timer'); return v * 6; })()",
    )
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == 42
    assert report.output == "after timer\n"


def test_undefined_completion_is_null_without_note(engine: Engine) -> None:
    report = run(engine, "let unused = 1;")
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result is None and report.note is None


def test_non_serializable_completion_is_null_with_a_note(engine: Engine) -> None:
    report = run(engine, "10n ** 30n")
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result is None
    assert report.note is not None and "not JSON-serializable" in report.note


def test_function_completion_is_null_with_a_note(engine: Engine) -> None:
    report = run(engine, "(function f() {})")
    assert report.result is None
    assert report.note is not None and "function" in report.note


def test_result_exactly_at_the_limit_is_kept(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(result_limit_bytes=32)
    report = run(engine, "'r'.repeat(30)")  # JSON text is 32 bytes with its quotes
    assert report.result == "r" * 30


def test_result_one_byte_over_the_limit_is_null_with_a_note(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(result_limit_bytes=32)
    report = run(engine, "'r'.repeat(31)")
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result is None
    assert report.note is not None and "32 bytes" in report.note


def test_uncaught_exception_is_failed_with_message_and_stack(engine: Engine) -> None:
    report = run(
        engine, "console.log('before'); function inner() { throw new TypeError('boom') } inner();"
    )
    assert report.status is ExecutionStatus.FAILED
    assert report.reason == REASON_EXCEPTION
    assert report.error is not None
    assert report.error.startswith("TypeError: boom")
    assert "inner" in report.error  # the stack names the throwing function
    assert report.output == "before\n"  # output before the failure is kept


def test_thrown_non_error_value_is_failed_with_its_text(engine: Engine) -> None:
    report = run(engine, "throw 'plain string'")
    assert report.status is ExecutionStatus.FAILED
    assert report.error == "plain string"


def test_rejected_promise_is_failed(engine: Engine) -> None:
    report = run(engine, "Promise.reject(new RangeError('nope'))")
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and report.error.startswith("RangeError: nope")


def test_syntax_error_is_failed(engine: Engine) -> None:
    report = run(engine, "let = = 3")
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and "SyntaxError" in report.error


def test_scheduled_carries_the_binding(engine: Engine) -> None:
    report = run(engine, "scheduled")
    assert report.result == SCHEDULED.to_json()


def test_scheduled_is_deeply_frozen_and_cannot_be_replaced(engine: Engine) -> None:
    report = run(
        engine,
        """
        'use strict';
        const attempts = [];
        const tries = [
          () => { scheduled.attempt = 99; },
          () => { scheduled.extra = 1; },
          () => { globalThis.scheduled = {}; },
          () => { delete globalThis.scheduled; },
          () => { Object.defineProperty(globalThis, 'scheduled', {value: 1}); },
        ];
        for (const attempt of tries) {
          try { attempt(); attempts.push('allowed'); } catch (e) { attempts.push(e.name); }
        }
        ({attempts, frozen: Object.isFrozen(scheduled), attempt: scheduled.attempt})
        """,
    )
    assert report.result == {
        "attempts": ["TypeError"] * 5,
        "frozen": True,
        "attempt": SCHEDULED.attempt,
    }


def test_console_cannot_be_replaced(engine: Engine) -> None:
    report = run(engine, "console.log = () => {}; console = null; console.log('still captured')")
    assert report.output == "still captured\n"


def test_no_filesystem_network_or_process_globals(engine: Engine) -> None:
    report = run(
        engine,
        "['require', 'process', 'fetch', 'XMLHttpRequest', 'WebSocket', 'Deno', 'Bun', 'module',"
        " 'importScripts', 'navigator'].filter(n => typeof globalThis[n] !== 'undefined')",
    )
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == []


def test_dynamic_import_fails(engine: Engine) -> None:
    report = run(engine, "import('fs')")
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and "Not supported" in report.error


def test_static_import_is_a_syntax_error(engine: Engine) -> None:
    report = run(engine, "import fs from 'fs';")
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and "SyntaxError" in report.error


def test_each_script_gets_a_fresh_context(engine: Engine) -> None:
    # Children are reused (tests/engine/test_reuse.py); the isolate is fresh every time.
    first = run(engine, "globalThis.leak = 'secret'; 1")
    second = run(engine, "typeof leak")
    assert second.result == "undefined"
    assert first.result == 1
