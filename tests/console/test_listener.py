"""The console's listener against a real voter and worker: login, sessions, bearer, headers,
escaping, the refusals before the body, the write actions and their browser checks."""

from __future__ import annotations

import http.client
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.console.guard import CSP
from tests.console.processes import (
    CONSOLE_TOKEN,
    OPERATOR_TOKEN,
    Console,
    Voter,
    job,
    running,
)
from tests.runner.cluster import ENV
from tests.support import wait_for

pytestmark = pytest.mark.slow

XSS_NAME = "<script>document.title='pwned-name'</script>"
XSS_CODE = "console.log(\"<script>document.title='pwned'</script><img src=x onerror=alert(1)>\"); 1"
SLOW_CODE = "const end = Date.now() + 20000; while (Date.now() < end) {} 'done'"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def voter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Voter]:
    root: Path = tmp_path_factory.mktemp("console-listener")
    schedules = [job(XSS_NAME, XSS_CODE), job("slow", SLOW_CODE)]
    with running(root, actions=True, schedules=schedules) as started:
        yield started


@pytest.fixture
def browser(voter: Voter) -> Console:
    console = voter.console()
    assert console.login().status == 303
    return console


def occurrences_of(voter: Voter, schedule_id: int) -> list[dict]:
    reply = voter.command({"action": "list"})
    return [o for o in reply["occurrences"] if o["schedule_id"] == schedule_id]


# ---- login, sessions, bearer ------------------------------------------------------------------


def test_without_a_session_the_root_answers_the_login_page(voter: Voter) -> None:
    reply = voter.console().get("/")
    assert reply.status == 200
    assert 'action="/login"' in reply.text and 'name="token"' in reply.text
    assert "Overview" not in reply.text


@pytest.mark.parametrize("path", ["/schedules", "/schedules/1", "/occurrences/1"])
def test_every_other_page_is_refused_without_a_session(voter: Voter, path: str) -> None:
    html = voter.console().get(path)
    assert html.status == 401 and 'action="/login"' in html.text
    script = voter.console().request("GET", path, headers={"Accept": "application/json"})
    assert script.status == 401 and script.json()["error"]["code"] == "unauthorized"


def test_logging_in_sets_an_httponly_samesite_strict_session_cookie(voter: Voter) -> None:
    console = voter.console()
    reply = console.login()
    assert reply.status == 303 and reply.headers["Location"] == "/"
    cookie = reply.headers["Set-Cookie"]
    assert cookie.startswith("appliance_console=")
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert "httponly" in flags and "samesite=strict" in flags and "path=/" in flags
    assert "secure" not in flags  # plain HTTP on loopback: Secure comes with console.tls
    assert any(flag.startswith("max-age=") for flag in flags)
    assert CONSOLE_TOKEN not in cookie
    assert console.get("/").status == 200 and "Overview" in console.get("/").text


@pytest.mark.parametrize("token", ["wrong-token", OPERATOR_TOKEN, ENV["RUNNER_WORKER_TOKEN"]])
def test_any_other_token_does_not_log_in(voter: Voter, token: str) -> None:
    console = voter.console()
    reply = console.login(token)
    assert reply.status == 401 and "Set-Cookie" not in reply.headers
    assert token not in reply.text


def test_a_script_may_use_the_console_token_as_a_bearer(voter: Voter) -> None:
    reply = voter.console().get("/schedules", Authorization=f"Bearer {CONSOLE_TOKEN}")
    assert reply.status == 200 and "slow" in reply.text


@pytest.mark.parametrize(
    "token", [OPERATOR_TOKEN, ENV["RUNNER_CLUSTER_TOKEN"], ENV["RUNNER_ADMISSION_TOKEN"], "x"]
)
def test_another_credential_as_a_bearer_is_refused(voter: Voter, token: str) -> None:
    reply = voter.console().get("/schedules", Authorization=f"Bearer {token}")
    assert reply.status == 401


def test_a_wrong_bearer_is_not_rescued_by_a_valid_cookie(browser: Console) -> None:
    assert browser.get("/schedules", Authorization="Bearer nope").status == 401


def test_logout_ends_the_session_and_a_copy_of_its_cookie(voter: Voter, browser: Console) -> None:
    copy = Console(voter.console_port, cookie=browser.cookie)
    csrf = browser.csrf()
    reply = browser.post_form("/logout", {"csrf": csrf}, Origin=browser.origin)
    assert reply.status == 303 and reply.headers["Location"] == "/login"
    assert copy.get("/schedules").status == 401


def test_logout_needs_the_csrf_token(browser: Console) -> None:
    reply = browser.post_form("/logout", {"csrf": "0" * 64}, Origin=browser.origin)
    assert reply.status == 403
    assert browser.get("/schedules").status == 200  # still logged in


# ---- headers and escaping ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/login", "/schedules", "/schedules/1", "/static/console.js", "/nowhere"]
)
def test_every_answer_carries_the_security_headers(browser: Console, path: str) -> None:
    reply = browser.get(path)
    assert (
        reply.headers["Content-Security-Policy"]
        == CSP
        == ("default-src 'self'; frame-ancestors 'none'")
    )
    assert reply.headers["Referrer-Policy"] == "no-referrer"
    assert reply.headers["X-Content-Type-Options"] == "nosniff"


