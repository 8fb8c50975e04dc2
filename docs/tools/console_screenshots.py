"""Retake the screenshots of docs/console.md from a real quickstart, at real time.

Run from the repository root with the development environment (Playwright is in the ``test``
extra; Debian's ``/usr/bin/chromium`` is driven, no browser is downloaded)::

    .venv/bin/python docs/tools/console_screenshots.py [--out docs]

What it does, in order (every wait is bounded; on any failure everything started is stopped and
the temporary directory removed, and the PNGs already in ``--out`` are left as they were):

1. ``appliance quickstart --data-dir <tmp>`` runs once to write its configs, and is stopped with
   SIGINT; the runner config's ``console.actions`` is then set to ``true`` (the quickstart turns
   the console on read-only) and the quickstart is started again on the same data directory,
   which resumes its store. Its banner gives the console's URL and a one-time login link;
   ``credentials.env`` gives the management address and the operator token for ``appliance
   admin`` (no token or nonce is ever printed).
2. A few schedules an operator would recognise are created with ``appliance admin apply``, one of
   them is disabled, and some are run now, so the history and the occurrence page have content.
   The tool then waits until the demo schedule has run at its minute, and the heartbeat at two
   of its minutes (its chart then has three runs).
3. Chromium logs in with the one-time link (the page's button POSTs the nonce) and takes
   full-page screenshots, 1280 pixels wide, of the overview, the schedules, the heartbeat's
   schedule page, one of its occurrences (with console output and value) and the Run-now
   confirmation page (not confirmed). They are written to ``--out`` only once all five exist.
4. The quickstart is stopped (SIGINT, waited for) and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

from appliance.quickstart.files import (
    CREDENTIALS_FILE,
    RUNNER_FILE,
    read_credentials,
    write_private,
)

# What tests/console/chromium.py launches: Debian's Chromium, headless, nothing downloaded.
CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT: Final = {"width": 1280, "height": 900}
PAGE_WAIT_MS: Final = 30_000
BANNER_WAIT_S: Final = 120.0
STOP_WAIT_S: Final = 90.0
ADMIN_WAIT_S: Final = 60.0
# A minutely schedule's runs at its own minutes, waited for: the demo's first, the heartbeat's
# first two (with its run-now, three bars in the schedule page's chart). Up to a minute each, plus
# the time the worker takes.
SCHEDULED_RUN_WAIT_S: Final = 180.0
HEARTBEAT_RUNS_MIN: Final = 2
POLL_S: Final = 2.0
TRANSCRIPT_LINES: Final = 40
SHOTS: Final = ("overview", "schedules", "schedule", "occurrence", "confirm")
DEMO_SCHEDULE_NAME: Final = "hello"  # appliance/quickstart/files.py writes it
HEARTBEAT: Final = "heartbeat"
DISABLED: Final = "weekly-cleanup"
RUN_NOW: Final = ("nightly-report", "inventory-sync", HEARTBEAT)

NO_RETRY: Final = {"max_retries": 0, "delay_seconds": 0}
SCHEDULES: Final = [
    {
        "name": "nightly-report",
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "policy": {"missed": "RunOnce", "overlap": "Skip", "retry": NO_RETRY},
        "code": """(async () => {
  const day = scheduled.due_time.slice(0, 10);
  const orders = [42, 17, 8, 31];
  const total = orders.reduce((sum, n) => sum + n, 0);
  console.log(`daily report for ${day}: ${orders.length} regions, ${total} orders`);
  return { day, regions: orders.length, orders: total };
})()
""",
    },
    {
        "name": "inventory-sync",
        "cron": "*/5 * * * *",
        "timezone": "UTC",
        "policy": {
            "missed": "Skip",
            "overlap": "Skip",
            "retry": {"max_retries": 2, "delay_seconds": 30},
        },
        "code": """(async () => {
  const warehouses = ['berlin', 'lyon', 'leeds'];
  let items = 0;
  for (const name of warehouses) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const counted = 100 + name.length * 37;
    items += counted;
    console.log(`synced ${name}: ${counted} items`);
  }
  return { warehouses: warehouses.length, items };
})()
""",
    },
    {
        "name": HEARTBEAT,
        "cron": "* * * * *",
        "timezone": "UTC",
        "policy": {"missed": "Skip", "overlap": "Skip", "retry": NO_RETRY},
        "code": """(async () => {
  const started = Date.now();
  console.log(`heartbeat ${scheduled.occurrence_id}, due ${scheduled.due_time}`);
  await new Promise((resolve) => setTimeout(resolve, 1200)); // a short sampling window
  console.log('queue depth 0, oldest job 0 s, 3 consumers');
  return { ok: true, checked_ms: Date.now() - started };
})()
""",
    },
    {
        "name": DISABLED,
        "cron": "0 3 * * 0",
        "timezone": "Europe/Berlin",
        "policy": {"missed": "Skip", "overlap": "Skip", "retry": NO_RETRY},
        "code": """(async () => {
  const cutoff = new Date(Date.parse(scheduled.due_time) - 30 * 86400 * 1000);
  console.log(`would remove exports older than ${cutoff.toISOString().slice(0, 10)}`);
  return { removed: 0 };
})()
""",
    },
]

T = TypeVar("T")


class ToolError(Exception):
    """A step did not happen in time or answered something unexpected; the message says which."""


def wait_until(look: Callable[[], T | None], what: str, timeout_s: float) -> T:
    """``look()``'s first answer that is not None, asked every ``POLL_S`` for ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = look()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise ToolError(f"no {what} within {timeout_s:g} s")
        time.sleep(POLL_S)


