"""seeds/001 "Error behavior": every status of the management error table, and redaction.

400 malformed command / missing or false attestation (before the queue, naming the field);
401 missing or invalid bearer; 403 insufficient recovery authority or an Origin header; 409 no
acquired owner; 413 transport limit; 503 queue full (accepted: false) or an uncertain outcome
after admission (outcome: "uncertain", retry_safe: false).
"""

from __future__ import annotations

import json

import pytest

from appliance.management import ManagementOptions
from tests.management.conftest import DEFINITION, TOKENS, Harness, bearer, make_harness
from tests.management.fake_runner import SECRET_PATH

COMMANDS = "/scheduler/v1/commands"


def post(h: Harness, document, role: str = "operator", **extra):
    body = document if isinstance(document, bytes | str) else json.dumps(document)
    return h.client.simulate_post(COMMANDS, headers={**bearer(role), **extra}, body=body)


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (b"{", None),
        (b"[]", None),
        (b'{"action":"status","action":"list"}', None),
        ({"action": "retry", "id": 1}, "action"),
        ({"action": "update", "id": 1}, "id"),
        ({"action": "run_now", "id": 1, "request_id": 7}, "request_id"),
        ({"action": "enable", "id": 1, "catch_up": "yes"}, "catch_up"),
        (
            {"action": "backfill", "id": 1, "start": "yesterday", "end": "2027-01-01T00:00:00Z"},
            "start",
        ),
        ({"action": "backfill", "id": 1, "start": "2027-01-01T00:00:00Z"}, "end"),
        ({"id": 1}, "action"),
        ({"action": "disable"}, "id"),
        ({"action": "disable", "id": 1, "force": True}, "force"),
        ({"action": "disable", "id": 0}, "id"),
        ({"action": "disable", "id": True}, "id"),
        ({"action": "cancel", "occurrence_id": "7"}, "occurrence_id"),
        ({"action": "status", "verbose": True}, "verbose"),
        ({"action": "create", "definition": "x"}, "definition"),
        (
            {"action": "create", "definition": {**DEFINITION, "cron": "0 0 31 2 *"}},
            "definition.cron",
        ),
        (
            {"action": "create", "definition": {**DEFINITION, "timezone": "Mars/Base"}},
            "definition.timezone",
        ),
        ({"action": "create", "definition": {**DEFINITION, "extra": 1}}, "definition.extra"),
        (
            {"action": "create", "definition": {**DEFINITION, "code": "x" * (64 * 1024 + 1)}},
            "definition.code",
        ),
    ],
)
def test_400_malformed_commands_are_rejected_before_the_queue_naming_the_field(
    harness: Harness, document, field
) -> None:
    result = post(harness, document)
    assert result.status_code == 400
    assert result.json["ok"] is False and result.json["status"] == 400
    if field is not None:
        assert result.json["error"]["field"] == field
        assert result.json["error"]["message"].startswith(field)
    assert harness.runner.executed == []
    assert len(harness.gateway) == 0


def test_400_definition_errors_never_echo_the_source(harness: Harness) -> None:
    code = "SECRET_SOURCE_" + "y" * (64 * 1024)
    result = post(harness, {"action": "create", "definition": {**DEFINITION, "code": code}})
    assert result.status_code == 400
    assert "SECRET_SOURCE" not in result.text


def test_400_missing_or_false_attestation(harness: Harness) -> None:
    for document in (
        {"action": "acknowledge_stopped", "occurrence_id": 3},
        {
            "action": "acknowledge_stopped",
            "occurrence_id": 3,
            "dispatcher_and_work_quiesced": False,
        },
    ):
        result = post(harness, document, role="recovery")
        assert result.status_code == 400
        assert result.json["error"]["code"] == "attestation_required"
    assert harness.runner.executed == []


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer wrong", "Basic abc", "bearer  "])
def test_401_missing_or_invalid_bearer(harness: Harness, header) -> None:
    headers = {} if header is None else {"Authorization": header}
    for result in (
        harness.client.simulate_get("/scheduler/v1/status", headers=headers),
        harness.client.simulate_post(COMMANDS, headers=headers, body=b"{}"),
        harness.client.simulate_post("/mcp", headers=headers, body=b"{}"),
    ):
        assert result.status_code == 401
        assert result.json == {
            "error": {"code": "unauthorized", "message": "a valid bearer credential is required"}
        }


@pytest.mark.parametrize("path", ["/scheduler/v1/status", "/scheduler/v1/schedules"])
@pytest.mark.parametrize("origin", ["http://127.0.0.1:4601", "null", "https://evil.example"])
def test_403_any_origin_header_is_refused(harness: Harness, path: str, origin: str) -> None:
    for role in ("operator", "recovery"):
        result = harness.client.simulate_get(path, headers={**bearer(role), "Origin": origin})
        assert result.status_code == 403
        assert result.json["error"]["code"] == "origin_refused"
        result = post(harness, {"action": "status"}, role=role, Origin=origin)
        assert result.status_code == 403
        result = harness.client.simulate_post(
            "/mcp", headers={**bearer(role), "Origin": origin}, body=b"{}"
        )
        assert result.status_code == 403
    assert harness.runner.executed == []


