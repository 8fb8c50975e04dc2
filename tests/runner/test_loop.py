"""The runner loop's rules, in process: the real loop, core and single-voter Raft, an injected
clock, and a scripted worker at the network boundary.

Each test is named after the rule it proves (SPEC §1, §3, §6; issue 5 §3-§6)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from appliance.runner.worker_client import CancelResult, ExecResult, ObserveResult
from tests.runner.harness import T0, Voter, config, definition, wait_until


def create(voter: Voter, **policy: object) -> int:
    reply = voter.command(json.dumps({"action": "create", "definition": definition(**policy)}))
    assert reply["ok"] is True, reply
    return int(reply["id"])


def test_a_due_slot_is_claimed_admitted_once_dispatched_and_its_outcome_recorded() -> None:
    with Voter() as v:
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Succeeded")
        assert record.due_s == T0 + 60 and record.attempt == 1
        assert record.execution_id == "s1-o1-a1"
        assert v.worker.count("exec") == 1
        assert [status for status, _ in v.worker.admissions] == [200]
        binding = v.worker.calls[0][1]
        assert binding["owner"] == "v1" and binding["epoch"] == v.runner.epoch
        assert binding["due_time"] == "2027-01-15T08:01:00Z"


def test_the_same_incarnation_gets_the_same_permit_and_another_is_refused() -> None:
    with Voter() as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.admissions, "the first admission")
        binding = v.worker.calls[0][1]
        first = v.worker.admissions[0][1]["permit"]
        again_status, again = v.runner.admit(binding, "inc-1")
        assert again_status == 200 and again["permit"] == first and again["existing"] is True
        other_status, other = v.runner.admit(binding, "inc-2")
        assert other_status == 403 and other["error"]["code"] == "incarnation_mismatch"
        tampered = {**binding, "payload_sha256": "0" * 64}
        status, body = v.runner.admit(tampered, "inc-1")
        assert status == 403 and body["error"]["code"] == "binding_mismatch"


def test_a_committed_permit_is_answered_without_waiting_for_the_loop() -> None:
    with Voter() as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.admissions, "the first admission")
        # The worker has its answer before the loop takes the commit: wait until the loop has
        # logged it too, or the stuck stand-in below would hold the first admission's turn, and
        # the second request would sit behind it for as long as its own reply timeout.
        wait_until(lambda: v.events("admission"), "the first admission logged by the loop")
        binding = v.worker.calls[0][1]
        release = threading.Event()
        original = v.runner.owner._requests.admit_done

        def stuck(*args: object) -> None:  # the loop is busy right after the commit
            release.wait(10.0)
            original(*args)  # type: ignore[arg-type]

        v.runner.owner._requests.admit_done = stuck  # type: ignore[method-assign]
        try:
            status, body = v.runner.admit(binding, "inc-1")  # answered while the loop waits
            assert status == 200 and body["existing"] is True
        finally:
            release.set()
        wait_until(lambda: len(v.events("admission")) >= 2, "the admission logged by the loop")


def admit_then_lose_the_answer(v: Voter) -> Callable[[dict[str, Any]], ExecResult]:
    """The worker obtains its permit (committed), then the exec's answer is lost."""

    def execute(binding: dict[str, Any]) -> ExecResult:
        status, body = v.runner.admit(binding, v.worker.incarnation)
        v.worker.admissions.append((status, body))
        return ExecResult("uncertain", detail="read timeout")

    return execute


def test_an_ambiguous_dispatch_without_a_permit_is_fenced_and_claimed_again() -> None:
    with Voter() as v:
        first: list[dict[str, Any]] = []

        def execute(binding: dict[str, Any]) -> ExecResult:
            if binding["attempt"] == 1:
                first.append(binding)
                return ExecResult("uncertain", detail="ambiguous send")
            return v.worker.admit_and_accept(binding)

        v.worker.on_exec = execute
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 2 and record.retries_used == 0  # a fence spends no retry
        assert [step.reason for step in record.timeline].count("fenced_not_launched") == 1
        fenced = v.events("dispatch_fenced")
        assert [(e["attempt"], e["state"]) for e in fenced] == [(1, "Pending")]
        assert "ambiguous send" in fenced[0]["reason"]
        status, body = v.runner.admit(first[0], "inc-1")  # the late exec of attempt 1
        assert status == 403 and body["error"]["code"] == "fenced"
        assert not v.events("outcome_unknown") and v.state_of(1) != "Unknown"


