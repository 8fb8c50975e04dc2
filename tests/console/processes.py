"""A real voter (``appliance runner``) with its web console and management listener, and a
real worker, on loopback; a small HTTP client that keeps the console's session cookie."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.ports import free_ports
from tests.runner.cluster import ENV, Cluster

CONSOLE_TOKEN_ENV = "RUNNER_CONSOLE_TOKEN"
CONSOLE_TOKEN = "console-token-eeeeeeeeeeeeeeee"
OPERATOR_TOKEN = ENV["RUNNER_OPERATOR_TOKEN"]
HTTP_TIMEOUT_S = 20.0


def job(name: str, code: str, cron: str = "* * * * *", overlap: str = "Skip") -> dict[str, Any]:
    return {
        "name": name,
        "code": code,
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": "Skip",
            "overlap": overlap,
            "retry": {"max_retries": 0, "delay_seconds": 0},
        },
    }


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Console:
    """A client of the console at ``port``; ``cookie`` is the session once logged in."""

    port: int
    cookie: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = {"Host": f"127.0.0.1:{self.port}", **self.extra, **(headers or {})}
        if self.cookie is not None and "Cookie" not in sent:
            sent["Cookie"] = f"appliance_console={self.cookie}"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            conn.close()

    def get(self, path: str, **headers: str) -> Reply:
        return self.request("GET", path, headers={"Accept": "text/html", **headers})

    def post_form(self, path: str, form: dict[str, str], **headers: str) -> Reply:
        return self.request(
            "POST",
            path,
            urlencode(form).encode(),
            {"Content-Type": "application/x-www-form-urlencoded", **headers},
        )

    def login(self, token: str = CONSOLE_TOKEN) -> Reply:
        reply = self.post_form("/login", {"token": token}, Origin=self.origin)
        if reply.status == 303:
            match = re.search(r"appliance_console=([^;]+)", reply.headers["Set-Cookie"])
            assert match is not None
            self.cookie = match.group(1)
        return reply

    def csrf(self, page: str = "/") -> str:
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', self.get(page).text)
        assert match is not None, "no CSRF token on the page"
        return match.group(1)


class Voter:
    """A single voter with management and console listeners, and its worker."""

    def __init__(self, root: Path, *, actions: bool, schedules: list[dict[str, Any]]) -> None:
        management_port, self.console_port = free_ports(2)
        self.management_port = management_port
        self.cluster = Cluster(
            root,
            1,
            worker=True,
            schedules=schedules,
            management_ports={"v1": management_port},
        )
        voter = self.cluster.voters["v1"]
        doc = json.loads(voter.config.read_text())
        doc["console"] = {
            "addr": f"127.0.0.1:{self.console_port}",
            "bearer_env": CONSOLE_TOKEN_ENV,
            "actions": actions,
        }
        voter.config.write_text(json.dumps(doc))

    def start(self) -> Voter:
        os.environ[CONSOLE_TOKEN_ENV] = CONSOLE_TOKEN  # the voter inherits it
        self.cluster.start()
        self.cluster.owner()
        wait_listening(self.console_port)
        return self

    def stop(self) -> None:
        self.cluster.stop()

    def console(self) -> Console:
        return Console(self.console_port)

    def manage(self, command: dict[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.management_port, timeout=30)
        try:
            conn.request(
                "POST",
                "/scheduler/v1/commands",
                json.dumps(command),
                {"Authorization": f"Bearer {OPERATOR_TOKEN}", "Content-Type": "application/json"},
            )
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def command(self, doc: dict[str, Any]) -> dict[str, Any]:
        return self.cluster.voters["v1"].command(doc)


def wait_listening(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on {port}")
        time.sleep(0.05)


@contextlib.contextmanager
def running(root: Path, *, actions: bool, schedules: list[dict[str, Any]]) -> Iterator[Voter]:
    voter = Voter(root, actions=actions, schedules=schedules)
    try:
        yield voter.start()
    except BaseException:
        print(voter.cluster.dump_logs())
        raise
    finally:
        voter.stop()
