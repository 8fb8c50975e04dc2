"""The quickstart's terminal: outcomes with their bounded, escaped console output."""

from __future__ import annotations

import io
import json
import threading

from appliance.quickstart.console import (
    ERROR_PREFIX,
    LINE_CHARS_MAX,
    OUTPUT_LINES_MAX,
    OUTPUT_PREFIX,
    QUEUE_LINES_MAX,
    STACK_LINES_MAX,
    VALUE_PREFIX,
    Console,
    output_lines,
    printable,
)
from appliance.runner.worker_client import ObserveResult


def _doc(text: str, truncated: bool = False) -> dict[str, object]:
    return {"status": "completed", "output": {"text": text, "truncated": truncated}}


def _event(event: str, **fields: object) -> str:
    return json.dumps({"ts": 1.0, "node": "quickstart", "event": event, **fields}) + "\n"


class FakeWorker:
    def __init__(self, text: str = "hello\n") -> None:
        self.text = text
        self.asked: list[str] = []

    def observe(self, execution_id: str) -> ObserveResult:
        self.asked.append(execution_id)
        return ObserveResult("completed", _doc(self.text))


def _run(lines: list[str], worker: FakeWorker) -> tuple[str, str]:
    log, out = io.StringIO(), io.StringIO()
    console = Console(log, out, worker.observe)
    for line in lines:
        console.write(line)
    console.close()
    return log.getvalue(), out.getvalue()


def test_exactly_the_line_limit_is_shown_whole_and_one_more_is_summarized() -> None:
    at_limit = "\n".join(f"line {i}" for i in range(OUTPUT_LINES_MAX))
    assert output_lines(_doc(at_limit)) == [f"line {i}" for i in range(OUTPUT_LINES_MAX)]
    over = at_limit + "\nline last"
    shown = output_lines(_doc(over))
    assert len(shown) == OUTPUT_LINES_MAX + 1 and shown[-1] == "… 1 more lines"


def test_a_line_at_the_character_limit_is_kept_and_one_over_is_cut() -> None:
    assert output_lines(_doc("x" * LINE_CHARS_MAX)) == ["x" * LINE_CHARS_MAX]
    assert output_lines(_doc("x" * (LINE_CHARS_MAX + 1))) == ["x" * LINE_CHARS_MAX + "…"]


def test_output_the_engine_truncated_says_so() -> None:
    assert output_lines(_doc("a", truncated=True))[-1].startswith("… (the engine truncated")


def test_control_characters_from_a_script_cannot_drive_the_terminal() -> None:
    assert printable("red \x1b[31m bell \x07 tab\tok") == "red \\x1b[31m bell \\x07 tab\tok"
    assert output_lines(_doc("\x1b]0;title\x07")) == ["\\x1b]0;title\\x07"]


def test_a_document_without_output_has_no_lines() -> None:
    assert output_lines(None) == []
    assert output_lines({"status": "running"}) == []


def test_an_outcome_is_printed_with_the_output_of_its_execution() -> None:
    worker = FakeWorker("hello from the appliance\nsecond line\n")
    log, out = _run(
        [
            _event("claim", occurrence=3, schedule=1, attempt=1, epoch=1),
            _event("dispatch_accepted", occurrence=3, attempt=1, execution_id="ex-3-1"),
            _event("outcome", occurrence=3, attempt=1, state="Succeeded"),
        ],
        worker,
    )
    assert worker.asked == ["ex-3-1"]
    assert out.splitlines() == [
        "occurrence 3 of schedule 1 attempt 1: dispatched",
        "occurrence 3 attempt 1: Succeeded",
        OUTPUT_PREFIX + "hello from the appliance",
        OUTPUT_PREFIX + "second line",
    ]
    assert len(log.splitlines()) == 3  # every decision still goes to runner.log


def test_unknown_does_not_fetch_output_but_a_later_resolution_does() -> None:
    worker = FakeWorker()
    _, out = _run(
        [
            _event("dispatch_accepted", occurrence=4, attempt=1, execution_id="ex-4-1"),
            _event("outcome", occurrence=4, attempt=1, state="Unknown", reason="no answer"),
            _event("outcome", occurrence=4, attempt=1, state="Failed"),
        ],
        worker,
    )
    assert worker.asked == ["ex-4-1"]
    assert out.splitlines() == [
        "occurrence 4 attempt 1: Unknown (no answer)",
        "occurrence 4 attempt 1: Failed",
        OUTPUT_PREFIX + "hello",
    ]