def redacted(line: str) -> str:
    """A banner line without the login link's nonce (it logs in once; keep it off terminals)."""
    return re.sub(r"nonce=\S+", "nonce=…", line)


class Quickstart:
    """``appliance quickstart`` as a child process whose stdout is read line by line."""

    def __init__(self, data_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "APPLIANCE_TESTING"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appliance", "quickstart", "--data-dir", str(data_dir)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name="quickstart-out", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:  # read all its life: a full pipe would block it
            line = raw.rstrip("\n")
            self.lines.append(redacted(line))
            self._queue.put(line)
        self._queue.put(None)

    def expect(self, pattern: str, what: str) -> re.Match[str]:
        deadline = time.monotonic() + BANNER_WAIT_S
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise ToolError(
                    f"the quickstart printed no {what} within {BANNER_WAIT_S:g} s"
                ) from None
            if line is None:
                raise ToolError(f"the quickstart exited before printing {what}")
            found = re.search(pattern, line)
            if found is not None:
                return found

    def stop(self) -> int:
        """SIGINT (Ctrl-C) and its exit code; killed if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_WAIT_S)
            raise ToolError(f"the quickstart did not stop within {STOP_WAIT_S:g} s") from None

    def transcript(self) -> str:
        return "\n".join(self.lines[-TRANSCRIPT_LINES:])


@contextlib.contextmanager
def quickstart(data_dir: Path) -> Iterator[Quickstart]:
    running = Quickstart(data_dir)
    try:
        yield running
    except BaseException:
        print(f"the quickstart's last lines:\n{running.transcript()}", file=sys.stderr)
        raise
    finally:
        code = running.stop()
        if code != 0:
            print(f"the quickstart exited with {code}", file=sys.stderr)


def turn_actions_on(data_dir: Path) -> None:
    """Set ``console.actions`` in the runner config the quickstart wrote on its first run."""
    path = data_dir / RUNNER_FILE
    document = json.loads(path.read_text(encoding="utf-8"))
    console = document.get("console")
    if not isinstance(console, dict):
        raise ToolError(f"{path} has no console section")
    console["actions"] = True
    write_private(path, json.dumps(document, indent=2) + "\n")  # it stays mode 0600


class Admin:
    """``appliance admin ... --json`` with the quickstart's credentials in its environment."""

    def __init__(self, data_dir: Path) -> None:
        # credentials.env also exports APPLIANCE_MANAGEMENT_ADDR, so no --addr is needed.
        self.env = {**os.environ, **read_credentials(data_dir / CREDENTIALS_FILE)}

    def __call__(self, *args: str, stdin: str | None = None) -> Any:
        argv = [sys.executable, "-m", "appliance", "admin", *args, "--json"]
        done = subprocess.run(
            argv,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=ADMIN_WAIT_S,
            check=False,
        )
        if done.returncode != 0:
            raise ToolError(f"appliance admin {args[0]} failed: {done.stderr.strip()}")
        return json.loads(done.stdout)

    def apply(self, definition: dict[str, Any]) -> int:
        outcome = self("apply", "-", stdin=json.dumps(definition))
        return int(outcome["id"])

    def occurrences(self, schedule_id: int) -> list[dict[str, Any]]:
        reply = self("list", "occurrences", "--schedule", str(schedule_id))
        return list(reply["result"]["occurrences"])

    def schedule_id(self, name: str) -> int:
        reply = self("describe", name)
        return int(reply["schedule"]["id"])


def succeeded_at_its_minute(
    admin: Admin, schedule_id: int, run_now: set[int], count: int = 1
) -> dict[str, Any] | None:
    """The newest Succeeded occurrence of the schedule's own cron (not one run now), once it
    has at least ``count`` of them."""
    found = [
        record
        for record in admin.occurrences(schedule_id)
        if record["state"] == "Succeeded" and record["id"] not in run_now
    ]
    return found[-1] if len(found) >= count else None


def succeeded(admin: Admin, schedule_id: int, occurrence_id: int) -> bool | None:
    """True once that occurrence has Succeeded (None until then, for ``wait_until``)."""
    for record in admin.occurrences(schedule_id):
        if record["id"] == occurrence_id and record["state"] == "Succeeded":
            return True
    return None


def prepare_schedules(admin: Admin) -> tuple[int, int]:
    """Create the schedules, disable one, run some now; the heartbeat's id and a run of it."""
    ids = {definition["name"]: admin.apply(definition) for definition in SCHEDULES}
    admin("disable", str(ids[DISABLED]))
    run_now: dict[str, int] = {}
    for name in RUN_NOW:
        reply = admin("run-now", str(ids[name]))
        run_now[name] = int(reply["result"]["occurrence_id"])
    demo_id = admin.schedule_id(DEMO_SCHEDULE_NAME)
    heartbeat_id = ids[HEARTBEAT]
    started = set(run_now.values())
    waits = ((demo_id, DEMO_SCHEDULE_NAME, 1), (heartbeat_id, HEARTBEAT, HEARTBEAT_RUNS_MIN))
    for schedule_id, name, count in waits:
        print(f"waiting (at most {SCHEDULED_RUN_WAIT_S:g} s) for {count} run(s) of {name}")
        wait_until(
            lambda schedule_id=schedule_id, count=count: succeeded_at_its_minute(
                admin, schedule_id, started, count
            ),
            f"{count} run(s) of {name} at its minute",
            SCHEDULED_RUN_WAIT_S,
        )
    for name in RUN_NOW:  # every run-now has finished, so no page shows it half done
        schedule_id = ids[name]
        occurrence_id = run_now[name]
        wait_until(
            lambda schedule_id=schedule_id, occurrence_id=occurrence_id: succeeded(
                admin, schedule_id, occurrence_id
            ),
            f"finished run-now of {name}",
            ADMIN_WAIT_S,
        )
    newest = succeeded_at_its_minute(admin, heartbeat_id, set())
    assert newest is not None  # waited for above
    return heartbeat_id, int(newest["id"])


def take_screenshots(
    origin: str, login_link: str, heartbeat_id: int, occurrence_id: int, shots: Path, profile: Path
) -> None:
    from playwright.sync_api import sync_playwright  # the test extra

    errors: list[str] = []
    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
        context.set_default_timeout(PAGE_WAIT_MS)
        try:
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))

            def shot(name: str) -> None:
                page.wait_for_selector("#live-status.on")  # the live view is connected
                page.screenshot(path=str(shots / f"console-{name}.png"), full_page=True)
                print(f"took {name}")

            page.goto(login_link)
            page.click("#login-nonce")  # the POST that exchanges the nonce
            page.wait_for_selector("h1:has-text('Overview')")
            shot("overview")
            page.goto(origin + "/schedules")
            page.wait_for_selector(f"table.schedules td:has-text('{HEARTBEAT}')")
            shot("schedules")
            page.goto(f"{origin}/schedules/{heartbeat_id}")
            page.wait_for_selector("svg rect")  # the chart of recent runs
            shot("schedule")
            page.goto(f"{origin}/occurrences/{occurrence_id}")
            page.wait_for_selector("pre.output:has-text('queue depth')")
            shot("occurrence")
            page.goto(f"{origin}/schedules/{heartbeat_id}")
            page.click("a.action-run_now")
            page.wait_for_selector("h1:has-text('Confirm')")
            page.screenshot(path=str(shots / "console-confirm.png"), full_page=True)
            print("took confirm (not confirmed)")
        finally:
            context.close()
    if errors:
        raise ToolError("the pages logged JavaScript errors: " + "; ".join(errors))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="where the PNGs go (default: docs/)",
    )
    args = parser.parse_args(argv)
    if shutil.which(CHROMIUM) is None:
        print(f"{CHROMIUM} is missing (apt-get install chromium)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="console-shots-"))
    try:
        data_dir = root / "quickstart"
        print(f"first run of the quickstart in {data_dir} (writes its configs)")
        with quickstart(data_dir) as first:
            first.expect(r"console:\s+http://", "console line")
        turn_actions_on(data_dir)
        print("console.actions set to true; starting the quickstart again")
        with quickstart(data_dir) as second:
            origin = second.expect(r"console:\s+(http://127\.0\.0\.1:\d+)/", "console URL")[1]
            link = second.expect(r"log in:\s+(http://\S+/login\?nonce=\S+)", "login link")[1]
            heartbeat_id, occurrence_id = prepare_schedules(Admin(data_dir))
            shots = root / "shots"
            shots.mkdir()
            take_screenshots(
                origin, link, heartbeat_id, occurrence_id, shots, root / "chromium-profile"
            )
        args.out.mkdir(parents=True, exist_ok=True)
        for name in SHOTS:
            shutil.copyfile(shots / f"console-{name}.png", args.out / f"console-{name}.png")
        print(f"wrote {len(SHOTS)} screenshots into {args.out}")
        return 0
    except ToolError as exc:
        print(f"console_screenshots: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