def test_an_ambiguous_dispatch_after_a_committed_permit_is_unknown_and_never_dispatched_again():
    with Voter(config(timeout_seconds=5)) as v:
        v.worker.on_exec = admit_then_lose_the_answer(v)
        v.worker.on_observe = lambda eid: ObserveResult(None, detail="404")
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.count("observe") >= 1, "observation of attempt 1")
        assert v.state_of(1) == "Running"  # Unknown only once the outcome stays lost
        for minute in range(2, 5):  # later slots run; the Unknown attempt never again
            v.advance_to(T0 + 60 * minute)
            v.wait_state(minute - 1, "Unknown")
        assert [b["occurrence_id"] for kind, b in v.worker.calls if kind == "exec"] == [1, 2, 3, 4]
        assert v.record(1).attempt == 1
        assert v.machine.read(lambda st: st.counts().running) == 4  # reservations kept


def test_a_later_confirmed_outcome_resolves_unknown_with_the_real_result() -> None:
    with Voter(config(timeout_seconds=5)) as v:
        v.worker.on_exec = admit_then_lose_the_answer(v)
        done = threading.Event()
        v.worker.on_observe = lambda eid: (
            ObserveResult("completed") if done.is_set() else ObserveResult(None, detail="gone")
        )
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.count("observe") >= 1, "observation of attempt 1")
        v.advance_to(T0 + 60 + 5 + 30 + 1)
        v.wait_state(1, "Unknown")
        done.set()
        record = v.wait_state(1, "Succeeded")
        assert [step.reason for step in record.timeline][-2:] == ["unreachable", "completed"]


def test_silence_past_timeout_seconds_plus_grace_makes_the_attempt_unknown() -> None:
    with Voter(config(timeout_seconds=5)) as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.count("observe") >= 2, "observation polls")
        assert v.state_of(1) == "Running"
        v.advance_to(T0 + 60 + 5 + 30 + 1)  # timeout_seconds + OBSERVE_GRACE_S after dispatch
        record = v.wait_state(1, "Unknown")
        assert record.attempt == 1


def test_a_worker_refusal_before_any_permit_fails_the_attempt() -> None:
    with Voter() as v:
        v.worker.on_exec = lambda b: ExecResult("refused", code="binding_mismatch")
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Failed")
        assert "binding_mismatch" in (record.failure_reason or "")


def test_cancel_of_a_pending_occurrence_never_contacts_the_worker() -> None:
    with Voter() as v:
        v.worker.on_exec = lambda b: ExecResult("accepted", "x")
        v.worker.on_observe = lambda eid: ObserveResult("running")
        create(v, overlap="Queue")
        v.advance_to(T0 + 60)
        v.wait_state(1, "Running")
        v.advance_to(T0 + 120)
        v.wait_state(2, "Pending")  # queued behind occurrence 1
        reply = v.command('{"action":"cancel","occurrence_id":2}')
        assert reply["state"] == "Cancelled"
        assert v.worker.count("cancel") == 0


def test_cancel_commits_cancelling_first_and_cancelled_only_on_confirmed_stop() -> None:
    with Voter() as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")
        answers = iter([CancelResult("stopping"), CancelResult(None, detail="reset")])
        v.worker.on_cancel = lambda b: next(answers, CancelResult("stopped"))
        create(v)
        v.advance_to(T0 + 60)
        v.wait_state(1, "Running")
        wait_until(lambda: v.worker.admissions, "admission")
        reply = v.command('{"action":"cancel","occurrence_id":1}')
        assert reply["state"] == "Cancelling"
        record = v.wait_state(1, "Cancelled")
        assert v.worker.count("cancel") == 3
        assert record.timeline[-1].reason == "cancel_confirmed"


def test_a_completion_that_wins_the_cancel_race_keeps_its_real_result() -> None:
    with Voter() as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")
        v.worker.on_cancel = lambda b: CancelResult("completed", {"status": "failed"})
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.admissions, "admission")
        v.command('{"action":"cancel","occurrence_id":1}')
        record = v.wait_state(1, "Failed")
        assert record.attempt == 1


