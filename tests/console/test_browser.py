"""The console in a real browser: Debian's headless Chromium driven by Playwright, against a
real voter and worker. Log in, see a schedule created through management appear, watch an
occurrence's output arrive live, press Run now, be refused without a session, and prove that a
schedule whose name and output are HTML executes nothing. Every page renders without a
JavaScript error (console errors and uncaught exceptions are collected).

docs/console.md's screenshots are not taken here (this test's data is an XSS probe on a fast
clock): docs/tools/console_screenshots.py takes them from a real quickstart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.chromium import browser_context, require_chromium
from tests.console.processes import CONSOLE_TOKEN, Voter, job, running
from tests.support import wait_for

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.slow

WAIT_MS = 30_000
WAIT_S = 60.0
XSS_NAME = "<img src=x onerror=\"window.pwned='name'\">"
XSS_CODE = (
    "console.log(\"<script>window.pwned='script'</script><img src=x onerror=\\\"window.pwned="
    "'img'\\\">\"); 'done'"
)
TICKER_CODE = (
    "for (let i = 1; i <= 3; i++) { console.log('tick ' + i); "
    "const t = Date.now() + 2000; while (Date.now() < t) {} } 'ticked'"
)


@pytest.fixture(scope="module")
def voter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Voter]:
    require_chromium()
    root = tmp_path_factory.mktemp("console-browser")
    schedules = [job(XSS_NAME, XSS_CODE), job("ticker", TICKER_CODE)]
    with running(root, actions=True, schedules=schedules) as started:
        yield started


@pytest.fixture(scope="module")
def chromium(voter: Voter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with browser_context(profile, WAIT_MS, viewport={"width": 1280, "height": 900}) as context:
        yield context


class Watched:
    """A page whose JavaScript errors, uncaught exceptions and dialogs are recorded."""

    def __init__(self, context: Any) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def watched(chromium: Any) -> Iterator[Watched]:
    page = Watched(chromium)
    yield page
    page.close()


@pytest.fixture(scope="module")
def logged_in(chromium: Any, voter: Voter) -> None:
    page = Watched(chromium)
    page.page.goto(voter.console().origin + "/")
    page.page.fill("#token", CONSOLE_TOKEN)
    page.page.click("#login-token")
    page.page.wait_for_selector("h1:has-text('Overview')")
    assert page.errors == []
    page.close()


def occurrence_of(voter: Voter, schedule_id: int, state: str) -> dict[str, Any] | None:
    for record in reversed(voter.command({"action": "list"})["occurrences"]):
        if record["schedule_id"] == schedule_id and record["state"] == state:
            return record
    return None


def mark(page: Any) -> None:
    """A value that survives only as long as the document: proves no reload happened."""
    page.evaluate("window.consoleTestMark = 42")


def still_marked(page: Any) -> bool:
    return page.evaluate("window.consoleTestMark") == 42


def test_refused_without_a_session(chromium: Any, voter: Voter) -> None:
    browser = chromium.browser
    assert browser is not None
    anonymous = browser.new_context()  # no cookie of the logged-in profile
    try:
        page = anonymous.new_page()
        response = page.goto(voter.console().origin + "/schedules")
        assert response is not None and response.status == 401
        assert page.locator("#token").count() == 1
        assert "ticker" not in page.content()
        events = page.request.get(voter.console().origin + "/events")
        assert events.status == 401
    finally:
        anonymous.close()


def test_log_in_and_every_page_renders_without_errors(
    logged_in: None, watched: Watched, voter: Voter
) -> None:
    page = watched.page
    origin = voter.console().origin
    page.goto(origin + "/")
    page.wait_for_selector("#live-status.on")  # the event stream is open
    page.goto(origin + "/schedules")
    page.wait_for_selector("table.schedules td:has-text('ticker')")
    ran = wait_for(lambda: occurrence_of(voter, 2, "Succeeded"), "a finished ticker run", WAIT_S)
    page.goto(origin + "/schedules/2")
    page.wait_for_selector("svg rect")  # the chart of recent runs
    assert page.locator("pre.code").inner_text().startswith("for (let i = 1")
    page.goto(origin + f"/occurrences/{ran['id']}")
    page.wait_for_selector("pre.output:has-text('tick 3')")
    assert "ticked" in page.locator("pre.value").inner_text()
    # Times are shown in the browser's zone, relative to now (the voter's clock runs 20 times
    # faster here, so "in 3 minutes" is as right as "3 minutes ago").
    shown = page.locator("time").first.inner_text()
    assert re.fullmatch(r".+ \((in \d+ \w+|\d+ \w+ ago|now)\)", shown), shown
    assert page.locator("time").first.get_attribute("title", timeout=WAIT_MS).endswith("Z")
    assert watched.errors == []


def test_a_schedule_created_through_management_appears_live(
    logged_in: None, watched: Watched, voter: Voter
) -> None:
    page = watched.page
    page.goto(voter.console().origin + "/schedules")
    page.wait_for_selector("#live-status.on")
    mark(page)
    created = voter.manage({"action": "create", "definition": job("appeared-live", "1")})
    assert created["ok"], created
    page.wait_for_selector("table.schedules a:has-text('appeared-live')")
    assert still_marked(page)  # pushed, not reloaded
    assert watched.errors == []
    voter.manage({"action": "delete", "id": created["result"]["id"]})


def test_an_occurrences_output_arrives_live(
    logged_in: None, watched: Watched, voter: Voter
) -> None:
    page = watched.page
    for _ in range(10):  # a page opened while its occurrence still runs (6 s each)
        running_now = wait_for(
            lambda: occurrence_of(voter, 2, "Running"), "a running ticker", WAIT_S
        )
        page.goto(voter.console().origin + f"/occurrences/{running_now['id']}")
        page.wait_for_selector("#live-status.on")
        mark(page)
        if "tick 3" not in page.locator("#output-live").inner_text():
            break
    else:
        pytest.fail("every page opened after its occurrence had ended")
    page.wait_for_selector("#output-live:has-text('tick 3')")  # pushed, then shown
    assert still_marked(page)  # no reload
    page.wait_for_selector("h1 .state-succeeded")
    assert watched.errors == []


def test_run_now_from_the_schedule_page(logged_in: None, watched: Watched, voter: Voter) -> None:
    page = watched.page
    page.goto(voter.console().origin + "/schedules/2")
    page.click("a.action-run_now")
    page.wait_for_selector("h1:has-text('Confirm')")
    page.click("#confirm")
    page.wait_for_selector("h1:has-text('Done')")
    assert "occurrence_id" in page.locator("pre.json").inner_text()
    assert watched.errors == []


def test_html_in_a_name_or_output_executes_nothing(
    logged_in: None, watched: Watched, voter: Voter
) -> None:
    page = watched.page
    origin = voter.console().origin
    ran = wait_for(lambda: occurrence_of(voter, 1, "Succeeded"), "a finished run", WAIT_S)
    for path in ("/", "/schedules", "/schedules/1", f"/occurrences/{ran['id']}"):
        page.goto(origin + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.pwned === undefined"), path
    output = page.locator("pre.output").first.inner_text()
    assert "<script>window.pwned='script'</script>" in output  # shown as text
    assert watched.dialogs == [] and watched.errors == []
