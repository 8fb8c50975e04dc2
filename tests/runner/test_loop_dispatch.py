"""The loop performs the dispatch decisions (issues 23 and 17): re-send after "not dispatched",
fence an unadmitted attempt, Unknown at once for a permit the worker fenced before consume.

The real loop, core and single-voter Raft, an injected clock, a scripted worker."""

from __future__ import annotations

import json
from typing import Any

from appliance.core import state as core
from appliance.core.binding import binding_from_json
from appliance.runner.machine import encode_command
from appliance.runner.worker_client import ExecResult, ObserveResult
from tests.runner.harness import T0, Voter, config, definition, wait_until


def create(voter: Voter, **policy: object) -> int:
    reply = voter.command(json.dumps({"action": "create", "definition": definition(**policy)}))
    assert reply["ok"] is True, reply
    return int(reply["id"])


def test_not_dispatched_re_sends_exactly_the_committed_binding_until_it_is_accepted() -> None:
    with Voter() as v:
        sent: list[dict[str, Any]] = []

        def execute(binding: dict[str, Any]) -> ExecResult:
            sent.append(binding)
            if len(sent) <= 3:
                return ExecResult("not_dispatched", code="pool_full")
            return v.worker.admit_and_accept(binding)

        v.worker.on_exec = execute
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 1  # never a new attempt
        assert len(sent) == 4 and all(b == sent[0] for b in sent)  # never a new binding
        resends = v.events("dispatch_not_dispatched")
        assert [e["sends"] for e in resends] == [1, 2, 3]
        assert [e["delay_s"] for e in resends] == sorted(e["delay_s"] for e in resends)
        assert not v.events("dispatch_fenced")
        assert "unreachable" not in [step.reason for step in record.timeline]


def test_re_sending_stops_at_the_grant_expiry_and_the_attempt_is_fenced_not_unknown() -> None:
    expiry_s = T0 + 90
    with Voter(config(expires_at="2027-01-15T08:01:30Z")) as v:
        v.worker.on_exec = lambda b: ExecResult("not_dispatched", code="engine_unavailable")
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: len(v.events("dispatch_not_dispatched")) >= 2, "re-sends")
        assert v.state_of(1) == "Running"
        v.advance_to(expiry_s)
        record = v.wait_state(1, "Pending")
        assert record.attempt == 2 and record.retries_used == 0
        # The fence is applied before the loop logs its answer: wait for the log line too.
        fenced = wait_until(lambda: v.events("dispatch_fenced"), "the fence's decision")
        assert len(fenced) == 1 and "grant expired" in fenced[0]["reason"]
        assert "engine_unavailable" in fenced[0]["reason"]
        execs = v.worker.count("exec")
        v.advance_to(expiry_s + 120)  # past the expiry nothing is claimed or sent any more
        v.runner.wake()
        assert v.worker.count("exec") == execs


def test_silence_past_the_deadline_without_a_permit_is_fenced_and_run_again() -> None:
    with Voter(config(timeout_seconds=5)) as v:

        def execute(binding: dict[str, Any]) -> ExecResult:
            if binding["attempt"] == 1:  # a worker that answered without asking for a permit
                return ExecResult("accepted", "s1-o1-a1")
            return v.worker.admit_and_accept(binding)

        v.worker.on_exec = execute
        v.worker.on_observe = lambda eid: (
            ObserveResult(None, detail="HTTP 404 unknown_execution")
            if eid.endswith("-a1")
            else ObserveResult("completed")
        )
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.count("observe") >= 1, "observation of attempt 1")
        assert v.state_of(1) == "Running"
        v.advance_to(T0 + 60 + 5 + 30 + 1)
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 2
        fenced = v.events("dispatch_fenced")
        assert len(fenced) == 1 and "unknown_execution" in fenced[0]["reason"]


def test_a_permit_the_worker_fenced_before_consume_is_unknown_at_once_naming_that_evidence():
    with Voter() as v:

        def execute(binding: dict[str, Any]) -> ExecResult:
            v.worker.admissions.append(v.runner.admit(binding, "inc-1"))  # the permit commits
            return ExecResult("uncertain", code="admission_uncertain", detail="HTTP 503")

        v.worker.on_exec = execute
        fenced_doc = {"status": "fenced", "fence": {"reason": "interrupted before consume"}}
        v.worker.on_observe = lambda eid: ObserveResult("fenced", fenced_doc)
        create(v)
        v.advance_to(T0 + 60)  # no clock advance past the deadline: Unknown at once
        record = v.wait_state(1, "Unknown")
        assert record.attempt == 1
        note = v.machine.read(lambda st: core.admission_record(st, 1)).unknown
        assert "fenced before consume" in note.reason
        assert "interrupted before consume" in note.reason
        assert "permit committed" in note.reason
        assert not v.events("dispatch_fenced")


def test_an_unadmitted_attempt_the_worker_reports_fenced_is_fenced_here_too() -> None:
    with Voter() as v:

        def execute(binding: dict[str, Any]) -> ExecResult:
            if binding["attempt"] == 1:
                return ExecResult("accepted", "s1-o1-a1")
            return v.worker.admit_and_accept(binding)

        v.worker.on_exec = execute
        fenced_doc = {"status": "fenced", "fence": {"reason": "admission uncertain: no quorum"}}
        completed = ObserveResult("completed")
        v.worker.on_observe = lambda eid: (
            ObserveResult("fenced", fenced_doc) if eid.endswith("-a1") else completed
        )
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 2
        assert "no quorum" in v.events("dispatch_fenced")[0]["reason"]


class AdmitsBeforeTheFence:
    """Replication where the worker's ``Admit`` commits just before the owner's fence: the log
    orders them, and the apply refuses the fence."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.binding: dict[str, Any] | None = None

    def propose(self, command: bytes, *, timeout_s: float) -> object:
        if b'"command":"FenceDispatch"' in command and self.binding is not None:
            admit = core.Admit(binding_from_json(self.binding), "inc-1", T0 + 61)
            self.inner.propose(encode_command(admit), timeout_s=timeout_s)  # type: ignore[attr-defined]
        return self.inner.propose(command, timeout_s=timeout_s)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_an_admit_committed_before_the_fence_wins_and_the_attempt_is_observed() -> None:
    with Voter(wrap=AdmitsBeforeTheFence) as v:
        racing: AdmitsBeforeTheFence = v.runner.replication  # type: ignore[assignment]

        def execute(binding: dict[str, Any]) -> ExecResult:
            racing.binding = binding
            return ExecResult("uncertain", detail="read timeout")

        v.worker.on_exec = execute
        v.worker.on_observe = lambda eid: ObserveResult("completed")
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 1  # the permit won: the same attempt, observed to its end
        refused = v.events("dispatch_fenced_refused")
        assert len(refused) == 1 and "permit exists" in refused[0]["reason"]
        assert not v.events("dispatch_fenced")