def test_fenced_before_consume_commits_the_terminal_fence_and_refuses_later_admission() -> None:
    with Voter() as v:
        held: list[dict] = []  # type: ignore[type-arg]

        answer = threading.Event()

        def hold(binding: dict) -> ExecResult:  # type: ignore[type-arg]
            held.append(binding)  # the worker reserved but has not asked for a permit yet
            answer.wait(10)
            return ExecResult("uncertain", detail="read timeout")

        v.worker.on_exec = hold
        v.worker.on_observe = lambda eid: ObserveResult(None, detail="404")
        v.worker.on_cancel = lambda b: CancelResult("fenced_before_consume")
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: held, "the exec in flight")
        v.command('{"action":"cancel","occurrence_id":1}')
        answer.set()  # the lost answer arrives after Cancelling: the cancellation decides
        v.wait_state(1, "Cancelled")
        status, body = v.runner.admit(held[0], "inc-1")
        assert status == 403 and body["error"]["code"] == "fenced"


def test_acknowledge_stopped_needs_the_attestation_and_then_abandons_unknown() -> None:
    with Voter(config(timeout_seconds=5)) as v:
        v.worker.on_exec = admit_then_lose_the_answer(v)
        v.worker.on_observe = lambda eid: ObserveResult(None, detail="HTTP 404 unknown_execution")
        create(v)
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.count("observe") >= 1, "observation of attempt 1")
        v.advance_to(T0 + 60 + 5 + 30 + 1)
        v.wait_state(1, "Unknown")
        refused = v.command(
            '{"action":"acknowledge_stopped","occurrence_id":1,'
            '"dispatcher_and_work_quiesced":false}'
        )
        assert refused["status"] == 400 and v.state_of(1) == "Unknown"
        done = v.command(
            '{"action":"acknowledge_stopped","occurrence_id":1,"dispatcher_and_work_quiesced":true}'
        )
        assert done["state"] == "Abandoned"
        assert v.machine.read(lambda st: st.counts().running) == 0
        evidence = done["evidence"]  # what the attestation was made over
        assert evidence["permit_committed"] is True and evidence["attempt"] == 1
        assert "permit committed" in evidence["unknown_reason"]
        assert "no outcome observed" in evidence["unknown_reason"]
        assert "unknown_execution" in evidence["unknown_reason"]


def test_a_clock_step_backwards_never_rearms_a_slot() -> None:
    with Voter() as v:
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        v.wait_state(1, "Succeeded")
        v.advance_to(T0 - 600)  # the clock steps back ten minutes
        v.advance_to(T0 + 61)
        v.advance_to(T0 + 120)
        v.wait_state(2, "Succeeded")
        dues = v.machine.read(lambda st: sorted(r.due_s for r in st.occurrences.values()))
        assert dues == [T0 + 60, T0 + 120]


def test_past_the_grant_expiry_nothing_is_claimed_and_admission_is_refused() -> None:
    with Voter(config(expires_at="2027-01-15T08:01:30Z")) as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        v.wait_state(1, "Running")
        wait_until(lambda: v.worker.calls, "the dispatch")  # it follows the committed claim
        binding = v.worker.calls[0][1]
        v.advance_to(T0 + 120)
        v.wait_state(2, "Pending")
        assert v.worker.count("exec") == 1
        status = v.command('{"action":"status"}')
        assert status["grant_expired"] is True
        assert status["grant_expires_at"] == "2027-01-15T08:01:30Z"
        code, _body = v.runner.admit({**binding}, "inc-9")
        assert code == 403  # the permit of inc-1 exists: another incarnation is refused


def test_status_identifies_ownership_and_list_says_it_is_a_stale_local_view() -> None:
    with Voter() as v:
        status = v.command('{"action":"status"}')
        assert status["ok"] is True
        assert status["ownership"] == {"node": "v1", "epoch": 1}
        assert status["node"] == "v1" and status["term"] >= 1
        assert status["commit_index"] >= 1
        assert "time_scale" not in status  # only shown when active
        listing = v.command('{"action":"list"}')
        assert listing["stale_local_view"] is True