def test_an_unreadable_execution_is_reported_not_fatal() -> None:
    class Unreachable(FakeWorker):
        def observe(self, execution_id: str) -> ObserveResult:
            return ObserveResult(None, detail="connection refused")

    _, out = _run(
        [
            _event("dispatch_accepted", occurrence=5, attempt=1, execution_id="ex-5-1"),
            _event("outcome", occurrence=5, attempt=1, state="Succeeded"),
        ],
        Unreachable(),
    )
    assert out.splitlines()[-1] == OUTPUT_PREFIX + "(output not available: connection refused)"


def test_a_full_terminal_queue_drops_and_counts_instead_of_blocking_the_loop() -> None:
    entered, gate = threading.Event(), threading.Event()

    class Stuck(FakeWorker):
        def observe(self, execution_id: str) -> ObserveResult:
            entered.set()
            gate.wait(10)
            return super().observe(execution_id)

    console = Console(io.StringIO(), io.StringIO(), Stuck().observe)
    console.release()
    console.write(_event("dispatch_accepted", occurrence=1, attempt=1, execution_id="ex"))
    console.write(_event("outcome", occurrence=1, attempt=1, state="Succeeded"))
    assert entered.wait(10)
    # The printer is stuck in observe(): the queue takes exactly QUEUE_LINES_MAX more, then drops.
    for i in range(QUEUE_LINES_MAX + 5):
        console.write(_event("claim", occurrence=i, schedule=1, attempt=1))
    assert console.dropped == 5
    gate.set()
    console.close()


def test_lines_that_are_not_json_only_go_to_the_log() -> None:
    log, out = _run(["not json\n"], FakeWorker())
    assert log == "not json\n" and out == ""


def test_nothing_is_printed_before_release_so_the_banner_comes_first() -> None:
    out = io.StringIO()
    console = Console(io.StringIO(), out, FakeWorker().observe)
    console.write(_event("ownership_acquired", epoch=1))
    out.write("banner\n")
    console.release()
    console.close()
    assert out.getvalue().splitlines() == [
        "banner",
        "the voter owns the schedules (ownership epoch 1)",
    ]


class ScriptedWorker:
    def __init__(self, documents: dict[str, dict[str, object]]) -> None:
        self.documents = documents

    def observe(self, execution_id: str) -> ObserveResult:
        document = self.documents[execution_id]
        return ObserveResult(str(document["status"]), document)


def test_the_completion_value_and_a_thrown_error_are_shown_under_the_output() -> None:
    stack = "Error: boom\n" + "".join(f"    at f{i} (s.js:{i}:1)\n" for i in range(7))
    worker = ScriptedWorker(
        {
            "ex-1": {"status": "failed", "reason": "uncaught exception", "error": stack,
                     "output": {"text": "working\n"}},
            "ex-2": {"status": "completed", "result": {"answer": 42}, "output": {"text": ""}},
        }
    )  # fmt: skip
    _, out = _run(
        [
            _event("dispatch_accepted", occurrence=1, attempt=1, execution_id="ex-1"),
            _event("outcome", occurrence=1, attempt=1, state="Pending", worker_status="failed"),
            _event("dispatch_accepted", occurrence=1, attempt=2, execution_id="ex-2"),
            _event("outcome", occurrence=1, attempt=2, state="Succeeded"),
        ],
        worker,  # type: ignore[arg-type]
    )
    assert out.splitlines() == [
        "occurrence 1 attempt 1: Failed; a retry is scheduled (Pending)",
        OUTPUT_PREFIX + "working",
        ERROR_PREFIX + "Error: boom",
        *(ERROR_PREFIX + f"    at f{i} (s.js:{i}:1)" for i in range(STACK_LINES_MAX)),
        ERROR_PREFIX + "… 2 more stack lines",
        "occurrence 1 attempt 2: Succeeded",
        OUTPUT_PREFIX + "(no console output)",
        VALUE_PREFIX + '{"answer": 42}',
    ]


def test_an_escape_sequence_in_a_value_or_error_is_escaped() -> None:
    worker = ScriptedWorker(
        {
            "ex-1": {"status": "completed", "result": "\u001b[2J", "output": {"text": "x\n"}},
            "ex-2": {"status": "failed", "error": "Error: \u001b[31m", "output": {"text": ""}},
        }
    )
    _, out = _run(
        [
            _event("dispatch_accepted", occurrence=1, attempt=1, execution_id="ex-1"),
            _event("outcome", occurrence=1, attempt=1, state="Succeeded"),
            _event("dispatch_accepted", occurrence=2, attempt=1, execution_id="ex-2"),
            _event("outcome", occurrence=2, attempt=1, state="Failed"),
        ],
        worker,  # type: ignore[arg-type]
    )
    assert "\u001b" not in out
    assert VALUE_PREFIX + '"\\u001b[2J"' in out and "\\x1b[31m" in out
