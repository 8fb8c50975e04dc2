"""Live output end to end, with real processes: a voter (management and console listeners), its
worker and the engine. A script logs a line, awaits 3 s (a timer in a promise), logs another and
finishes; its FIRST line is shown by ``appliance admin output OCC --follow`` (the real CLI, a
child process) and on the console's occurrence page (headless Chromium) while the attempt is
still Running, then the second line, once each, then the result.

Each test runs the schedule twice with overlap ``Queue`` and follows the second occurrence: it is
Pending behind the first when the follower starts, so everything it shows arrived live.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.chromium import browser_context, require_chromium
from tests.console.processes import CONSOLE_TOKEN, OPERATOR_TOKEN, Voter, job, running
from tests.support import wait_for

pytestmark = pytest.mark.slow

WAIT_S = 60.0
WAIT_MS = 60_000
AWAIT_MS = 3000
FIRST, SECOND = "first line", "second line"
CODE = (
    f"console.log('{FIRST}'); "
    f"new Promise((resolve) => setTimeout(resolve, {AWAIT_MS}))"
    f".then(() => {{ console.log('{SECOND}'); return 'finished'; }})"
)
TOKEN_ENV = "LIVE_OUTPUT_OPERATOR_TOKEN"


@pytest.fixture(scope="module")
def voter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Voter]:
    root = tmp_path_factory.mktemp("live-output")
    # Yearly: it runs only when asked; Queue: a second run waits for the first.
    schedules = [job("logs-awaits-logs", CODE, cron="0 0 1 1 *", overlap="Queue")]
    with running(root, actions=False, schedules=schedules) as started:
        yield started


def state_of(voter: Voter, occurrence_id: int) -> str | None:
    for record in voter.command({"action": "list"})["occurrences"]:
        if record["id"] == occurrence_id:
            return str(record["state"])
    return None


def queued_behind_a_running_one(voter: Voter) -> int:
    """Run the schedule twice: the first runs, the second (returned) is Pending behind it."""
    ids = []
    for _ in range(2):
        reply = voter.manage({"action": "run_now", "id": 1})
        assert reply["ok"] and reply["result"]["occurrence_id"], reply
        ids.append(reply["result"]["occurrence_id"])
    assert state_of(voter, ids[1]) == "Pending"
    return int(ids[1])


def wait_terminal(voter: Voter, occurrence_id: int) -> str:
    return wait_for(
        lambda: (s := state_of(voter, occurrence_id)) not in (None, "Pending", "Running") and s,
        f"occurrence {occurrence_id} to end",
        WAIT_S,
    )


class Lines:
    """A child process's stdout, line by line as it is written."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, wanted: str, timeout_s: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line {wanted!r} in {timeout_s} s: {self.seen}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the output ended without {wanted!r}: {self.seen}")
            self.seen.append(line)
            if wanted in line:
                return line


def test_follow_prints_the_first_line_while_the_attempt_still_runs(voter: Voter) -> None:
    occurrence_id = queued_behind_a_running_one(voter)
    follower = subprocess.Popen(
        [
            sys.executable, "-m", "appliance", "admin", "output", str(occurrence_id), "--follow",
            "--addr", f"127.0.0.1:{voter.management_port}", "--token-env", TOKEN_ENV,
        ],
        env={**os.environ, TOKEN_ENV: OPERATOR_TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        lines = Lines(follower)
        assert lines.until(FIRST) == FIRST + "\n"
        assert state_of(voter, occurrence_id) == "Running"  # printed before the attempt ended
        assert not any(SECOND in line for line in lines.seen)
        lines.until(f"-- occurrence {occurrence_id} is Succeeded")
        assert follower.wait(WAIT_S) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(WAIT_S)
    printed = "".join(lines.seen)
    assert printed.startswith(f"{FIRST}\n{SECOND}\n"), printed  # each line once, in order
    assert printed.count(FIRST) == 1 and printed.count(SECOND) == 1
    assert '-- value: "finished"' in printed


@pytest.fixture(scope="module")
def chromium(voter: Voter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_chromium()
    with browser_context(tmp_path_factory.mktemp("chromium-live-output"), WAIT_MS) as context:
        yield context


def test_the_occurrence_page_shows_the_first_line_while_the_attempt_still_runs(
    voter: Voter, chromium: Any
) -> None:
    page = chromium.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    origin = voter.console().origin
    page.goto(origin + "/")
    page.fill("#token", CONSOLE_TOKEN)
    page.click("#login-token")
    page.wait_for_selector("h1:has-text('Overview')")

    occurrence_id = queued_behind_a_running_one(voter)
    page.goto(origin + f"/occurrences/{occurrence_id}")
    page.wait_for_selector("#live-status.on")  # its event stream is open
    page.evaluate("window.liveOutputMark = 42")  # survives only as long as the document
    page.wait_for_selector(f"#output-live:has-text('{FIRST}')")
    shown = page.locator("#output-live").inner_text()
    assert state_of(voter, occurrence_id) == "Running", shown  # shown before the attempt ended
    assert SECOND not in shown
    page.wait_for_selector(f"#output-live:has-text('{SECOND}')")
    # The size shown follows the text while it runs (here before or after the final reload).
    assert page.locator("#output-live-count").inner_text() == f"{len(FIRST + SECOND) + 2} bytes"
    assert wait_terminal(voter, occurrence_id) == "Succeeded"
    page.wait_for_selector("h1 .state-succeeded")
    page.wait_for_selector("pre.value:has-text('finished')")  # the final report
    assert page.locator("#output-live").inner_text() == f"{FIRST}\n{SECOND}\n"  # once each
    assert page.locator("#output-live-count").inner_text() == f"{len(FIRST + SECOND) + 2} bytes"
    assert page.evaluate("window.liveOutputMark") == 42  # pushed, never reloaded
    assert errors == []
    page.close()
