"""Browser-like timers, and the one encoding rule for any text a script produces (text.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from appliance.engine import Engine, ExecutionStatus
from appliance.engine.model import ERROR_LIMIT_BYTES, REASON_EXCEPTION
from appliance.engine.protocol import encode_frame, truncate_utf8
from appliance.script_text import JSON_DEPTH_MAX, well_formed

from .conftest import run

LONE_HIGH = "'😀'.slice(0, 1)"  # '\ud83d': half of a surrogate pair


# ----- timers -------------------------------------------------------------------------------


@pytest.mark.parametrize("delay", ["0", "-5", "", "undefined", "NaN", "'x'", "Infinity", "2**32"])
def test_set_timeout_with_a_zero_negative_missing_or_odd_delay_fires(
    engine: Engine, delay: str
) -> None:
    args = f", {delay}" if delay else ""
    report = run(engine, f"new Promise(resolve => setTimeout(() => resolve('fired'){args}))")
    assert (report.status, report.result) == (ExecutionStatus.COMPLETED, "fired")


def test_set_timeout_zero_fires_asynchronously_after_the_current_code(engine: Engine) -> None:
    code = """
        new Promise(resolve => {
            const order = [];
            setTimeout(() => { order.push('timer'); resolve(order); }, 0);
            Promise.resolve().then(() => order.push('microtask'));
            order.push('sync');
        })
    """
    assert run(engine, code).result == ["sync", "microtask", "timer"]


def test_timers_fire_in_order_of_due_time_then_of_creation(engine: Engine) -> None:
    code = """
        new Promise(resolve => {
            const order = [];
            setTimeout(() => order.push('b20'), 20);
            setTimeout(() => order.push('a0'), 0);
            setTimeout(() => order.push('a0-second'), -1);
            setTimeout(() => { order.push('c20'); resolve(order); }, 20);
        })
    """
    assert run(engine, code).result == ["a0", "a0-second", "b20", "c20"]


def test_set_timeout_passes_extra_arguments_and_returns_distinct_positive_ids(
    engine: Engine,
) -> None:
    code = """
        new Promise(resolve => {
            const a = setTimeout(() => {}, 0), b = setTimeout(() => {}, 0);
            setTimeout((x, y) => resolve([x, y, a > 0, b > a]), 1, 'x', 2);
        })
    """
    assert run(engine, code).result == ["x", 2, True, True]


def test_clear_timeout_cancels_and_ignores_unknown_ids(engine: Engine) -> None:
    code = """
        new Promise(resolve => {
            const id = setTimeout(() => resolve('cancelled timer fired'), 0);
            clearTimeout(id); clearTimeout(12345); clearTimeout(undefined);
            setTimeout(() => resolve('only the second'), 5);
        })
    """
    assert run(engine, code).result == "only the second"


def test_set_interval_repeats_until_cleared(engine: Engine) -> None:
    code = """
        new Promise(resolve => {
            let ticks = 0;
            const id = setInterval(() => {
                ticks += 1;
                if (ticks === 3) { clearInterval(id); setTimeout(() => resolve(ticks), 20); }
            }, 0);
        })
    """
    assert run(engine, code).result == 3


def test_a_throwing_timer_is_logged_and_the_others_still_run(engine: Engine) -> None:
    code = """
        new Promise(resolve => {
            setTimeout(() => { throw new Error('timer boom'); }, 0);
            setTimeout(() => resolve('after'), 1);
        })
    """
    report = run(engine, code)
    assert report.result == "after"
    assert report.output.startswith("[error] Uncaught Error: timer boom")


def test_a_string_handler_is_evaluated_as_global_code(engine: Engine) -> None:
    code = """
        new Promise(resolve => { globalThis.done = resolve; setTimeout("done('from string')", 0); })
    """
    assert run(engine, code).result == "from string"


# ----- text a script produces -----------------------------------------------------------------


def test_a_lone_surrogate_result_completes_with_the_replacement_character(engine: Engine) -> None:
    report = run(engine, LONE_HIGH)
    assert (report.status, report.result) == (ExecutionStatus.COMPLETED, "\ufffd")


def test_lone_surrogates_in_keys_values_and_pairs(engine: Engine) -> None:
    code = "({ ['\\udc00k']: ['\\ud83d', '\\ud83d\\ude00', 'a\\u0000b\\u001f'] })"
    assert run(engine, code).result == {"\ufffdk": ["\ufffd", "\U0001f600", "a\x00b\x1f"]}


def test_a_logged_lone_surrogate_reaches_the_output_replaced(engine: Engine) -> None:
    report = run(engine, f"console.log({LONE_HIGH}, 'x\\u0000y'); 1")
    assert report.status is ExecutionStatus.COMPLETED
    assert report.output == "\ufffd x\x00y\n"


def test_a_thrown_lone_surrogate_is_failed_with_the_replacement_character(engine: Engine) -> None:
    report = run(engine, f"throw {LONE_HIGH} + 'tail'")
    assert (report.status, report.reason) == (ExecutionStatus.FAILED, REASON_EXCEPTION)
    assert report.error == "\ufffdtail"


def test_an_error_whose_message_and_stack_hold_lone_surrogates(engine: Engine) -> None:
    report = run(engine, "Promise.reject(new Error('bad \\udfff'))")
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and report.error.startswith("Error: bad \ufffd")


def test_megabytes_of_text_are_bounded_everywhere(make_engine: Callable[..., Engine]) -> None:
    # 1e6 lone surrogates: 3 MB of UTF-8 once replaced (JSON-escaped, 6 MB inside the child).
    engine = make_engine(output_limit_bytes=1024)
    code = "const s = '\\ud83d'.repeat(1e6); console.log(s); console.error(s); s"
    report = run(engine, code, timeout_seconds=60.0, wait_seconds=90.0)
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result is None and "exceeds" in (report.note or "")
    assert report.output_truncated and len(report.output.encode("utf-8")) <= 1024
    assert set(report.output) == {"\ufffd"}
    thrown = run(engine, "throw 'x\\ud83d'.repeat(1e6)", timeout_seconds=60.0, wait_seconds=90.0)
    assert thrown.status is ExecutionStatus.FAILED
    assert thrown.error is not None and len(thrown.error.encode("utf-8")) <= ERROR_LIMIT_BYTES
    assert thrown.error.startswith("x\ufffdx\ufffd")


def test_a_result_nested_up_to_the_depth_limit_is_kept_and_deeper_is_null_with_a_note(
    engine: Engine,
) -> None:
    def nested(depth: int) -> str:
        return f"let v = 0; for (let i = 0; i < {depth}; i++) v = [v]; v"

    kept = run(engine, nested(JSON_DEPTH_MAX))
    assert kept.status is ExecutionStatus.COMPLETED and kept.result is not None
    for depth in (JSON_DEPTH_MAX + 1, 5000):
        deep = run(engine, nested(depth))
        assert deep.status is ExecutionStatus.COMPLETED and deep.result is None
        assert deep.note is not None and f"deeper than {JSON_DEPTH_MAX}" in deep.note


@pytest.mark.parametrize(
    "patch",
    [
        "Object.prototype.toJSON = function () { return 'rewritten'; };",
        "Object.defineProperty(Object.prototype, 'output', { set(v) { throw 1; } });",
        "Object.defineProperty(Object.prototype, 'due', { set(v) { throw 1; } });",
        "Object.prototype.toJSON = () => undefined;",
    ],
)
def test_a_script_patching_object_prototype_is_still_reported(engine: Engine, patch: str) -> None:
    completed = run(engine, f"{patch} console.log('hi'); new Promise(r => setTimeout(r, 0, 7))")
    assert (completed.status, completed.result, completed.output) == (
        ExecutionStatus.COMPLETED,
        7,
        "hi\n",
    )
    thrown = run(engine, f"{patch} throw new Error('boom')")
    assert (thrown.status, thrown.reason) == (ExecutionStatus.FAILED, REASON_EXCEPTION)
    assert thrown.error is not None and thrown.error.startswith("Error: boom")


def test_the_rule_itself() -> None:
    assert well_formed("a\ud83db") == "a\ufffdb"
    assert well_formed("\udc00\ud83d") == "\ufffd\ufffd"
    assert well_formed("\ud83d\ude00") == "\U0001f600"  # a pair held as two code points
    assert well_formed("plain\x00") == "plain\x00"
    assert truncate_utf8("\ud83d" * 4, 6) == ("\ufffd\ufffd", True)  # 3 bytes each
    assert truncate_utf8("\ud83d", 3) == ("\ufffd", False)
    frame = encode_frame({"type": "done", "output": "x\ud83d"}, 1024)
    assert "x\ufffd".encode() in frame
