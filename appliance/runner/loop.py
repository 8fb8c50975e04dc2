"""The one serialized runner loop: every decision of a voter is made on one thread.

Theory of operation (SPEC §2 "One serialized runner loop", issue 5 §3-§6)
-------------------------------------------------------------------------
One bounded queue, one consumer thread. Into the queue go: leadership changes (from the Raft
driver), operator commands (stdin), admission requests (the HTTP route), and the results of
background tasks (exec, observation, cancellation). The loop wakes at least every second and
exactly at the next due instant of the pulse heap (computed on the injected, possibly scaled,
clock), and at the next internal timer (observation polls, cancellation retries).

Only the *acquired owner* schedules: after this voter becomes leader the loop runs a read barrier
(the replication layer committed the term's no-op barrier) and then commits the ownership
transition (``ownership.acquire``); only with that committed epoch does it pulse, claim and
dispatch. Leadership loss clears the epoch at once.

An observation that creates occurrences claims them in the same commit (``ObserveAndClaim``,
appliance/core/observe_claim.py) when the owner may claim: the due instant is then one commit away
from the dispatch instead of two. What the apply leaves Pending (running limit, overlap) is
claimed by ``ClaimOccurrence`` on the same pass, as before.

The loop never blocks on the worker: exec, observe and cancel run on a small thread pool whose
results come back through the queue. It does block on Raft commits (bounded by
``PROPOSE_TIMEOUT_S``), because each decision must be committed before the next one is taken
from the state it produced. A proposal whose fate is unknown (timeout) is reported as uncertain
and the owner state is re-derived from the committed state on the next pulse.

Conservatism (SPEC §1, §11): an attempt is dispatched once, and sent again only after a definite
"not dispatched" answer (the same binding). What an uncertain or unanswered dispatch becomes is
decided by ``dispatch_outcome`` from the committed state: without a committed permit the owner
commits a terminal fence (``FenceDispatch``: not launched, the next attempt follows); with a permit
it is observed, and Unknown — never retried automatically — only when its outcome stays lost at
``timeout_seconds`` + ``OBSERVE_GRACE_S`` after the last send (or the worker reports the permit's
invocation fenced before consume). An Unknown attempt is still asked about every
``UNKNOWN_POLL_S``, so a later confirmed outcome still resolves it. Cancellation commits
Cancelling before the worker is contacted; only a confirmed stop makes it Cancelled, and a
completion that won keeps its result.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from appliance.config.rfc3339 import format_utc
from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.core.calendar import compile_schedule
from appliance.core.definition import OverlapPolicy, parse_definition
from appliance.core.errors import CoreError
from appliance.core.occurrence import OccurrenceState
from appliance.core.pulse import Pulse
from appliance.replication.base import Leadership, NotLeader, ProposalLost
from appliance.runner import dispatch_outcome, ownership
from appliance.runner.binding import authority_of, execution_id, make_binding
from appliance.runner.clock import Clock
from appliance.runner.logs import DecisionLog
from appliance.runner.machine import Accepted, Machine, Refused, encode_command
from appliance.runner.operator import MUTATIONS, OperatorCommand, OperatorError, error_reply
from appliance.runner.worker_client import CancelResult, ExecResult, ObserveResult, WorkerClient

S = OccurrenceState

LOOP_QUEUE_MAX: Final = 1024
WAKE_S_MAX: Final = 1.0  # real seconds: the loop wakes at least this often
PROPOSE_TIMEOUT_S: Final = 5.0
BARRIER_TIMEOUT_S: Final = 5.0
TASK_THREADS: Final = 8
PROPOSERS_MAX: Final = 16
OBSERVE_GRACE_S: Final = 30  # wall (possibly scaled) seconds past timeout_seconds
OBSERVE_FIRST_POLL_S: Final = 0.05  # real seconds
OBSERVE_POLL_MAX_S: Final = 2.0
# After the deadline an Unknown attempt is still asked about, slowly, so that a confirmed outcome
# that arrives later (a healed link, a worker back up) resolves it (SPEC §3). Bounded: Unknown
# attempts hold running reservations, so there are at most limits.running of them.
UNKNOWN_POLL_S: Final = 10.0  # real seconds
CANCEL_RETRY_S: Final = 0.5
CANCEL_ATTEMPTS_MAX: Final = 40
REPLY_TIMEOUT_S: Final = 15.0  # how long a caller waits for the loop's answer
ADMIT_REPLY_TIMEOUT_S: Final = 10.0

OUTCOME_OF_STATUS: Final = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
    "lost": "lost",
}


class Uncertain(Exception):
    """A proposal whose fate is unknown: it may still commit."""


class NotOwner(Exception):
    """This voter is not the acquired owner (or stopped being it)."""


@dataclass
class Work:
    """What the owner tracks for one dispatched attempt (owner-side, never replicated)."""

    occurrence_id: int
    attempt: int
    binding: dict[str, Any]
    deadline_s: float  # wall (scaled) time after which a silent attempt is Unknown
    due_s: int = 0  # the occurrence's due instant (for the latency fields of the logs)
    busy: bool = False  # a background task for it is running
    poll_s: float = OBSERVE_FIRST_POLL_S
    cancel_attempts: int = 0
    observing: bool = False
    code: str = ""  # the committed claim's code: a re-send sends exactly the same request
    sends: int = 1  # sends of this binding (re-sent only after "not dispatched")
    last_observation: str = ""  # why the last observation gave no outcome (for the reasons)


class Runner:
    def __init__(
        self,
        *,
        cfg: RunnerConfig,
        machine: Machine,
        replication: Any,
        worker: WorkerClient,
        clock: Clock,
        log: DecisionLog,
        unknown_poll_s: float = UNKNOWN_POLL_S,
    ) -> None:
        self.cfg = cfg
        self.unknown_poll_s = unknown_poll_s
        self.node_id = cfg.node_id
        self.machine = machine
        self.replication = replication
        self.worker = worker
        self.clock = clock
        self.log = log
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(LOOP_QUEUE_MAX)
        self._pool = ThreadPoolExecutor(TASK_THREADS, thread_name_prefix="runner-task")
        # Proposals made together (claims of one pulse) wait here, never on the loop thread.
        self._proposer = ThreadPoolExecutor(PROPOSERS_MAX, thread_name_prefix="runner-propose")
        self._thread = threading.Thread(target=self._run, name="runner-loop", daemon=True)
        self._stopped = threading.Event()
        self._draining = False
        self._drain_taken = threading.Event()  # the loop has taken the "drain" item
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        # Owner state: valid only while self.epoch is not None.
        self.term = 0
        self.leader_hint: str | None = None
        self.epoch: int | None = None
        self._acquire_wanted = False
        self._pulse: Pulse | None = None
        self._compiled: dict[int, Any] = {}
        self._compile_cache: dict[tuple[str, str], Any] = {}
        self._work: dict[int, Work] = {}  # occurrence id -> dispatched attempt
        self._last_observe_s = 0
        self._orphans_possible = False
        self._owner_term = 0
        self._dirty = True

    # ---- thread-safe entry points ------------------------------------------------------------

    def start(self) -> None:
        self.replication.subscribe(self._on_leadership)
        self._thread.start()

    def _on_leadership(self, leadership: Leadership) -> None:
        # Called by whichever thread runs the Raft node: never block it.
        try:
            self._queue.put_nowait(("leadership", leadership))
        except queue.Full:
            self.log.emit("loop_queue_full", dropped="leadership")

    def wake(self) -> None:
        """Make the loop look at the clock now (after an injected clock moved, in tests)."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(("wake",))

    def _call(self, item: tuple[Any, ...], timeout_s: float) -> Any:
        future: Future[Any] = Future()
        try:
            self._queue.put((*item, future), timeout=timeout_s)
        except queue.Full:
            raise TimeoutError("the runner loop is busy") from None
        return future.result(timeout=timeout_s)

    def operator(self, command: OperatorCommand) -> dict[str, Any]:
        """Run one operator command on the loop; one JSON-able reply."""
        try:
            return self._call(("operator", command), REPLY_TIMEOUT_S)
        except Exception:  # a timeout, or a failure inside the loop: the outcome is unknown
            fields: dict[str, Any] = {}
            if command.action in MUTATIONS:
                fields = {"outcome": "uncertain", "retry_safe": False}
            return error_reply(503, "unavailable", "the runner did not answer in time", **fields)

    def admit(self, binding: dict[str, Any], incarnation: str) -> tuple[int, dict[str, Any]]:
        """The admission route's call: (HTTP status, body without the protocol field)."""
        try:
            return self._call(("admit", binding, incarnation), ADMIT_REPLY_TIMEOUT_S)
        except Exception:  # a timeout, or a failure inside the loop: a permit may exist
            return 503, {"error": {"code": "uncertain", "message": "no answer in time"}}

    def drain_and_stop(self, drain_s: float) -> None:
        """Stop scheduling; keep answering admissions while observation and cancellation finish
        (at most ``drain_s``); then stop the loop."""
        with contextlib.suppress(queue.Full):
            self._queue.put(("drain",), timeout=1.0)
        deadline = time.monotonic() + drain_s
        # A loop busy with a commit must take the drain item before it is stopped; otherwise it
        # would stop with nothing open and never drain (nor log it).
        self._drain_taken.wait(max(0.0, deadline - time.monotonic()))
        while time.monotonic() < deadline and self._has_open_tasks():
            time.sleep(0.05)
        self._stopped.set()
        self._queue.put(("wake",))
        self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._proposer.shutdown(wait=False, cancel_futures=True)

    def _has_open_tasks(self) -> bool:
        return any(w.busy or w.observing for w in list(self._work.values()))

    # ---- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                item = self._queue.get(timeout=self._wait_s())
            except queue.Empty:
                item = None
            try:
                if item is not None:
                    self._handle(item)
                self._fire_timers()
                if self.epoch is None and self._acquire_wanted:
                    self._acquire()
                if self.epoch is not None and not self._draining:
                    self._schedule()
            except Exception as exc:  # a bug must not kill scheduling silently
                self.log.emit("loop_error", error=repr(exc))
                if item is not None and isinstance(item[-1], Future) and not item[-1].done():
                    item[-1].set_exception(exc)

    def _wait_s(self) -> float:
        wait = WAKE_S_MAX
        if self._timers:
            wait = min(wait, self._timers[0][0] - time.monotonic())
        if self.epoch is not None and self._pulse is not None and not self._draining:
            due = self._pulse.next_due_s()
            if due is not None:
                wait = min(wait, (due - self.clock.now_s()) / self.clock.time_scale)
        return max(0.0, wait)

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._seq), fn))

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            fn()

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "leadership":
            self._leadership(item[1])
        elif kind == "operator":
            future = item[2]
            try:
                reply = self._operator(item[1])
            except OperatorError as err:
                reply = err.reply()
            future.set_result(reply)
        elif kind == "admit":
            self._admit(item[1], item[2], item[3])
        elif kind == "admit_done":
            self._admit_done(item[1], item[2], item[3])
        elif kind == "exec_done":
            self._exec_done(item[1], item[2])
        elif kind == "observed":
            self._observed(item[1], item[2])
        elif kind == "cancel_done":
            self._cancel_done(item[1], item[2])
        elif kind == "drain":
            self._draining = True
            self._drain_taken.set()
            self.log.emit("draining", open_tasks=sum(1 for w in self._work.values() if w.busy))

    def _now_s(self) -> int:
        return int(self.clock.now_s())

    def _late_ms(self, due_s: int) -> float:
        """How long after its due instant something happened, in real milliseconds."""
        return round((self.clock.now_s() - due_s) * 1000 / self.clock.time_scale, 2)

    # ---- replication -------------------------------------------------------------------------

    def _raw_propose(self, command: Any) -> Any:
        """The apply result, or the exception: safe on any thread (touches no loop state)."""
        try:
            return self.replication.propose(encode_command(command), timeout_s=PROPOSE_TIMEOUT_S)
        except Exception as exc:
            return exc

    def _interpret(self, outcome: Any) -> Accepted | Refused:
        """On the loop thread: a proposal's outcome, or NotOwner / Uncertain."""
        if isinstance(outcome, NotLeader):
            self._lose_ownership(getattr(outcome, "leader_hint", None))
            raise NotOwner(str(outcome))
        if isinstance(outcome, ProposalLost):
            raise Uncertain(f"the proposal was overwritten: {outcome}")
        if isinstance(outcome, BaseException):
            raise Uncertain(str(outcome) or type(outcome).__name__)
        self._dirty = True
        if not isinstance(outcome, Accepted | Refused):
            raise Uncertain("the apply hook returned no result")
        return outcome

    def _propose(self, command: Any) -> Accepted | Refused:
        return self._interpret(self._raw_propose(command))

    def _propose_all(self, commands: list[Any]) -> list[Any]:
        """Propose independent commands at once, so Raft batches their appends and fsyncs;
        the raw outcomes in the same order (interpret each on the loop thread)."""
        if len(commands) <= 1:
            return [self._raw_propose(c) for c in commands]
        futures = [self._proposer.submit(self._raw_propose, c) for c in commands]
        return [f.result() for f in futures]

    def _leadership(self, leadership: Leadership) -> None:
        self.term = leadership.term
        self.leader_hint = leadership.leader_id
        if leadership.is_leader:
            if self.epoch is not None and leadership.term != self._owner_term:
                self._lose_ownership(leadership.leader_id)  # re-elected: a new epoch is due
            if self.epoch is None:
                self._acquire_wanted = True
        elif self.epoch is not None or self._acquire_wanted:
            self._lose_ownership(leadership.leader_id)

    def _lose_ownership(self, hint: str | None) -> None:
        if self.epoch is not None:
            self.log.emit("ownership_lost", epoch=self.epoch, leader_hint=hint)
        self.epoch = None
        self._acquire_wanted = False
        self.leader_hint = hint
        self._pulse = None
        self._work.clear()

    def _acquire(self) -> None:
        """Barrier, then commit the ownership transition; only then schedule."""
        try:
            self.replication.read_barrier(timeout_s=BARRIER_TIMEOUT_S)
            acquired = ownership.acquire(self, self._now_s())
        except NotLeader:
            self._acquire_wanted = False
            return
        except (NotOwner, Uncertain, TimeoutError, CoreError) as exc:
            self.log.emit("ownership_retry", reason=str(exc))
            return
        self._acquire_wanted = False
        self.epoch = acquired.epoch
        self._owner_term = self.term
        self.log.emit(
            "ownership_acquired",
            epoch=acquired.epoch,
            term=self.term,
            reobserve=list(acquired.reobserve),
            resume_cancelling=list(acquired.resume_cancelling),
            fenced=list(acquired.fenced),
        )
        self._rebuild_pulse()
        deadline = self.clock.now_s() + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S
        for oid in acquired.reobserve:
            work = self._work_for_existing(oid, deadline)
            if work is not None:
                self._start_observing(work)
        for oid in acquired.resume_cancelling:
            work = self._work_for_existing(oid, deadline)
            if work is not None:
                self._send_cancel(work)

    def _work_for_existing(self, occurrence_id: int, deadline_s: float) -> Work | None:
        found = self.machine.read(lambda st: st.occurrences.get(occurrence_id))
        if found is None or found.terminal:
            return None
        binding = ownership.binding_of(self, found)
        if binding is None:
            self.log.emit("binding_unknown", occurrence=occurrence_id, attempt=found.attempt)
            return None
        work = Work(occurrence_id, found.attempt, binding, deadline_s, found.due_s)
        self._work[occurrence_id] = work
        return work

    def _compiled_for(self, definition: Any) -> Any:
        key = (definition.cron, definition.timezone)
        compiled = self._compile_cache.get(key)
        if compiled is None:
            compiled = compile_schedule(definition.cron, definition.timezone)
            self._compile_cache[key] = compiled
        return compiled

    def _rebuild_pulse(self) -> None:
        def build(st: core.SchedulerState) -> Pulse:
            self._compiled = {
                sid: self._compiled_for(s.definition) for sid, s in st.schedules.items()
            }
            return Pulse.rebuild(st, self._compiled)

        self._pulse = self.machine.read(build)

    # ---- scheduling: pulse, retry-due, claims ------------------------------------------------

    def _schedule(self) -> None:
        now_s = max(self._now_s(), self._last_observe_s)  # a clock step back observes nothing new
        self._last_observe_s = now_s
        try:
            self._observe(now_s)
            self._retry_due(now_s)
            if self._dirty:
                self._dirty = False
                if self._orphans_possible:
                    self._adopt_orphans()
                self._claim_ready(now_s)
        except NotOwner:
            return
        except Uncertain as exc:
            self.log.emit("proposal_uncertain", reason=str(exc))
            self._rebuild_pulse()

    def _observe(self, now_s: int) -> None:
        pulse = self._pulse
        if pulse is None:
            return
        plan = self.machine.read(lambda st: pulse.plan(st, self._compiled, now_s))
        if plan is None:
            return
        folded = self._with_claims(plan.command, now_s)
        try:
            result = self._propose(folded or plan.command)
        except Uncertain:
            if folded is not None:
                self._orphans_possible = True  # its claims may commit later: adopt them then
            raise
        if folded is not None and isinstance(result, Refused):
            # Only the observation itself should refuse the folded command; whatever it was,
            # observing alone is never worse than before the fold.
            reason = f"ObserveAndClaim refused, observing alone: {result.message}"
            self.log.emit("observation_refused", at=now_s, reason=reason)
            result = self._propose(plan.command)
        if isinstance(result, Refused):
            self.log.emit("observation_refused", at=now_s, reason=result.message)
            self._rebuild_pulse()
            return
        self.machine.read(lambda st: pulse.committed(st, plan, self._compiled))
        report: core.ObserveReport = result.value  # ObservedAndClaimed is one too
        claimed = report.claimed if isinstance(report, core.ObservedAndClaimed) else ()
        self.log.emit(
            "selection",
            at=now_s,
            created=[list(c) for c in report.created],
            dropped=[[sid, reason.value, n] for sid, reason, n in report.dropped],
            ignored=[list(i) for i in report.ignored],
            retired=list(report.retired),
            late_ms=self._late_ms(min(c[2] for c in report.created)) if report.created else None,
        )
        for record in claimed:
            self._dispatch_claimed(record)

    def _with_claims(self, observe: core.Observe, now_s: int) -> Any:
        """The observation that also claims what it creates, or None when this owner may not
        claim now (the same gates as ``_claim_ready``)."""
        if self.epoch is None or now_s >= int(self.cfg.remote.expires_at.timestamp()):
            return None
        remote = self.cfg.remote
        authority = core.Authority(**authority_of(remote))
        return core.ObserveAndClaim(
            observe, self.epoch, remote.namespace, remote.worker_id, authority
        )

    def _dispatch_claimed(self, record: Any) -> None:
        """Dispatch a claim this owner just committed (its committed binding, its code)."""
        binding = ownership.binding_of(self, record)
        code = self.machine.read(
            lambda st: (
                st.schedules[record.schedule_id].definition.code
                if record.schedule_id in st.schedules
                else None
            )
        )
        if binding is None or code is None:  # cannot happen right after the commit; never guess
            self.log.emit("binding_unknown", occurrence=record.id, attempt=record.attempt)
            self._orphans_possible = True
            return
        self.log.emit(
            "claim",
            occurrence=record.id,
            schedule=record.schedule_id,
            attempt=record.attempt,
            epoch=self.epoch,
            late_ms=self._late_ms(record.due_s),
        )
        self._start_exec(record, binding, code)

    def _start_exec(self, record: Any, binding: dict[str, Any], code: str) -> None:
        deadline = self.clock.now_s() + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S
        work = Work(record.id, record.attempt, binding, deadline, record.due_s, busy=True)
        work.code = code
        self._work[record.id] = work
        self._spawn(lambda: self.worker.execute(binding, code), "exec_done", work)

    def _retry_due(self, now_s: int) -> None:
        due = self.machine.read(lambda st: st.next_retry_due_s())
        if due is not None and due <= now_s:
            result = self._propose(core.RetryDue(now_s))
            if isinstance(result, Accepted) and result.value:
                self.log.emit("retry_due", occurrences=list(result.value))

    def _claimable(self, st: core.SchedulerState) -> list[tuple[int, int]]:
        """(occurrence id, attempt) that may start now, by the same rules the apply checks."""
        out: list[tuple[int, int]] = []
        running = st.counts().running
        for sid, schedule in st.schedules.items():
            pending = st.pending_ids(sid)
            if not pending:
                continue
            concurrent = schedule.definition.policy.overlap is OverlapPolicy.CONCURRENT
            if not concurrent:
                if st.schedule_counts(sid)["running"]:
                    continue
                pending = pending[:1]
            for oid in pending:
                if running >= st.limits.running:
                    return out
                record = st.occurrences[oid]
                if record.retry_waiting:
                    if not concurrent:
                        break
                    continue
                out.append((oid, record.attempt))
                running += 1
        return out

    def _claim_ready(self, now_s: int) -> None:
        if now_s >= int(self.cfg.remote.expires_at.timestamp()):
            return  # no permit can be granted any more: claiming would only strand work
        if self.epoch is None:
            return
        planned: list[tuple[Any, Any, dict[str, Any]]] = []
        for oid, attempt in self.machine.read(self._claimable):
            record, schedule = self.machine.read(
                lambda st, oid=oid: (
                    st.occurrences.get(oid),
                    st.schedules.get(st.occurrences[oid].schedule_id)
                    if oid in st.occurrences
                    else None,
                )
            )
            if record is None or schedule is None:
                continue
            binding = make_binding(
                self.cfg.remote,
                schedule_id=schedule.id,
                schedule_name=schedule.definition.name,
                occurrence_id=oid,
                attempt=attempt,
                owner=self.node_id,
                epoch=self.epoch,
                code=schedule.definition.code,
                due_s=record.due_s,
            )
            planned.append((record, schedule, binding))
        commands = [ownership.claim_command(self, r, b, now_s) for r, _, b in planned]
        for (record, schedule, binding), outcome in zip(
            planned, self._propose_all(commands), strict=True
        ):
            oid, attempt = record.id, record.attempt
            try:
                result = self._interpret(outcome)
            except Uncertain as exc:
                self.log.emit("claim_uncertain", occurrence=oid, attempt=attempt, reason=str(exc))
                self._orphans_possible = True  # it may commit later: adopt it then
                continue
            if isinstance(result, Refused):
                self.log.emit(
                    "claim_refused", occurrence=oid, attempt=attempt, reason=result.message
                )
                continue
            self.log.emit(
                "claim",
                occurrence=oid,
                schedule=schedule.id,
                attempt=attempt,
                epoch=self.epoch,
                late_ms=self._late_ms(record.due_s),
            )
            self._start_exec(record, binding, schedule.definition.code)

    def _adopt_orphans(self) -> None:
        """Dispatch this epoch's committed claims whose proposal outcome was unknown here.

        They were never dispatched (no ``Work`` exists for them), so dispatching now is still
        the first and only dispatch of that attempt.
        """
        self._orphans_possible = False
        epoch = self.epoch
        running = self.machine.read(
            lambda st: [r for r in st.occurrences.values() if r.state is S.RUNNING]
        )
        for record in running:
            if record.id in self._work:
                continue
            binding = ownership.binding_of(self, record)
            if binding is None or binding["epoch"] != epoch or binding["owner"] != self.node_id:
                continue
            if ownership.permit_may_exist_for(self, record.id, record.attempt):
                continue
            code = self.machine.read(
                lambda st, sid=record.schedule_id: (
                    st.schedules[sid].definition.code if sid in st.schedules else None
                )
            )
            if code is None:
                continue
            self.log.emit("claim_adopted", occurrence=record.id, attempt=record.attempt)
            self._start_exec(record, binding, code)

    def _spawn(self, fn: Callable[[], Any], kind: str, work: Work) -> None:
        work.busy = True

        def done(future: Future[Any]) -> None:
            try:
                value = future.result()
            except Exception as exc:  # the client classifies I/O; anything else is a bug
                value = exc
            self._queue.put((kind, work, value))

        self._pool.submit(fn).add_done_callback(done)

    def _forget(self, work: Work) -> None:
        """Stop tracking ``work`` — only if it is still the tracked one. A late result of an
        earlier attempt (an observation in flight when ownership changed hands) must never
        remove the ``Work`` of the attempt that replaced it: that attempt's own results would
        then be dropped and it would stay Running for ever."""
        if self._work.get(work.occurrence_id) is work:
            del self._work[work.occurrence_id]

    def _current(self, work: Work) -> Any:
        """The committed record if it is still this work's attempt, else None."""
        if self._work.get(work.occurrence_id) is not work:
            return None
        record = self.machine.read(lambda st: st.occurrences.get(work.occurrence_id))
        if record is None or record.attempt != work.attempt:
            self._forget(work)
            return None
        return record

    # ---- results of background tasks ---------------------------------------------------------

    def _commit_quietly(self, command: Any, event: str, **fields: Any) -> Accepted | Refused | None:
        try:
            result = self._propose(command)
        except (NotOwner, Uncertain) as exc:
            self.log.emit(f"{event}_uncertain", **{**fields, "reason": str(exc)})
            return None
        if isinstance(result, Refused):  # its reason replaces the one the command carried
            self.log.emit(f"{event}_refused", **{**fields, "reason": result.message})
        else:
            state = getattr(result.value, "state", None)
            self.log.emit(event, state=getattr(state, "value", state), **fields)
        return result

    def _exec_done(self, work: Work, result: ExecResult | Exception) -> None:
        work.busy = False
        record = self._current(work)
        if record is None:
            return
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        if isinstance(result, Exception):
            result = ExecResult("uncertain", detail=f"client error: {result!r}")
        if result.kind == "accepted":
            self.log.emit(
                "dispatch_accepted",
                execution_id=result.execution_id,
                late_ms=self._late_ms(work.due_s),
                **ids,
            )
            self._start_observing(work)
            return
        decision = dispatch_outcome.after_exec(
            result.kind,
            result.code,
            result.detail,
            ownership.committed_view(self, work, record),
            work.sends,
        )
        self._perform(work, record, decision)

    def _start_observing(self, work: Work) -> None:
        work.observing = True
        work.poll_s = OBSERVE_FIRST_POLL_S
        self._later(work.poll_s, lambda: self._poll(work))

    def _poll(self, work: Work) -> None:
        if self._work.get(work.occurrence_id) is not work or work.busy:
            return
        eid = execution_id(work.binding["schedule_id"], work.occurrence_id, work.attempt)
        self._spawn(lambda: self.worker.observe(eid), "observed", work)

    def _observed(self, work: Work, result: ObserveResult | Exception) -> None:
        work.busy = False
        record = self._current(work)
        if record is None or record.terminal:
            self._forget(work)
            return
        if record.state is S.CANCELLING:
            return  # the cancellation path owns it now
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        status = result.status if isinstance(result, ObserveResult) else None
        outcome = OUTCOME_OF_STATUS.get(status or "")
        if outcome is not None and not (outcome == "lost" and record.state is S.UNKNOWN):
            document = result.document if isinstance(result, ObserveResult) else None
            reason = None
            if outcome != "completed" and document is not None:
                reason = str(document.get("reason") or document.get("error") or outcome)[:200]
            self._commit_quietly(
                core.RecordOutcome(
                    work.occurrence_id,
                    work.attempt,
                    outcome,
                    self._now_s(),
                    reason=reason,
                    execution_id=execution_id(
                        work.binding["schedule_id"], work.occurrence_id, work.attempt
                    ),
                ),
                "outcome",
                worker_status=status,
                **ids,
            )
            self._forget(work)
            work.observing = False
            self._dirty = True
            return
        work.last_observation = status or (
            result.detail if isinstance(result, ObserveResult) else repr(result)
        )
        decision: dispatch_outcome.Decision | None = None
        if status == "fenced":
            fence = (
                (result.document or {}).get("fence") if isinstance(result, ObserveResult) else None
            )
            why = str((fence or {}).get("reason") or "no reason given")[:200]
            decision = dispatch_outcome.after_fenced_observation(
                ownership.committed_view(self, work, record), why
            )
        elif self.clock.now_s() >= work.deadline_s:
            decision = dispatch_outcome.at_deadline(
                ownership.committed_view(self, work, record), work.last_observation
            )
        if decision is not None and not isinstance(decision, dispatch_outcome.Observe):
            self._perform(work, record, decision)
            return
        if self.clock.now_s() >= work.deadline_s:
            # Unknown is never retried, but it is still observed: the real result wins.
            work.poll_s = self.unknown_poll_s
            self._later(work.poll_s, lambda: self._poll(work))
            return
        work.poll_s = min(work.poll_s * 2, OBSERVE_POLL_MAX_S)
        self._later(work.poll_s, lambda: self._poll(work))

    # ---- dispatch decisions (appliance/runner/dispatch_outcome.py decides; this performs) -----

    def _perform(self, work: Work, record: Any, decision: dispatch_outcome.Decision) -> None:
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        if isinstance(decision, dispatch_outcome.Resend):
            work.last_observation = f"not dispatched: {decision.code}"
            self.log.emit(
                "dispatch_not_dispatched", sends=work.sends, delay_s=decision.delay_s, **ids
            )
            work.busy = True  # nothing else may touch it until the re-send is answered
            self._later(decision.delay_s, lambda: self._resend(work))
            return
        if isinstance(decision, dispatch_outcome.RecordFailed):
            self._commit_quietly(
                core.RecordOutcome(
                    work.occurrence_id,
                    work.attempt,
                    "failed",
                    self._now_s(),
                    reason=decision.reason,
                ),
                "outcome",
                reason=decision.reason,
                **ids,
            )
            self._forget(work)
            return
        if isinstance(decision, dispatch_outcome.Fence):
            result = self._commit_quietly(
                ownership.fence_dispatch_command(self, record, decision, self._now_s()),
                "dispatch_fenced",
                reason=decision.reason,
                **ids,
            )
            if isinstance(result, Accepted):
                self._forget(work)
                work.observing = False
                self._dirty = True
                return
            # Refused (an Admit committed first) or uncertain: observe; the deadline decides.
        if isinstance(decision, dispatch_outcome.MarkUnknown) and record.state is S.RUNNING:
            self._commit_quietly(
                ownership.mark_unknown_command(self, record, decision.reason, self._now_s()),
                "outcome",
                reason=decision.reason,
                **ids,
            )
        if not work.observing or self.clock.now_s() < work.deadline_s:
            self._start_observing(work)
        else:
            work.poll_s = self.unknown_poll_s
            self._later(work.poll_s, lambda: self._poll(work))

    def _resend(self, work: Work) -> None:
        """Send exactly the committed binding again — only while it is still this owner's
        Running attempt and the grant holds (otherwise ``after_exec`` fences it)."""
        work.busy = False
        record = self._current(work)
        if record is None:
            return
        committed = ownership.committed_view(self, work, record)
        if record.state is not S.RUNNING or not committed.epoch_held or committed.grant_expired:
            code = work.last_observation.removeprefix("not dispatched: ")
            self._exec_done(work, ExecResult("not_dispatched", code=code))
            return
        work.sends += 1
        work.deadline_s = self.clock.now_s() + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S
        binding, code = work.binding, work.code
        self._spawn(lambda: self.worker.execute(binding, code), "exec_done", work)

    def _send_cancel(self, work: Work) -> None:
        if work.busy:
            self._later(CANCEL_RETRY_S, lambda: self._send_cancel(work))
            return
        work.cancel_attempts += 1
        self._spawn(lambda: self.worker.cancel(work.binding), "cancel_done", work)

    def _cancel_done(self, work: Work, result: CancelResult | Exception) -> None:
        work.busy = False
        record = self._current(work)
        if record is None or record.state is not S.CANCELLING:
            self._forget(work)
            return
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        answer = result.result if isinstance(result, CancelResult) else None
        now_s = self._now_s()
        if answer == "stopped":
            self._commit_quietly(
                core.ConfirmCancelled(work.occurrence_id, work.attempt, now_s), "outcome", **ids
            )
        elif answer == "fenced_before_consume":
            self._commit_quietly(
                ownership.fence_after_cancel_command(self, record, now_s), "outcome", **ids
            )
        elif answer == "completed" and isinstance(result, CancelResult):
            status = (result.report or {}).get("status")
            outcome = OUTCOME_OF_STATUS.get(str(status))
            if outcome is None or outcome == "lost":
                self._retry_cancel(work, f"completed without a usable report ({status})")
                return
            self._commit_quietly(
                core.RecordOutcome(work.occurrence_id, work.attempt, outcome, now_s),
                "outcome",
                worker_status=status,
                **ids,
            )
        else:
            detail = result.detail if isinstance(result, CancelResult) else repr(result)
            self._retry_cancel(work, f"{answer or 'no answer'} {detail}".strip())
            return
        self._forget(work)
        self._dirty = True

    def _retry_cancel(self, work: Work, why: str) -> None:
        if work.cancel_attempts >= CANCEL_ATTEMPTS_MAX:
            self.log.emit(
                "cancel_unresolved", occurrence=work.occurrence_id, attempt=work.attempt, why=why
            )
            self._forget(work)
            return
        self._later(CANCEL_RETRY_S, lambda: self._send_cancel(work))

    # ---- admission ---------------------------------------------------------------------------

    def _not_owner_answer(self, message: str) -> tuple[int, dict[str, Any]]:
        return 409, {
            "error": {"code": "not_owner", "message": message, "leader_hint": self.leader_hint}
        }

    def _admit(self, binding: dict[str, Any], incarnation: str, answer: Future[Any]) -> None:
        """Propose ``Admit`` off the loop thread, so concurrent permit requests share Raft
        appends. A committed outcome (granted or refused) is answered as soon as it is known,
        from the proposing thread: the answer depends only on the applied result, and the
        worker is waiting for it on the launch path. Everything else (logging, the dirty flag,
        not-owner and uncertain outcomes, which touch loop state) happens on the loop thread."""
        if self.epoch is None:
            self._answer_admission(binding, answer, self._not_owner_answer("not the owner"))
            return
        command = ownership.admit_command(binding, incarnation, self._now_s())
        if isinstance(command, tuple):  # a definite refusal before any proposal
            self._answer_admission(binding, answer, command)
            return

        def done(future: Future[Any]) -> None:
            outcome = future.result()
            if isinstance(outcome, Accepted | Refused) and not answer.done():
                answer.set_result(ownership.admit_answer(outcome))
            self._queue.put(("admit_done", binding, answer, outcome))

        self._proposer.submit(self._raw_propose, command).add_done_callback(done)

    def _admit_done(self, binding: dict[str, Any], answer: Future[Any], outcome: Any) -> None:
        try:
            result = self._interpret(outcome)
        except NotOwner:
            reply = self._not_owner_answer("ownership lost")
        except Uncertain as exc:
            reply = 503, {"error": {"code": "uncertain", "message": str(exc)}}
        else:
            reply = ownership.admit_answer(result)
        self._answer_admission(binding, answer, reply)

    def _answer_admission(
        self, binding: dict[str, Any], answer: Future[Any], reply: tuple[int, dict[str, Any]]
    ) -> None:
        status, body = reply
        oid = binding.get("occurrence_id")
        work = self._work.get(oid) if isinstance(oid, int) else None
        self.log.emit(
            "admission",
            status=status,
            occurrence=oid,
            attempt=binding.get("attempt"),
            epoch=binding.get("epoch"),
            late_ms=self._late_ms(work.due_s) if work is not None else None,
            refusal=(body.get("error") or {}).get("code") if status != 200 else None,
        )
        if not answer.done():
            answer.set_result(reply)

    # ---- operator commands -------------------------------------------------------------------

    def _not_owner(self) -> OperatorError:
        return OperatorError(
            409,
            "not_owner",
            "this voter is not the acquired owner; send the command to the leader",
            leader_hint=self.leader_hint,
        )

    def _operator(self, command: OperatorCommand) -> dict[str, Any]:
        action = command.action
        if action == "list":
            view = self.machine.read(core.list_view)
            return {"ok": True, "stale_local_view": True, "node": self.node_id, **view}
        if self.epoch is None:
            raise self._not_owner()
        if action == "status":
            return self._status()
        if self._draining:
            raise OperatorError(503, "draining", "the runner is shutting down", accepted=False)
        return self._mutate(command)

    def _status(self) -> dict[str, Any]:
        try:
            self.replication.read_barrier(timeout_s=BARRIER_TIMEOUT_S)
        except NotLeader:
            self._lose_ownership(self.leader_hint)
            raise self._not_owner() from None
        except (TimeoutError, Exception) as exc:
            raise OperatorError(
                503, "unavailable", f"no quorum confirmed leadership: {exc}"
            ) from None
        if self.epoch is None:
            raise self._not_owner()
        raft = self.replication.status()
        counts = self.machine.read(lambda st: st.counts())
        reply: dict[str, Any] = {
            "ok": True,
            "node": self.node_id,
            "term": raft.get("term", self.term),
            "ownership": {"node": self.node_id, "epoch": self.epoch},
            "commit_index": raft.get("commit_index"),
            "applied_index": raft.get("applied_index"),
            "grant_expires_at": format_utc(self.cfg.remote.expires_at),
            "grant_expired": self.clock.now_s() >= self.cfg.remote.expires_at.timestamp(),
            "counts": {
                "records": counts.records,
                "outstanding": counts.outstanding,
                "running": counts.running,
                "by_state": counts.by_state,
            },
        }
        if self.clock.time_scale != 1.0:
            reply["time_scale"] = self.clock.time_scale
        return reply

    def _mutate(self, command: OperatorCommand) -> dict[str, Any]:
        action, args = command.action, command.args
        now_s = self._now_s()
        if action == "create":
            try:
                definition = parse_definition(args["definition"], self.cfg.limits, "definition")
                self._compiled_for(definition)
            except CoreError as err:
                raise OperatorError(400, "invalid_definition", str(err)) from None
            cmd: Any = core.CreateSchedule(definition, now_s)
        elif action == "disable":
            cmd = core.DisableSchedule(args["id"], now_s)
        elif action == "delete":
            cmd = core.DeleteSchedule(args["id"], now_s)
        elif action == "cancel":
            cmd = core.Cancel(args["occurrence_id"], now_s)
        else:
            attested = args.get("dispatcher_and_work_quiesced") is True
            cmd = core.AcknowledgeStopped(args["occurrence_id"], attested, now_s)
        try:
            result = self._propose(cmd)
        except NotOwner:
            raise self._not_owner() from None
        except Uncertain as exc:
            raise OperatorError(
                503, "uncertain", str(exc), outcome="uncertain", retry_safe=False
            ) from None
        if isinstance(result, Refused):
            self.log.emit("operator_refused", action=action, reason=result.message)
            return error_reply(400, "refused", result.message)
        self.log.emit("operator", action=action, **_ids(args))
        return self._after_mutation(action, args, result.value)

    def _after_mutation(self, action: str, args: dict[str, Any], value: Any) -> dict[str, Any]:
        if action == "create":
            self._rebuild_pulse()
            return {"ok": True, "action": action, "id": value}
        if action in ("disable", "delete"):
            self._rebuild_pulse()
            return {"ok": True, "action": action, "id": args["id"]}
        oid = args["occurrence_id"]
        state = getattr(value, "state", None)
        reply = {"ok": True, "action": action, "occurrence_id": oid, "state": state.value}
        if action == "cancel" and state is S.CANCELLING:
            work = self._work.get(oid) or self._work_for_existing(
                oid, self.clock.now_s() + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S
            )
            if work is not None:
                work.cancel_attempts = 0
                self._send_cancel(work)
        if action == "acknowledge_stopped":
            self._work.pop(oid, None)
            reply["evidence"] = ownership.unknown_evidence(self, oid)  # what was attested over
        return reply


def _ids(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k in ("id", "occurrence_id")}