def test_list_is_answered_without_the_loop() -> None:
    """``list`` is the local applied state and needs nothing of the owner: it is rendered on the
    caller's thread, so a busy (here: stopped) loop never holds it, and it never holds the loop
    (a 1,024-record list on the loop delayed every admission behind it)."""
    with Voter() as v:
        create(v)
        v.advance_to(T0 + 60)
        v.wait_state(1, "Succeeded")
        v.runner.drain_and_stop(0.0)  # the loop thread is gone; the applied state stays
        listing = v.command('{"action":"list"}')
        assert listing["ok"] is True and listing["stale_local_view"] is True
        assert [o["state"] for o in listing["occurrences"]] == ["Succeeded"]
        assert listing["counts"]["records"] == 1


def test_invalid_operator_commands_are_400_and_change_nothing() -> None:
    with Voter() as v:
        bad = definition(cron="0 0 31 2 *")
        reply = v.command(json.dumps({"action": "create", "definition": bad}))
        assert reply["ok"] is False and reply["status"] == 400
        assert v.command('{"action":"disable","id":99}')["status"] == 400
        assert v.command('{"action":"nope"}')["status"] == 400
        assert v.command('{"action":"list","extra":1}')["status"] == 400
        assert v.machine.read(lambda st: st.schedules) == {}


def test_a_confirmed_failure_retries_after_the_delay_as_the_next_attempt() -> None:
    with Voter() as v:
        outcomes = iter([ObserveResult("failed", {"reason": "boom"})])
        v.worker.on_observe = lambda eid: next(outcomes, ObserveResult("completed"))
        create(v, retry={"max_retries": 1, "delay_seconds": 30})
        v.advance_to(T0 + 60)
        wait_until(lambda: (r := v.record(1)) and r.attempt == 2, "the retry as attempt 2")
        assert v.state_of(1) == "Pending" and v.worker.count("exec") == 1
        v.advance_to(T0 + 60 + 29)
        v.advance_to(T0 + 60 + 31)  # past not-before: retry-due, claim, dispatch attempt 2
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 2 and record.retries_used == 1
        assert [b["attempt"] for kind, b in v.worker.calls if kind == "exec"] == [1, 2]


class LosesOneAnswer:
    """Replication whose first ``command`` commits but whose answer is lost (a timeout)."""

    command = ""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.lost = 0

    def propose(self, command: bytes, *, timeout_s: float) -> object:
        result = self.inner.propose(command, timeout_s=timeout_s)  # type: ignore[attr-defined]
        if f'"command":"{self.command}"'.encode() in command and not self.lost:
            self.lost += 1
            raise TimeoutError("the answer was lost")
        return result

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class LosesOneClaimAnswer(LosesOneAnswer):
    command = "ClaimOccurrence"


class LosesOneObserveAndClaimAnswer(LosesOneAnswer):
    command = "ObserveAndClaim"


def execs_of(v: Voter, occurrence_id: int) -> int:
    return [b["occurrence_id"] for kind, b in v.worker.calls if kind == "exec"].count(occurrence_id)


class RecordsCommands(LosesOneAnswer):
    """Replication that loses nothing and records the name of every proposed command."""

    def __init__(self, inner: object) -> None:
        super().__init__(inner)
        self.names: list[str] = []

    def propose(self, command: bytes, *, timeout_s: float) -> object:
        self.names.append(json.loads(command)["command"])
        return super().propose(command, timeout_s=timeout_s)


def test_the_observation_claims_what_it_created_in_the_same_commit() -> None:
    with Voter(wrap=RecordsCommands) as v:
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        v.wait_state(1, "Succeeded")
        assert [c["occurrence"] for c in v.events("claim")] == [1]
        assert execs_of(v, 1) == 1
        names = v.runner.replication.names  # type: ignore[attr-defined]
        assert "ObserveAndClaim" in names and "ClaimOccurrence" not in names


def test_a_claim_whose_commit_answer_was_lost_is_adopted_and_dispatched_once() -> None:
    # Queue with two slots at once: the observation leaves both Pending (not its only live
    # record), so the head is claimed by ClaimOccurrence, whose answer is lost.
    catch_up = {"CatchUp": {"cap": 5}}
    with Voter(wrap=LosesOneClaimAnswer) as v:
        create(v, overlap="Queue", missed=catch_up)
        v.advance_to(T0 + 120)
        wait_until(lambda: v.events("claim_uncertain"), "the uncertain claim")
        v.advance_to(T0 + 180)  # the next commit lets the loop adopt the committed claim
        for occurrence_id in (1, 2, 3):
            v.wait_state(occurrence_id, "Succeeded")
        assert execs_of(v, 1) == 1
        assert [e["occurrence"] for e in v.events("claim_adopted")] == [1]