def test_401_precedes_403_origin(harness: Harness) -> None:
    result = harness.client.simulate_get("/scheduler/v1/status", headers={"Origin": "null"})
    assert result.status_code == 401


def test_403_operator_acknowledge_is_insufficient_recovery_authority(harness: Harness) -> None:
    result = post(
        harness,
        {"action": "acknowledge_stopped", "occurrence_id": 3, "dispatcher_and_work_quiesced": True},
    )
    assert result.status_code == 403
    assert result.json["error"]["code"] == "recovery_required"
    assert harness.runner.executed == []


def test_409_no_acquired_owner_names_the_leader_hint(harness: Harness) -> None:
    harness.runner.owner = False
    result = post(harness, {"action": "create", "definition": DEFINITION})
    assert result.status_code == 409
    assert result.json["error"]["code"] == "not_owner"
    assert result.json["leader_hint"] == harness.runner.leader_hint
    assert harness.runner.schedules == {}
    status = harness.client.simulate_get("/scheduler/v1/status", headers=bearer("operator"))
    assert status.status_code == 409


def test_413_declared_length_over_the_cap_is_refused_unread(harness: Harness) -> None:
    body = b"{" + b" " * (72 * 1024) + b"}"
    result = post(harness, body)
    assert result.status_code == 413
    assert result.json["error"]["code"] == "body_too_large"
    assert harness.runner.executed == []


def test_503_queue_full_reports_accepted_false(harness: Harness) -> None:
    harness.consumer.pause()
    for _ in range(64):
        harness.gateway.submit({"action": "status"}, role="operator")
    result = post(harness, {"action": "create", "definition": DEFINITION})
    assert result.status_code == 503
    assert result.json["accepted"] is False
    assert "outcome" not in result.json
    harness.consumer.resume()


@pytest.mark.parametrize(
    "failure",
    [RuntimeError(f"disk I/O error in {SECRET_PATH}/store.db"), KeyError("no schedule 9")],
)
def test_503_failure_after_admission_is_uncertain_and_redacted(harness: Harness, failure) -> None:
    harness.runner.fail_next = failure
    result = post(harness, {"action": "disable", "id": 9})
    assert result.status_code == 503
    assert result.json["outcome"] == "uncertain"
    assert result.json["retry_safe"] is False
    assert "accepted" not in result.json
    assert SECRET_PATH not in result.text and "disk" not in result.text
    assert "no schedule" not in result.text


def test_503_reply_timeout_is_uncertain_and_the_command_still_runs() -> None:
    h = make_harness(TOKENS, ManagementOptions(reply_timeout_s=0.01))
    try:
        h.consumer.pause()
        result = post(h, {"action": "create", "definition": DEFINITION})
        assert result.status_code == 503
        assert result.json["outcome"] == "uncertain"
        assert "never retry creation blindly" in result.json["error"]["message"]
        h.consumer.resume()
        assert h.consumer.wait_idle(5.0)
        assert list(h.runner.schedules) == [1]
    finally:
        h.consumer.stop()


def test_success_replies_say_what_they_mean_and_redact_source_and_paths(harness: Harness) -> None:
    created = post(harness, {"action": "create", "definition": DEFINITION})
    assert created.status_code == 200 and created.json["result"] == {"id": 1}
    occurrence = harness.runner.add_occurrence(1, "Running")
    cancel = post(harness, {"action": "cancel", "occurrence_id": occurrence})
    assert cancel.status_code == 200
    assert "intent was recorded" in cancel.json["meaning"]
    assert harness.runner.occurrences[occurrence]["state"] == "Cancelling"
    listed = harness.client.simulate_get("/scheduler/v1/schedules", headers=bearer("operator"))
    assert "stale local view" in listed.json["meaning"]
    definition = listed.json["result"]["schedules"][0]["definition"]
    assert "code" not in definition
    assert definition["code_bytes"] == len(DEFINITION["code"])
    assert DEFINITION["code"] not in listed.text
    status = harness.client.simulate_get("/scheduler/v1/status", headers=bearer("operator"))
    assert status.json["result"]["ownership"] == {"node": "n1", "epoch": 2}
    assert SECRET_PATH not in status.text


def test_unknown_paths_and_methods_are_refused_after_auth(harness: Harness) -> None:
    assert harness.client.simulate_get("/scheduler/v1/nope").status_code == 401
    hdrs = bearer("operator")
    assert harness.client.simulate_get("/scheduler/v1/nope", headers=hdrs).status_code == 404
    assert harness.client.simulate_post("/scheduler/v1/status", headers=hdrs).status_code == 405
    assert harness.client.simulate_get("/mcp", headers=hdrs).status_code == 405