def test_pages_carry_no_inline_script_or_style(browser: Console) -> None:
    for path in ("/", "/schedules", "/schedules/1"):
        text = browser.get(path).text
        assert re.findall(r"<script(?![^>]*\bsrc=)", text) == [], path
        assert " style=" not in text and "<style" not in text, path
        # Nothing is fetched from elsewhere.
        assert not re.search(r'(src|href|action)="(https?:)?//', text), path


def test_names_code_and_output_are_escaped(voter: Voter, browser: Console) -> None:
    listing = browser.get("/schedules").text
    assert "&lt;script&gt;document.title=" in listing and XSS_NAME not in listing
    schedule = browser.get("/schedules/1").text
    assert "&lt;script&gt;" in schedule and "<script>document" not in schedule
    ran = wait_for(
        lambda: next((o for o in occurrences_of(voter, 1) if o["state"] == "Succeeded"), None),
        "a finished run of the first schedule",
        WAIT_S,
    )
    page = browser.get(f"/occurrences/{ran['id']}").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<img src=x" not in page and "<script>document" not in page


def test_a_host_that_is_not_loopback_is_refused(browser: Console) -> None:
    reply = browser.get("/", Host=f"attacker.example:{browser.port}")
    assert reply.status == 421


def test_a_post_without_credentials_is_refused_before_its_body(voter: Voter) -> None:
    """The listener answers 401 from the headers alone: the 1 MiB body is never sent."""
    with socket.create_connection(("127.0.0.1", voter.console_port), timeout=10) as sock:
        sock.sendall(
            b"POST /actions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 1048576\r\n\r\n"
        )
        head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 401")


# ---- actions -----------------------------------------------------------------------------------


def run_now_form(browser: Console, schedule_id: int) -> dict[str, str]:
    page = browser.get(f"/confirm?action=run_now&id={schedule_id}").text
    fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', page))
    assert fields["action"] == "run_now" and fields["confirmed"] == "yes"
    return fields


def test_run_now_through_the_confirmation_runs_once_even_if_posted_twice(
    voter: Voter, browser: Console
) -> None:
    form = run_now_form(browser, 1)
    assert form["request_id"].startswith("console-")
    first = browser.post_form("/actions", form, Origin=browser.origin)
    assert first.status == 200 and "Done" in first.text, first.text
    again = browser.post_form("/actions", form, Origin=browser.origin)  # a double submit
    assert again.status == 200
    created = re.findall(r"&#34;occurrence_id&#34;: (\d+)", first.text)
    assert len(created) == 1, first.text
    assert re.findall(r"&#34;occurrence_id&#34;: (\d+)", again.text) == created
    assert "&#34;repeated&#34;: true" in again.text  # the checkpoint's first answer, again
    assert any(o["id"] == int(created[0]) for o in occurrences_of(voter, 1))


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"csrf": ""}, 403),
        ({"csrf": "0" * 64}, 403),
        ({"confirmed": "no"}, 400),
    ],
)
def test_a_write_without_its_browser_checks_is_refused(
    browser: Console, change: dict[str, str], status: int
) -> None:
    form = {**run_now_form(browser, 1), **change}
    assert browser.post_form("/actions", form, Origin=browser.origin).status == status


@pytest.mark.parametrize("origin", [None, "http://attacker.example", "null"])
def test_a_write_from_another_origin_is_refused(browser: Console, origin: str | None) -> None:
    form = run_now_form(browser, 1)
    headers = {} if origin is None else {"Origin": origin}
    assert browser.post_form("/actions", form, **headers).status == 403


@pytest.mark.parametrize(
    ("site", "status"), [("same-origin", 200), ("cross-site", 403), ("same-site", 403)]
)
def test_an_opaque_origin_is_judged_by_fetch_metadata(
    browser: Console, site: str, status: int
) -> None:
    """Under Referrer-Policy: no-referrer a browser posts its forms with ``Origin: null``; the
    ``Sec-Fetch-Site`` it adds (no page can set it) tells the console's own pages apart."""
    form = run_now_form(browser, 1)
    reply = browser.post_form("/actions", form, Origin="null", **{"Sec-Fetch-Site": site})
    assert reply.status == status


@pytest.mark.parametrize(
    "action",
    [
        "acknowledge_stopped",
        "renew_grant",
        "amend_remote",
        "amend_limits",
        "add_voter",
        "promote_voter",
        "remove_voter",
        "create",
        "delete",
        "update",
        "backfill",
    ],
)
def test_no_action_reaches_recovery_admin_or_other_commands(browser: Console, action: str) -> None:
    form = {
        "csrf": browser.csrf(),
        "action": action,
        "confirmed": "yes",
        "occurrence_id": "1",
    }
    reply = browser.post_form("/actions", form, Origin=browser.origin)
    assert reply.status == 400 and "run_now, enable, disable, pause, resume, cancel" in reply.text
    confirm = browser.get(f"/confirm?action={action}&occurrence_id=1")
    assert confirm.status == 400