def test_a_folded_claim_whose_commit_answer_was_lost_is_adopted_and_dispatched_once() -> None:
    with Voter(wrap=LosesOneObserveAndClaimAnswer) as v:
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        wait_until(lambda: v.events("proposal_uncertain"), "the uncertain observation")
        v.advance_to(T0 + 120)  # the next commit lets the loop adopt the committed claim
        v.wait_state(1, "Succeeded")
        v.wait_state(2, "Succeeded")
        assert execs_of(v, 1) == 1
        assert [e["occurrence"] for e in v.events("claim_adopted")] == [1]


def test_takeover_reobserves_admitted_work_and_reclaims_fenced_attempts() -> None:
    with Voter() as v:
        finished = threading.Event()
        stuck = threading.Event()

        def execute(binding: dict) -> ExecResult:  # type: ignore[type-arg]
            if binding["occurrence_id"] == 2 and binding["attempt"] == 1:
                stuck.set()  # no answer before the takeover; no permit asked
                finished.wait(10)
                return ExecResult("uncertain", detail="reset before any permit was asked")
            return v.worker.admit_and_accept(binding)

        v.worker.on_exec = execute
        v.worker.on_observe = lambda eid: (
            ObserveResult("completed") if finished.is_set() else ObserveResult("running")
        )
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.admissions, "occurrence 1 admitted")
        v.advance_to(T0 + 120)
        assert stuck.wait(10)

        v.restart()  # a new term: AcquireOwnership with epoch 2 and the takeover
        acquired = v.events("ownership_acquired")[-1]
        assert acquired["epoch"] == 2
        assert acquired["reobserve"] == [1] and acquired["fenced"] == [2]
        finished.set()
        assert v.wait_state(1, "Succeeded").attempt == 1  # re-observed, never dispatched again
        assert v.wait_state(2, "Succeeded").attempt == 2  # fenced attempt 1, claimed again
        execs = [
            (b["occurrence_id"], b["attempt"], b["epoch"]) for k, b in v.worker.calls if k == "exec"
        ]
        assert execs == [(1, 1, 1), (2, 1, 1), (2, 2, 2)]


def test_a_late_result_of_an_earlier_attempt_never_strands_the_attempt_that_replaced_it() -> None:
    """Found by the chaos suite: an observation of attempt 1 was in flight when the owner lost
    and re-took ownership in a new term; the takeover fenced attempt 1 and claimed attempt 2;
    the old observation's late answer then removed attempt 2's tracking, so attempt 2's own
    results were dropped and it stayed Running for ever."""
    from appliance.replication.base import Leadership

    with Voter() as v:
        first_observe_started = threading.Event()
        release_first_observe = threading.Event()

        def execute(binding: dict) -> ExecResult:  # type: ignore[type-arg]
            if binding["attempt"] == 1:  # a broken worker: "accepted" without any permit
                return ExecResult("accepted", "s1-o1-a1")
            return v.worker.admit_and_accept(binding)

        def observe(eid: str) -> ObserveResult:
            if eid.endswith("-a1"):
                first_observe_started.set()
                release_first_observe.wait(10)
                return ObserveResult(None, detail="unreachable")
            return ObserveResult("completed")

        v.worker.on_exec = execute
        v.worker.on_observe = observe
        create(v, overlap="Concurrent")
        v.advance_to(T0 + 60)
        assert first_observe_started.wait(10)  # attempt 1's observation is now in flight

        term = v.runner.term + 1  # the same voter leads again, in a new term
        v.runner._on_leadership(Leadership(True, term, "v1"))
        wait_until(lambda: any(e["attempt"] == 2 for e in v.events("claim")), "attempt 2 claimed")
        release_first_observe.set()  # the stale answer arrives after the replacement
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 2


def test_a_thrown_error_keeps_its_message_in_the_failure_reason() -> None:
    with Voter() as v:
        report = {"status": "failed", "reason": "uncaught exception", "error": "Error: boom"}
        v.worker.on_observe = lambda eid: ObserveResult("failed", report)
        create(v)
        v.advance_to(T0 + 60)
        record = v.wait_state(1, "Failed")
        assert record.failure_reason == "uncaught exception: Error: boom"
