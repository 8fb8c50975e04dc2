"""Admission fallback against real local HTTP servers: only 409 or a refused connection moves on.

The ``AdmissionClient`` is driven in-process against real loopback servers (fast), then the same
rules are shown end to end through a real worker process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.credentials import Secret
from appliance.config.urls import parse_origin
from appliance.http import HttpClient
from appliance.worker.admission import AdmissionClient
from appliance.worker.wire import parse_exec
from tests.worker.peers import (
    ADMISSION_TOKEN,
    closed_port,
    exec_body,
    execution_id,
    running_worker,
)

INCARNATION = "incarnation-test-1"


def ask(urls: list[str], occurrence_id: int = 1):
    client = HttpClient(read_timeout_ms=5_000)
    try:
        admission = AdmissionClient(
            tuple(parse_origin(url) for url in urls), Secret(ADMISSION_TOKEN), INCARNATION, client
        )
        request = parse_exec(exec_body("1", occurrence_id=occurrence_id))
        return admission.request_permit(request.binding, request.document)
    finally:
        client.close()


def test_409_moves_on_to_the_next_url(peers) -> None:
    not_owner, owner = peers("409"), peers("grant")
    result = ask([not_owner.url, owner.url])
    assert result.kind == "granted"
    assert result.permit is not None and result.permit["incarnation"] == INCARNATION
    assert len(not_owner.requests) == 1 and len(owner.requests) == 1
    assert [a.outcome for a in result.attempts] == ["409", "granted"]


def test_the_next_request_starts_at_the_url_that_last_answered_as_the_owner(peers) -> None:
    first, owner, third = peers("409"), peers("grant"), peers("409")
    client = HttpClient(read_timeout_ms=5_000)
    admission = AdmissionClient(
        tuple(parse_origin(p.url) for p in (first, owner, third)),
        Secret(ADMISSION_TOKEN),
        INCARNATION,
        client,
    )
    try:

        def permit(occurrence_id: int) -> list[str]:
            request = parse_exec(exec_body("1", occurrence_id=occurrence_id))
            result = admission.request_permit(request.binding, request.document)
            assert result.kind == "granted"
            return [a.url for a in result.attempts]

        assert permit(1) == [first.url, owner.url]
        assert permit(2) == [owner.url]  # no 409 round trip on the way to the owner
        owner.mode, third.mode = "409", "grant"  # ownership moved to the third voter
        assert permit(3) == [owner.url, third.url]
        assert permit(4) == [third.url]
        # Each request still asks every URL at most once, in the configured cycle.
        assert (len(first.requests), len(owner.requests), len(third.requests)) == (1, 3, 2)
    finally:
        client.close()


def test_a_refused_connection_moves_on_to_the_next_url(peers) -> None:
    owner = peers("grant")
    result = ask([f"http://127.0.0.1:{closed_port()}", owner.url])
    assert result.kind == "granted"
    assert [a.outcome for a in result.attempts] == ["connect_failed", "granted"]


@pytest.mark.parametrize(
    ("mode", "kind", "outcome"),
    [
        ("drop", "uncertain", "ambiguous"),  # the request was sent, the connection then dropped
        ("500", "uncertain", "status_500"),
        ("403", "refused", "403"),
    ],
)
def test_an_ambiguous_send_or_any_other_status_stops_without_trying_the_next_url(
    peers, mode: str, kind: str, outcome: str
) -> None:
    first, never_asked = peers(mode), peers("grant")
    result = ask([first.url, never_asked.url])
    assert result.kind == kind
    assert result.permit is None
    assert len(first.requests) == 1
    assert never_asked.requests == []
    assert [a.outcome for a in result.attempts] == [outcome]


def test_when_every_url_answers_409_or_is_unreachable_no_permit_exists(peers) -> None:
    result = ask([peers("409").url, f"http://127.0.0.1:{closed_port()}"])
    assert result.kind == "unavailable"
    assert [a.outcome for a in result.attempts] == ["409", "connect_failed"]


def test_a_grant_for_another_incarnation_is_not_a_usable_permit(peers) -> None:
    peer = peers("grant")
    original = peer._answer

    def wrong_incarnation(mode, document):
        status, answer = original(mode, document)
        answer["permit"]["incarnation"] = "someone-else"
        return status, answer

    peer._answer = wrong_incarnation
    result = ask([peer.url])
    assert result.kind == "uncertain"


def test_every_permit_request_uses_a_fresh_connection(peers) -> None:
    peer = peers("grant")
    ask([peer.url], occurrence_id=1)
    ask([peer.url], occurrence_id=2)
    assert peer.log.connections == [1, 2]


def test_the_worker_falls_back_on_409_and_refused_connections_then_launches(
    tmp_path: Path, peers
) -> None:
    not_owner, owner = peers("409"), peers("grant")
    urls = [not_owner.url, f"http://127.0.0.1:{closed_port()}", owner.url]
    with running_worker(tmp_path, urls) as worker:
        assert worker.exec(exec_body("1", occurrence_id=1)).status == 202
        assert worker.wait_terminal(execution_id(1))["status"] == "completed"
    assert len(not_owner.requests) == 1 and len(owner.requests) == 1


def test_the_worker_stops_and_records_why_on_an_ambiguous_send_or_a_refusal(
    tmp_path: Path, peers
) -> None:
    dropper, refuser, never_asked = peers("drop"), peers("403"), peers("grant")
    with running_worker(tmp_path / "a", [dropper.url, never_asked.url]) as worker:
        answer = worker.exec(exec_body("1", occurrence_id=1))
        assert answer.status == 503
        assert answer.json()["error"]["code"] == "admission_uncertain"
        observed = worker.observe(execution_id(1)).json()
        assert observed["status"] == "fenced"
        assert "ambiguous send" in observed["fence"]["reason"]
    with running_worker(tmp_path / "b", [refuser.url, never_asked.url]) as worker:
        answer = worker.exec(exec_body("1", occurrence_id=1))
        assert answer.status == 403
        assert answer.json()["error"]["code"] == "admission_refused"
        assert worker.observe(execution_id(1)).json()["status"] == "fenced"
    assert never_asked.requests == []
