"""The receiver of docs/external-effects.md, run against the worker's egress gate: a retry is
applied once, and a replaced owner's late request is refused."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.egress.model import EgressInvocation, FetchRequest
from tests.egress.conftest import ALLOW_ALL, make_gate, rego
from tests.ports import free_ports

PAGE = Path(__file__).resolve().parents[2] / "docs" / "external-effects.md"


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text("utf-8"), re.S)
    monkeypatch.chdir(tmp_path)  # receiver.db is created here
    namespace: dict[str, Any] = {"__name__": "receiver_example"}
    exec(compile(code, "receiver.py", "exec"), namespace)
    port = free_ports(1)[0]
    server = namespace["ThreadingHTTPServer"](("127.0.0.1", port), namespace["Receiver"])
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield namespace, port
    server.shutdown()
    server.server_close()
    namespace["db"].close()


def post(port: int, invocation: EgressInvocation, body: bytes) -> tuple[int, str]:
    gate = make_gate(rego(ALLOW_ALL))
    attempt = gate.open_attempt(invocation, time.monotonic() + 10)
    response = attempt.prepare(
        FetchRequest(f"http://127.0.0.1:{port}/hook", "POST", body=body)
    ).run()
    gate.close()
    return response.status, response.body.decode()


def test_the_documented_receiver_applies_once_and_fences_stale_owners(receiver: Any) -> None:
    namespace, port = receiver
    first = EgressInvocation("ops", 3, "nightly", 17, attempt=1, ownership_epoch=4)
    retry = EgressInvocation("ops", 3, "nightly", 17, attempt=2, ownership_epoch=4)
    later = EgressInvocation("ops", 3, "nightly", 18, attempt=1, ownership_epoch=5)
    late_old_owner = EgressInvocation("ops", 3, "nightly", 19, attempt=1, ownership_epoch=4)
    assert post(port, first, b"report 17") == (200, "applied")
    assert post(port, retry, b"report 17") == (200, "already applied")
    assert post(port, later, b"report 18") == (200, "applied")
    assert post(port, late_old_owner, b"report 19") == (409, "stale owner: refused")
    db = namespace["db"]
    assert [row[0] for row in db.execute("SELECT body FROM effects")] == [
        "report 17",
        "report 18",
    ]
    assert db.execute("SELECT key, invocation FROM applied ORDER BY key").fetchall() == [
        ("ops/3/17/1", "ops/3/17/1"),
        ("ops/3/18/1", "ops/3/18/1"),
    ]
