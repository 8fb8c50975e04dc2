"""The quickstart starts the web console and prints its URL and a one-time login link: the
nonce logs in once, by POST, and is never written to a log; the token is never printed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.quickstart.files import CREDENTIALS_FILE, read_credentials
from tests.console.processes import Console
from tests.quickstart.session import TIME_SCALE, Quickstart

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quickstart, str, str]]:
    data_dir: Path = tmp_path_factory.mktemp("qs-console") / "qs"
    qs = Quickstart(data_dir, "--time-scale", TIME_SCALE).start()
    try:
        url = qs.expect_match(r"console:\s+(http://127\.0\.0\.1:\d+/)", "the console line")[1]
        link = qs.expect_match(r"log in:\s+(http://\S+/login\?nonce=\S+)", "the login link")[1]
        yield qs, url, link
    finally:
        if qs.proc is not None and qs.proc.poll() is None:
            assert qs.interrupt() == 0, qs.transcript()


def console_of(url: str) -> Console:
    port = int(re.search(r":(\d+)/$", url)[1])  # type: ignore[index]
    return Console(port)


def test_the_banner_names_the_console_and_never_its_token(
    started: tuple[Quickstart, str, str],
) -> None:
    qs, url, link = started
    assert link.startswith(url + "login?nonce=")
    token = read_credentials(qs.data_dir / CREDENTIALS_FILE)["APPLIANCE_CONSOLE_TOKEN"]
    assert token not in "\n".join(qs.stdout_lines + qs.stderr_lines)


def test_opening_the_link_does_not_spend_it_and_one_post_logs_in_once(
    started: tuple[Quickstart, str, str],
) -> None:
    _, url, link = started
    console = console_of(url)
    nonce = link.split("nonce=", 1)[1]
    page = console.get(link.removeprefix(console.origin))
    assert page.status == 200 and f'value="{nonce}"' in page.text  # a form, not a login
    first = console.post_form("/login", {"nonce": nonce})
    assert first.status == 303 and "appliance_console=" in first.headers["Set-Cookie"]
    cookie = re.search(r"appliance_console=([^;]+)", first.headers["Set-Cookie"])[1]  # type: ignore[index]
    assert Console(console.port, cookie=cookie).get("/schedules").status == 200
    again = console.post_form("/login", {"nonce": nonce})
    assert again.status == 401 and "Set-Cookie" not in again.headers


def test_the_nonce_is_in_no_log(started: tuple[Quickstart, str, str]) -> None:
    qs, _, link = started
    nonce = link.split("nonce=", 1)[1]
    for name in ("runner.log", "worker.log"):
        path = qs.data_dir / name
        if path.exists():
            assert nonce not in path.read_text(encoding="utf-8", errors="replace"), name


def test_the_console_token_logs_in_and_the_operator_token_does_not(
    started: tuple[Quickstart, str, str],
) -> None:
    qs, url, _ = started
    credentials = read_credentials(qs.data_dir / CREDENTIALS_FILE)
    console = console_of(url)
    assert console.login(credentials["MCP_SCHEDULER_OPERATOR_TOKEN"]).status == 401
    assert console.login(credentials["APPLIANCE_CONSOLE_TOKEN"]).status == 303
    assert "hello" in console.get("/schedules").text