def test_cancel_answers_cancellation_requested(voter: Voter, browser: Console) -> None:
    running_one = wait_for(
        lambda: next((o for o in occurrences_of(voter, 2) if o["state"] == "Running"), None),
        "a running slow occurrence",
        WAIT_S,
    )
    page = browser.get(f"/confirm?action=cancel&occurrence_id={running_one['id']}").text
    fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', page))
    reply = browser.post_form("/actions", fields, Origin=browser.origin)
    assert reply.status == 200 and "Cancellation requested" in reply.text
    wait_for(
        lambda: next(
            (
                o
                for o in occurrences_of(voter, 2)
                if o["id"] == running_one["id"] and o["state"] in ("Cancelled", "Succeeded")
            ),
            None,
        ),
        "the cancel confirmed by the engine",
        WAIT_S,
    )


def test_a_script_may_send_an_action_with_its_bearer(voter: Voter) -> None:
    console = voter.console()
    form = {"action": "disable", "id": "2", "confirmed": "yes"}
    reply = console.post_form("/actions", form, Authorization=f"Bearer {CONSOLE_TOKEN}")
    assert reply.status == 200
    assert (
        next(s for s in voter.command({"action": "list"})["schedules"] if s["id"] == 2)["enabled"]
        is False
    )
    again = {"action": "enable", "id": "2", "confirmed": "yes"}
    assert (
        console.post_form("/actions", again, Authorization=f"Bearer {CONSOLE_TOKEN}").status == 200
    )


def test_an_action_on_nothing_is_a_definite_refusal(browser: Console) -> None:
    form = {"csrf": browser.csrf(), "action": "disable", "id": "999", "confirmed": "yes"}
    reply = browser.post_form("/actions", form, Origin=browser.origin)
    assert reply.status == 404 and "nothing changed" in reply.text


# ---- the live view -----------------------------------------------------------------------------


def read_events(sock: socket.socket, until: bytes, timeout_s: float = WAIT_S) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    while until not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def open_stream(
    port: int, cookie: str | None = None, bearer: str | None = CONSOLE_TOKEN
) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = f"Authorization: Bearer {bearer}\r\n" if bearer else ""
    jar = f"Cookie: appliance_console={cookie}\r\n" if cookie else ""
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{jar}\r\n".encode())
    return sock


def test_events_need_a_session_or_the_bearer(voter: Voter) -> None:
    sock = open_stream(voter.console_port, bearer=None)
    with sock:
        assert read_events(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 401")


def test_a_schedule_created_through_management_is_pushed(voter: Voter) -> None:
    with open_stream(voter.console_port) as sock:
        head = read_events(sock, b"event: hello")
        assert b"200 OK" in head and b"text/event-stream" in head
        created = voter.manage({"action": "create", "definition": job("pushed", "1")})
        assert created["ok"], created
        sid = created["result"]["id"]
        news = read_events(sock, f'"kind":"schedule","id":{sid},"change":"created"'.encode())
        assert f'"id":{sid},"change":"created"'.encode() in news
    voter.manage({"action": "delete", "id": sid})


def test_streams_beyond_the_limit_get_503_and_pages_still_answer(voter: Voter) -> None:
    from appliance.console.pusher import STREAMS_MAX_DEFAULT

    def open_now() -> int:
        page = voter.console().get("/", Authorization=f"Bearer {CONSOLE_TOKEN}").text
        return int(re.search(r"Live views open on this console: (\d+) of", page)[1])  # type: ignore[index]

    wait_for(lambda: open_now() == 0, "the other tests' streams closed", WAIT_S)
    streams = []
    try:
        for _ in range(STREAMS_MAX_DEFAULT):  # every one takes a slot and holds no thread
            sock = open_stream(voter.console_port)
            assert b"200 OK" in read_events(sock, b"event: hello")
            streams.append(sock)
        with open_stream(voter.console_port) as extra:
            assert read_events(extra, b"\r\n\r\n").startswith(b"HTTP/1.1 503")
        # The listener has 8 threads and 32 streams are open: pages are still served.
        page = voter.console().get("/schedules", Authorization=f"Bearer {CONSOLE_TOKEN}")
        assert page.status == 200
        assert open_now() == STREAMS_MAX_DEFAULT
    finally:
        for sock in streams:
            sock.close()

    # Closed streams free their slots.
    def one_more() -> bool:
        with open_stream(voter.console_port) as again:
            return b"200 OK" in read_events(again, b"\r\n\r\n")

    wait_for(one_more, "a free stream slot", WAIT_S)


def test_the_management_listener_still_refuses_a_browser(voter: Voter) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", voter.management_port, timeout=10)
    conn.request(
        "GET",
        "/scheduler/v1/status",
        headers={
            "Authorization": f"Bearer {OPERATOR_TOKEN}",
            "Origin": f"http://127.0.0.1:{voter.console_port}",
        },
    )
    assert conn.getresponse().status == 403
    conn.close()
    assert json.dumps(CONSOLE_TOKEN) not in voter.cluster.dump_logs()
