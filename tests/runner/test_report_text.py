"""``failure_reason(document)`` (the checkpoint's short text of a failed run) and ``retry_note``."""

from __future__ import annotations

import pytest

from appliance.core.occurrence import REASON_BYTES_MAX
from appliance.owner.report_text import failure_reason, retry_note


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {"status": "failed", "reason": "uncaught exception",
             "error": "Error: boom\n    at main (schedule.js:1:7)"},
            "uncaught exception: Error: boom",
        ),
        (
            {"status": "failed", "reason": "uncaught exception", "error": "TypeError: x is null"},
            "uncaught exception: TypeError: x is null",
        ),
        (
            {"status": "failed", "reason": "out of memory",
             "error": "V8 heap limit of 64 MiB reached"},
            "out of memory: V8 heap limit of 64 MiB reached",
        ),
        ({"status": "timed_out", "reason": "timeout", "error": None}, "timeout"),
        ({"status": "lost", "reason": None, "error": None}, "lost"),
        ({"status": "timed_out"}, "timed out"),
        ({"status": "failed", "reason": "uncaught exception", "error": "\n\n  "},
         "uncaught exception"),
        ({"status": "failed", "reason": "x", "error": {"name": "Error", "message": "m"}},
         "x: Error: m"),
        ({"status": "completed", "result": 1}, None),
        ({"status": "running"}, None),
        (None, None),
    ],
)  # fmt: skip
def test_failure_reason_of_a_report(document, expected) -> None:
    assert failure_reason(document) == expected


def test_failure_reason_is_one_line_and_bounded_at_the_checkpoint_limit() -> None:
    long = {"status": "failed", "reason": "uncaught exception", "error": "Error: " + "é" * 400}
    text = failure_reason(long)
    assert text is not None and "\n" not in text
    assert len(text.encode()) <= REASON_BYTES_MAX and text.endswith("…")
    exact = "Error: " + "x" * (REASON_BYTES_MAX - len("uncaught exception: Error: "))
    failed = {"status": "failed", "reason": "uncaught exception"}
    fits = failure_reason({**failed, "error": exact})
    assert fits == f"uncaught exception: {exact}" and len(fits.encode()) == REASON_BYTES_MAX
    over = failure_reason({**failed, "error": exact + "y"})
    assert over is not None and len(over.encode()) <= REASON_BYTES_MAX and over.endswith("…")


def test_retry_note() -> None:
    record = {"state": "Pending", "attempt": 2, "retries_used": 1}
    assert retry_note(record, 2, "2027-01-15T08:02:00Z") == (
        "retrying at 2027-01-15T08:02:00Z (attempt 2 of 3)"
    )
    assert retry_note(record, 2, None) == "retrying now (attempt 2 of 3)"
    # an attempt fenced as never launched spends no retry: one more attempt is allowed
    assert retry_note({**record, "attempt": 3}, 2, None) == "retrying now (attempt 3 of 4)"
    assert retry_note({**record, "retries_used": 0, "attempt": 1}, 2, None) is None
    assert retry_note({**record, "state": "Running"}, 2, None) is None
    assert retry_note(record, None, None) == "retrying now (attempt 2)"
