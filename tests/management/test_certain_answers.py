"""Certain answers (issue 21, Build 1): a command refused deterministically answers 400/404/422 with
the core's reason on HTTP and MCP; 409 is only ``not_owner``; only a truly uncertain mutation keeps
``outcome: "uncertain"``. Against a real voter (runner loop, core, single-voter Raft)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from appliance.config.addresses import HostPort
from appliance.http import HttpClient
from appliance.management import ManagementListener, ThreadedConsumer
from appliance.management.gateway import (
    BoundedCommandQueue,
    DefinitelyRefused,
    Submitted,
    execute,
)
from appliance.management.refusals import MESSAGE_CHARS_MAX, classify, classify_reason
from appliance.management.replies import run_command
from appliance.management.wiring import runner_handler, with_leader_host
from tests.management.conftest import TOKENS
from tests.management.mcp_raw import call
from tests.management.test_real_voter import RealVoter
from tests.runner.harness import T0, Voter, definition


@pytest.fixture
def real() -> Iterator[RealVoter]:
    with Voter() as voter:
        gateway = BoundedCommandQueue()
        consumer = ThreadedConsumer(gateway, runner_handler(voter.runner)).start()
        listener = ManagementListener(
            HostPort("127.0.0.1", 0), gateway, TOKENS, voter.cfg.limits
        ).start()
        client = HttpClient(read_timeout_ms=30_000)
        try:
            yield RealVoter(voter, gateway, consumer, listener, client)
        finally:
            client.close()
            listener.stop()
            consumer.stop()


def _http(real: RealVoter, command: dict) -> tuple[int, dict]:
    response = real.request("POST", "/scheduler/v1/commands", "recovery", command)
    return response.status, response.json()


def _mcp(real: RealVoter, command: dict) -> tuple[bool, dict]:
    arguments = {k: v for k, v in command.items() if k != "action"}
    document, extra = call(f"scheduler_{command['action']}", arguments)
    response = real.request("POST", "/mcp", "recovery", document, extra)
    assert response.status == 200
    result = response.json()["result"]
    return result["isError"], json.loads(result["content"][0]["text"])


def _both(real: RealVoter, command: dict, status: int, code: str, reason: str) -> None:
    got, body = _http(real, command)
    assert got == status, body
    assert body["error"]["code"] == code and reason in body["error"]["message"]
    assert "outcome" not in body and "retry_safe" not in body
    is_error, text = _mcp(real, command)
    assert is_error is True
    assert text["status"] == status and text["error"]["code"] == code
    assert reason in text["error"]["message"]


def test_delete_of_an_id_that_names_nothing_is_404(real: RealVoter) -> None:
    _both(real, {"action": "delete", "id": 99}, 404, "no_such_schedule", "no schedule 99")
    _both(real, {"action": "disable", "id": 99}, 404, "no_such_schedule", "no schedule 99")


def test_delete_twice_is_404_the_second_time(real: RealVoter) -> None:
    created = real.voter.command(json.dumps({"action": "create", "definition": definition()}))
    status, body = _http(real, {"action": "delete", "id": created["id"]})
    assert status == 200 and body["ok"] is True
    _both(real, {"action": "delete", "id": created["id"]}, 404, "no_such_schedule", "no schedule")


def test_cancel_of_a_never_created_occurrence_is_404(real: RealVoter) -> None:
    _both(
        real, {"action": "cancel", "occurrence_id": 7}, 404, "no_such_occurrence", "never created"
    )


def test_cancel_of_a_succeeded_occurrence_is_422_naming_the_state(real: RealVoter) -> None:
    v = real.voter
    v.command(json.dumps({"action": "create", "definition": definition()}))
    v.advance_to(T0 + 60)
    v.wait_state(1, "Succeeded")
    _both(
        real,
        {"action": "cancel", "occurrence_id": 1},
        422,
        "not_allowed_in_state",
        "not allowed in state 'Succeeded'",
    )
    _both(
        real,
        {"action": "acknowledge_stopped", "occurrence_id": 1, "dispatcher_and_work_quiesced": True},
        422,
        "not_allowed_in_state",
        "'Succeeded'",
    )
    assert v.state_of(1) == "Succeeded"


def test_validation_refusals_stay_400_naming_the_field(real: RealVoter) -> None:
    bad = {**definition(), "cron": "61 * * * *"}
    status, body = _http(real, {"action": "create", "definition": bad})
    assert status == 400 and body["error"]["field"] == "definition.cron"


# ---- the classification, unit by unit ----------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "status", "code"),
    [
        ("id: no schedule 99", 404, "no_such_schedule"),
        ("occurrence_id: no occurrence 3 (retired from retention)", 404, "no_such_occurrence"),
        (
            "occurrence 3: event 'cancel' is not allowed in state 'Failed' (attempt 2)",
            422,
            "not_allowed_in_state",
        ),
        (
            "occurrence 3: acknowledge_stopped needs explicit dispatcher_and_work_quiesced: true",
            400,
            "attestation_required",
        ),
        ("schedules: limit of 64 schedules reached", 422, "schedule_limit"),
        ("checkpoint: would be 5000000 bytes, above the cap 4194304", 422, "checkpoint_full"),
        (
            "definition.policy.missed.CatchUp.cap: must be in [1, outstanding]",
            400,
            "invalid_definition",
        ),
        ("something new the core says", 422, "refused"),
    ],
)
def test_core_reasons_are_classified(reason: str, status: int, code: str) -> None:
    refusal = classify_reason(reason)
    assert (refusal.status, refusal.code, refusal.message) == (status, code, reason)


def test_a_reason_is_bounded_at_the_limit() -> None:
    assert classify_reason("x" * MESSAGE_CHARS_MAX).message == "x" * MESSAGE_CHARS_MAX
    assert len(classify_reason("x" * (MESSAGE_CHARS_MAX + 1)).message) == MESSAGE_CHARS_MAX


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": True, "id": 1},
        {"ok": False, "status": 409, "error": {"code": "not_owner", "message": "m"}},
        {
            "ok": False,
            "status": 503,
            "outcome": "uncertain",
            "retry_safe": False,
            "error": {"code": "uncertain", "message": "id: no schedule 1"},
        },
        {
            "ok": False,
            "status": 503,
            "accepted": False,
            "error": {"code": "draining", "message": "m"},
        },
        {"ok": False, "status": 400, "error": {"code": "refused"}},
    ],
)
def test_only_definite_refusals_are_classified(reply: dict) -> None:
    assert classify(reply) is None


def test_a_loop_reply_with_uncertain_outcome_stays_uncertain() -> None:
    gateway = BoundedCommandQueue()
    reply = {
        "ok": False,
        "status": 503,
        "outcome": "uncertain",
        "retry_safe": False,
        "error": {"code": "uncertain", "message": "leadership lost"},
    }

    def consume() -> None:
        submitted = gateway.take(1.0)
        assert submitted is not None
        execute(submitted, lambda command: reply)

    thread = threading.Thread(target=consume)
    thread.start()
    outcome = run_command(gateway, {"action": "delete", "id": 1}, "operator", 5.0)
    thread.join()
    assert outcome.status == 503 and outcome.body["outcome"] == "uncertain"
    assert "leadership" not in json.dumps(outcome.body)


def test_a_handler_raising_definitely_refused_completes_as_refused() -> None:
    submitted = Submitted({"action": "delete", "id": 1}, "operator")

    def handler(command: dict) -> dict:
        raise DefinitelyRefused(404, "no_such_schedule", "id: no schedule 1")

    execute(submitted, handler)
    with pytest.raises(DefinitelyRefused) as caught:
        submitted.wait(0.1)
    assert caught.value.status == 404


def test_a_definite_refusal_is_never_a_5xx_or_409() -> None:
    for status in (409, 500, 503):
        with pytest.raises(ValueError, match="400, 404 or 422"):
            DefinitelyRefused(status, "x", "y")


# ---- 409 names the owner's node id and advertise host ------------------------------------------


def test_409_names_the_owner_node_id_and_advertise_host() -> None:
    voters = {"voter-1": HostPort("10.0.0.1", 4500), "voter-2": HostPort("10.0.0.2", 4500)}
    loop_reply = {
        "ok": False,
        "status": 409,
        "error": {"code": "not_owner", "message": "m", "leader_hint": "voter-2"},
    }
    reply = with_leader_host(loop_reply, voters)
    assert reply["leader_hint"] == "voter-2" and reply["leader_host"] == "10.0.0.2"
    # an unknown hint, or no hint: nothing invented
    assert "leader_host" not in with_leader_host(
        {**loop_reply, "error": {"code": "not_owner"}}, voters
    )
    unknown = {**loop_reply, "error": {**loop_reply["error"], "leader_hint": "voter-9"}}
    assert "leader_host" not in with_leader_host(unknown, voters)
    assert with_leader_host({"ok": True}, voters) == {"ok": True}

    gateway = BoundedCommandQueue()

    def consume() -> None:
        submitted = gateway.take(1.0)
        assert submitted is not None
        execute(submitted, lambda command: reply)

    thread = threading.Thread(target=consume)
    thread.start()
    outcome = run_command(gateway, {"action": "delete", "id": 1}, "operator", 5.0)
    thread.join()
    assert outcome.status == 409
    assert outcome.body["leader_hint"] == "voter-2"
    assert outcome.body["leader_host"] == "10.0.0.2"
