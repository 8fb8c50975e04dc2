"""The worker's launch path, cancel and observation as decisions: at most one submission.

Theory of operation (SPEC §7, seeds/000 "the worker durably consumes its local launch
permission, then uses a non-cloneable capability to submit"). An exec walks these steps in
order; each durable step is one store transaction, and a crash hook may kill the process right
after any of them (appliance/worker/crash.py names them):

    validated -> pool_reserved -> reserved -> [permit request] -> permit_received
    -> permit_recorded -> consumed -> submitted -> receipt_recorded -> 202

Every step up to ``consumed`` is fsynced before the next one starts; the receipt is written
without an fsync of its own, because it protects no decision (appliance/store/worker_store.py):
a SIGKILL keeps it, and ``consume`` alone decides what a restart reports.

Why this is safe across crashes: ``consume`` is the point of no return and the store refuses a
second one forever (and refuses a permit recorded by an earlier incarnation). After a restart:

- an invocation reserved but not consumed by an earlier incarnation is *fenced* the first time
  anything touches it (the restart interrupted its admission; the permit, if one was granted,
  named the dead incarnation, and the store would refuse it anyway);
- an execution consumed by an earlier incarnation and not finished is marked ``lost`` at start
  (its engine child died with the worker or was killed from the recorded pid list);
- a repeated exec for a known invocation answers its existing state and launches nothing.

Work can be lost this way; it is reported (``fenced`` / ``lost``), never hidden and never rerun.

Every stop of the admission attempt (refused, uncertain, unavailable) fences the invocation with
the reason: "stops the attempt and records why", and no later request can revive it.

Retention (issue 19; the argument is docs/worker.md "Retention"): the runner states its floor W
on each exec and observation (``note_retained_through``); W only rises here. Every invocation at
or below W is refused first (exec ``403 retired``, observation ``410 retired``) — before the
path that answers an existing record — and ``prune_batch`` deletes the records of exactly those
invocations, one bounded batch per call, which the driver makes off the launch path.

This module is the core: it holds no lock, thread, socket or timer and makes no permit request.
The store, the engine, the clock and the crash hook are injected (``appliance/worker/ports.py``),
so the same decisions run in the process (``WorkerService``, the driver, over SQLite and V8) and
in the system simulator (in memory). An exec is two calls because the permit request between
them is the driver's I/O: ``begin_exec`` (checks, pool and durable reservation) returns a
``Reserving``; the driver asks for the permit and hands the answer to ``permit_arrived`` (record,
consume, submit, receipt); ``end_exec`` always follows. The driver serializes the calls for one
invocation (``WorkerService`` holds a lock per invocation around each call marked "under the
invocation's lock"), and does NOT hold it while the permit request is in flight, so a cancel can
fence the invocation meanwhile; the consume that follows then refuses (``fenced``) and nothing
is submitted. consume, submit and the receipt happen in one call, so a cancel sees either "not
consumed" (and its fence provably came first) or "consumed, submitted and receipted".
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from appliance.config.rfc3339 import format_utc, parse_rfc3339
from appliance.config.worker import EngineSettings, WorkerConfig
from appliance.core.canonical import canonical_json
from appliance.egress.record import bounded_report
from appliance.engine.model import (
    EngineError,
    ExecutionReport,
    ExecutionRequest,
    ExecutionStatus,
    PoolFull,
    ScheduledInfo,
    UnknownExecution,
)
from appliance.protocol import v1
from appliance.protocol.v1 import PROTOCOL_VERSION, Invocation, execution_id
from appliance.store.errors import WorkerRecordRefused
from appliance.store.worker_store import ExecutionRecord, InvocationRecord
from appliance.worker.admission_result import AdmissionResult
from appliance.worker.ports import Clock, EngineReservation, LaunchEngine, LaunchStore, StepHook
from appliance.worker.wire import CancelRequest, ExecRequest

log = logging.getLogger("appliance.worker")

CANCEL_WAIT_SECONDS_DEFAULT: Final = 2.0
FENCE_REASON_CANCEL: Final = "cancel requested"
PRUNE_ROWS_MAX: Final = 64  # invocation records one retention batch deletes at most


@dataclass(frozen=True)
class Answer:
    """An HTTP answer of the worker: status code and JSON body (always ``"protocol": 1``)."""

    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class LaunchSettings:
    """What the core needs of the worker's config: who it is and the engine ceilings."""

    namespace: str
    worker_id: str
    engine: EngineSettings

    @classmethod
    def of(cls, config: WorkerConfig) -> LaunchSettings:
        return cls(config.namespace, config.worker_id, config.engine)


@dataclass(frozen=True)
class Reserving:
    """An exec durably reserved, waiting for its permit: the driver asks, then calls back."""

    request: ExecRequest
    reservation: EngineReservation


class _NoSteps:
    def after(self, step: str) -> None:
        return None


def _error(status: int, code: str, message: str, **fields: Any) -> Answer:
    return Answer(status, v1.error_document(code, message, **fields))


def now_ms_of(clock: Clock) -> int:
    return int(clock.now().timestamp() * 1000)


def outcome_document(report: ExecutionReport) -> dict[str, Any]:
    """What the store's execution ``result`` column holds: the engine's outcome, not only the
    completion value, so that observation after a restart still knows reason and timestamps."""
    return {
        "value": report.result,
        "reason": report.reason,
        "note": report.note,
        "output_truncated": report.output_truncated,
        "started_at": _iso(report.started_at),
        "finished_at": _iso(report.finished_at),
        "egress": bounded_report(report.egress),
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else format_utc(value)


class LaunchCore:
    """The worker's decisions over an injected store and engine (module doc)."""

    def __init__(
        self,
        *,
        settings: LaunchSettings,
        store: LaunchStore,
        engine: LaunchEngine,
        clock: Clock,
        crash: StepHook | None = None,
        cancel_wait_seconds: float = CANCEL_WAIT_SECONDS_DEFAULT,
    ) -> None:
        self._settings = settings
        self._store = store
        self._engine = engine
        self._clock = clock
        self._crash: StepHook = crash or _NoSteps()
        self._cancel_wait_seconds = cancel_wait_seconds
        # Invocations whose permit request is in flight. Each add, discard and membership test
        # is one atomic set operation, made for one invocation by the call holding its lock.
        self._in_flight: set[tuple[str, int, int, int]] = set()
        self.incarnation_id = store.incarnation_id
        # W: the recorded floor, raised by what the runner states (only ever rising).
        self._retained_through = store.retained_through()
        self._prune_due = False
        self.pruned_records = 0  # by this incarnation (metrics, the simulator's counts)
        engine.add_listener(self.on_engine_report)

    # ------------------------------------------------------------------ retention
    @property
    def retained_through(self) -> int:
        return self._retained_through

    def note_retained_through(self, value: int | None) -> None:
        """The runner's W from a request (None: an older runner said nothing). A lower value
        (a stale runner) changes nothing. Held in memory until a prune batch records it: until
        then nothing is deleted, so a restart that forgets it loses nothing it protects."""
        if value is not None and value > self._retained_through:
            self._retained_through = value
            self._prune_due = True

    def prune_batch(self, rows_max: int = PRUNE_ROWS_MAX) -> bool:
        """One bounded retention batch when one is due; True while more are left."""
        if not self._prune_due:
            return False
        pruned = self._store.prune_through(self._retained_through, rows_max=rows_max)
        self._prune_due = pruned.more
        self.pruned_records += pruned.deleted
        if pruned.deleted:
            log.debug("pruned %d records through %d", pruned.deleted, self._retained_through)
        return pruned.more

    def _retired(self, invocation: Invocation, status: int) -> Answer | None:
        """The definite refusal of an invocation at or below W (module doc), else None."""
        if invocation.occurrence_id > self._retained_through:
            return None
        return _error(
            status,
            v1.RETIRED_CODE,
            f"occurrence {invocation.occurrence_id} is at or below the retention floor "
            f"{self._retained_through}: it left the runner's checkpoint and is never launched",
            retained_through=self._retained_through,
        )

    # ------------------------------------------------------------------ start-up
    def mark_lost_executions(self) -> list[str]:
        """Executions an earlier incarnation left unfinished become ``lost`` (never completed)."""
        lost = []
        for execution in self._store.unfinished_from_previous_incarnations():
            with contextlib.suppress(WorkerRecordRefused):
                self._store.update_execution(
                    execution.execution_id,
                    status="lost",
                    now_ms=self._now_ms(),
                    error=(
                        f"the worker restarted while this execution was {execution.status} "
                        f"(incarnation {execution.incarnation_id} ended); its outcome is unknown"
                    ),
                )
                lost.append(execution.execution_id)
        if lost:
            log.warning("executions lost by an earlier incarnation: %s", ", ".join(lost))
        return lost

    # ------------------------------------------------------------------ exec
    def begin_exec(self, request: ExecRequest) -> Answer | Reserving:
        """Checks, pool reservation and durable reservation (under the invocation's lock).

        An ``Answer`` ends the exec; a ``Reserving`` means: ask for the permit, then call
        ``permit_arrived``, and ``end_exec`` in every case."""
        binding = request.binding
        refusal = self.check_binding(binding)
        if refusal is not None:
            return refusal
        invocation = binding.invocation
        retired = self._retired(invocation, 403)  # before the existing record is looked at
        if retired is not None:
            return retired
        existing = self._store.get(invocation)
        if existing is not None:
            # Before the payload and expiry checks: a repeated exec for a known invocation
            # must learn its state, never a refusal that could read as "not launched".
            return self._existing(existing, request.document, binding.execution_id)
        refusal = self._check_payload(binding, request.code) or self._check_grant(binding)
        if refusal is not None:
            return refusal
        self._crash.after("validated")
        try:
            reservation = self._engine.reserve()
        except PoolFull as exc:
            return _error(503, "pool_full", f"the engine pool is full: {exc}")
        except EngineError as exc:
            return _error(503, "engine_unavailable", str(exc))
        self._crash.after("pool_reserved")
        try:
            reserved = self._store.reserve(invocation, request.document, now_ms=self._now_ms())
        except BaseException:
            reservation.release()
            raise
        if not reserved.created:  # cannot happen under the lock; refuse rather than guess
            reservation.release()
            return self._existing(reserved.record, request.document, binding.execution_id)
        self._in_flight.add(invocation.key())
        self._crash.after("reserved")
        return Reserving(request, reservation)

    def permit_arrived(self, reserving: Reserving, admission: AdmissionResult) -> Answer:
        """The permit request's answer: record, consume, submit, receipt (under the lock)."""
        # Cleared under the lock: nobody may mistake this reservation for an interrupted one
        # between the permit's arrival and its consume.
        self._in_flight.discard(reserving.request.binding.invocation.key())
        return self._launch(reserving.request, admission, reserving.reservation)

    def end_exec(self, reserving: Reserving) -> None:
        """Always after ``begin_exec`` returned a ``Reserving`` (the driver's ``finally``)."""
        self._in_flight.discard(reserving.request.binding.invocation.key())
        reserving.reservation.release()  # no effect once submitted: the execution owns it then

    def _launch(
        self, request: ExecRequest, admission: AdmissionResult, reservation: EngineReservation
    ) -> Answer:
        binding = request.binding
        invocation = binding.invocation
        if admission.kind != "granted" or admission.permit is None:
            return self._stop_attempt(invocation, admission)
        log.info("permit granted for %s: %s", binding.execution_id, admission.summary())
        self._crash.after("permit_received")
        try:
            self._store.record_permit(invocation, admission.permit, now_ms=self._now_ms())
        except WorkerRecordRefused as exc:
            self._fence(invocation, f"permit not recorded ({exc.reason})")
            return _error(503, "permit_refused", f"the permit could not be recorded ({exc.reason})")
        self._crash.after("permit_recorded")
        expired = self._check_grant(binding)  # SPEC §6: re-checked before consuming
        if expired is not None:
            self._fence(invocation, "grant expired before consume")
            return expired
        eid = binding.execution_id
        try:
            self._store.consume(invocation, execution_id=eid, now_ms=self._now_ms())
        except WorkerRecordRefused as exc:
            if exc.reason == "fenced":
                return _error(
                    403, "fenced", "a cancel fenced this invocation before its permit was consumed"
                )
            self._fence(invocation, f"permit not consumed ({exc.reason})")
            message = f"the permit could not be consumed ({exc.reason})"
            return _error(503, "consume_refused", message)
        self._crash.after("consumed")
        return self._submit(request, reservation, eid)

    def _submit(self, request: ExecRequest, reservation: EngineReservation, eid: str) -> Answer:
        binding = request.binding
        invocation = binding.invocation
        engine = self._settings.engine
        engine_request = ExecutionRequest(
            execution_id=eid,
            code=request.code,
            scheduled=ScheduledInfo(
                namespace=binding.namespace,
                schedule_id=binding.schedule_id,
                schedule_name=binding.schedule_name,
                occurrence_id=binding.occurrence_id,
                attempt=binding.attempt,
                ownership_epoch=binding.epoch,
                due_time=format_utc(parse_rfc3339(binding.due_time)),
            ),
            heap_mb=engine.effective_heap_mb(binding.authority.heap_mb),
            timeout_seconds=engine.effective_timeout_seconds(binding.authority.timeout_seconds),
        )
        try:
            capability = reservation.capability(
                engine_request, recheck=lambda: self._consumed_here(invocation, eid)
            )
            capability.submit()
        except EngineError as exc:
            # Consumed but not submitted: the permit is spent; report it, never launch it later.
            log.error("execution %s was consumed but not submitted: %s", eid, exc)
            with contextlib.suppress(WorkerRecordRefused):
                self._store.update_execution(
                    eid,
                    status="lost",
                    now_ms=self._now_ms(),
                    error=f"consumed but not submitted to the engine: {exc}",
                )
            return _error(503, "submit_failed", "the permit was consumed but the engine refused")
        log.info("submitted execution %s (incarnation %s)", eid, self.incarnation_id)
        self._crash.after("submitted")
        accepted_at = self._clock.now()
        # Evidence, not a decision: consume (durable) already made a restart report this
        # execution instead of relaunching it, so the receipt skips its own fsync.
        self._store.record_receipt(
            invocation,
            {
                "execution_id": eid,
                "incarnation": self.incarnation_id,
                "accepted_at": format_utc(accepted_at),
            },
            now_ms=self._now_ms(),
            durable=False,
        )
        self._crash.after("receipt_recorded")
        return Answer(
            202,
            {
                "protocol": PROTOCOL_VERSION,
                "execution_id": eid,
                "incarnation": self.incarnation_id,
                "state": v1.EXEC_ACCEPTED,
            },
        )

    def _consumed_here(self, invocation: Invocation, eid: str) -> bool:
        """The capability's re-check: the durable record says THIS incarnation consumed it."""
        record = self._store.get(invocation)
        if record is None or record.consumed is None:
            return False
        return (
            record.consumed.get("execution_id") == eid
            and record.consumed.get("incarnation_id") == self.incarnation_id
        )

    def _stop_attempt(self, invocation: Invocation, admission: AdmissionResult) -> Answer:
        log.warning("admission stopped for %s: %s", execution_id(invocation), admission.summary())
        self._store.fence(
            invocation,
            reason=f"admission {admission.kind}: {admission.reason}",
            now_ms=self._now_ms(),
        )
        attempts = [
            {"url": a.url, "outcome": a.outcome, "detail": a.detail} for a in admission.attempts
        ]
        if admission.kind == "refused":
            return _error(403, "admission_refused", admission.reason, attempts=attempts)
        if admission.kind == "unavailable":
            return _error(503, "admission_unavailable", admission.reason, attempts=attempts)
        return _error(503, "admission_uncertain", admission.reason, attempts=attempts)

    # ------------------------------------------------------------------ existing invocations
    def _existing(self, record: InvocationRecord, document: dict[str, Any], eid: str) -> Answer:
        record = self._settle_interrupted(record)
        if record.binding is not None and record.binding != _canonical(document):
            return _error(
                403,
                "binding_mismatch",
                "this invocation is known with a different binding",
                state=self._state_of(record),
            )
        body: dict[str, Any] = {
            "protocol": PROTOCOL_VERSION,
            "execution_id": eid,
            "incarnation": self.incarnation_id,
        }
        if record.consumed is not None:
            body["incarnation"] = str(record.consumed.get("incarnation_id"))
        body["state"] = self._state_of(record)
        if body["state"] == v1.STATE_FENCED:
            body["fence"] = _fence_view(record)
        return Answer(200, body)

    def _state_of(self, record: InvocationRecord) -> str:
        if record.consumed is not None:
            return str(self._observe_consumed(record)["status"])
        return v1.STATE_RESERVED if self._is_in_flight(record.invocation) else v1.STATE_FENCED

    def _settle_interrupted(self, record: InvocationRecord) -> InvocationRecord:
        """A reservation that is neither consumed, fenced nor in flight was interrupted (a
        restart, or an error mid-path): fence it so that it can never be launched later."""
        if (
            record.binding is None
            or record.consumed is not None
            or record.fence is not None
            or self._is_in_flight(record.invocation)
        ):
            return record
        by = record.reserved_by or "unknown"
        reason = (
            f"interrupted before consume (reserved by incarnation {by}, now {self.incarnation_id})"
        )
        log.warning("fencing %s: %s", execution_id(record.invocation), reason)
        return self._fence(record.invocation, reason)

    # ------------------------------------------------------------------ cancel
    def fence_for_cancel(self, request: CancelRequest) -> Answer | InvocationRecord:
        """The cancel's fence (under the invocation's lock); then ``cancel_answer``."""
        refusal = self.check_binding(request.binding)
        if refusal is not None:
            return refusal
        invocation = request.binding.invocation
        record = self._store.get(invocation)
        if record is None:
            retired = self._retired(invocation, 410)  # no record to stop; do not create one
            if retired is not None:
                return retired
        if (
            record is not None
            and record.binding is not None
            and record.binding != _canonical(request.document)
        ):
            return _error(
                403, "binding_mismatch", "this invocation is known with a different binding"
            )
        record = self._store.fence(invocation, reason=FENCE_REASON_CANCEL, now_ms=self._now_ms())
        self._crash.after("fenced")
        return record

    def cancel_answer(self, request: CancelRequest, record: InvocationRecord) -> Answer:
        """What the cancel achieved: fenced before consume, or the engine's stop (no lock)."""
        body: dict[str, Any] = {
            "protocol": PROTOCOL_VERSION,
            "execution_id": request.binding.execution_id,
            "incarnation": self.incarnation_id,
            "fence": _fence_view(record),
            "report": None,
        }
        if record.consumed is None:
            if not (record.fence or {}).get("before_consume"):
                body["result"] = v1.CANCEL_UNKNOWN  # an invariant broke: never claim more
                return Answer(200, body)
            body["result"] = v1.CANCEL_FENCED_BEFORE_CONSUME
            return Answer(200, body)
        body["result"], body["report"] = self._stop(record)
        return Answer(200, body)

    def _stop(self, record: InvocationRecord) -> tuple[str, dict[str, Any] | None]:
        consumed = record.consumed or {}
        eid = str(consumed.get("execution_id"))
        if consumed.get("incarnation_id") == self.incarnation_id:
            try:
                report = self._engine.cancel(eid, self._cancel_wait_seconds)
            except UnknownExecution:
                report = None
            if report is not None:
                if report.status.terminal:
                    self.on_engine_report(report)  # durable before answering (idempotent)
                observed = self._observe_consumed(record)
                if report.status is ExecutionStatus.CANCELLED:
                    return v1.CANCEL_STOPPED, observed
                if report.status.terminal:
                    return v1.CANCEL_COMPLETED, observed
                return v1.CANCEL_STOPPING, observed
        observed = self._observe_consumed(record)
        status = observed["status"]
        if status == "cancelled":
            return v1.CANCEL_STOPPED, observed
        if status in ("completed", "failed", "timed_out"):
            return v1.CANCEL_COMPLETED, observed
        return v1.CANCEL_UNKNOWN, observed

    # ------------------------------------------------------------------ observation
    def settle(self, invocation: Invocation) -> InvocationRecord | None:
        """An observation's durable part (under the invocation's lock); then ``observation``."""
        if invocation.occurrence_id <= self._retained_through:
            return None  # answered ``retired`` whatever is still kept
        record = self._store.get(invocation)
        return None if record is None else self._settle_interrupted(record)

    def observation(self, invocation: Invocation, record: InvocationRecord | None) -> Answer:
        retired = self._retired(invocation, 410)
        if retired is not None:
            return retired
        if record is None:
            return _error(404, v1.OBSERVE_UNKNOWN_CODE, "no record of this invocation here")
        if record.consumed is not None:
            return Answer(200, self._observe_consumed(record))
        status = v1.STATE_RESERVED if self._is_in_flight(invocation) else v1.STATE_FENCED
        document = _blank_observation(invocation, self.incarnation_id, status)
        document["fence"] = _fence_view(record)
        return Answer(200, document)

    def _observe_consumed(self, record: InvocationRecord) -> dict[str, Any]:
        consumed = record.consumed or {}
        eid = str(consumed.get("execution_id"))
        stored = self._store.get_execution(eid)
        live: ExecutionReport | None = None
        if consumed.get("incarnation_id") == self.incarnation_id:
            with contextlib.suppress(UnknownExecution):
                live = self._engine.status(eid)
        document = _blank_observation(
            record.invocation, str(consumed.get("incarnation_id")), "running"
        )
        document["execution_id"] = eid
        document["fence"] = _fence_view(record) if record.fence else None
        if stored is not None:
            document.update(_stored_view(stored))
        if live is not None and (stored is None or not stored.finished or live.status.terminal):
            document.update(_live_view(live))
        return document

    # ------------------------------------------------------------------ engine reports
    def on_engine_report(self, report: ExecutionReport) -> None:
        """Engine threads: persist progress; the terminal report with its bounded output."""
        try:
            if report.status is ExecutionStatus.RUNNING:
                if report.started_at is None:
                    return
                self._store.update_execution(
                    report.execution_id,
                    status="running",
                    now_ms=self._now_ms(),
                    result=outcome_document(report),
                    durable=False,  # progress only; a restart reports it lost either way
                )
                return
            self._store.update_execution(
                report.execution_id,
                status=report.status.value,
                now_ms=self._now_ms(),
                output=report.output.encode("utf-8"),
                result=outcome_document(report),
                error=report.error,
                # The engine thread does not wait for the fsync (its child goes back to the
                # pool sooner): every read of the record waits for it (group commit), so no
                # answer reveals an outcome before it is durable (docs/worker.md).
                durable=False,
            )
        except WorkerRecordRefused as exc:
            if exc.reason != "execution_finished":  # a repeated terminal report is expected
                log.error("could not record engine report for %s: %s", report.execution_id, exc)

    # ------------------------------------------------------------------ capacity
    def capacity_document(self) -> dict[str, int] | None:
        """What the engine can still take (docs/protocol.md, "Capacity"): ``free_slots`` start
        at once, ``queue_room`` wait in the engine's queue; None for an engine that cannot say."""
        capacity = getattr(self._engine, "capacity", None)
        if capacity is None:
            return None
        max_concurrent, max_queued, reserved = capacity()
        free = max(0, max_concurrent + max_queued - reserved)
        free_slots = max(0, max_concurrent - reserved)
        return {
            "max_concurrent": max_concurrent,
            "max_queued": max_queued,
            "free_slots": free_slots,
            "queue_room": free - free_slots,
        }

    def with_capacity(self, answer: Answer) -> Answer:
        """``answer`` stating the engine's capacity: at the top of a 200/202 document, inside
        ``error`` of an error document (a not-dispatched answer keeps exactly ``protocol`` and
        ``error``). The drivers call it on every exec and observation answer."""
        document = self.capacity_document()
        if document is None:
            return answer
        body = dict(answer.body)
        if answer.status < 300:
            body["capacity"] = document
        elif isinstance(body.get("error"), dict):
            body["error"] = {**body["error"], "capacity": document}
        else:
            return answer
        return Answer(answer.status, body)

    # ------------------------------------------------------------------ checks
    def check_binding(self, binding: v1.Binding) -> Answer | None:
        if binding.namespace != self._settings.namespace:
            return _error(403, "binding_mismatch", "the binding names another namespace")
        if binding.worker_id != self._settings.worker_id:
            return _error(403, "binding_mismatch", "the binding names another worker")
        return None

    def _check_payload(self, binding: v1.Binding, code: str) -> Answer | None:
        if v1.payload_sha256(code) != binding.payload_sha256:
            return _error(403, "binding_mismatch", "payload_sha256 is not the SHA-256 of the code")
        return None

    def _check_grant(self, binding: v1.Binding) -> Answer | None:
        if parse_rfc3339(binding.authority.expires_at) <= self._clock.now():
            return _error(403, "grant_expired", "the grant's expires_at has passed")
        return None

    # ------------------------------------------------------------------ helpers
    def _fence(self, invocation: Invocation, reason: str) -> InvocationRecord:
        return self._store.fence(invocation, reason=reason, now_ms=self._now_ms())

    def _now_ms(self) -> int:
        return now_ms_of(self._clock)

    def _is_in_flight(self, invocation: Invocation) -> bool:
        return invocation.key() in self._in_flight


def _canonical(document: dict[str, Any]) -> Any:
    return json.loads(canonical_json(document))


def _fence_view(record: InvocationRecord) -> dict[str, Any] | None:
    fence = record.fence
    if fence is None:
        return None
    return {
        "reason": fence.get("reason"),
        "before_consume": bool(fence.get("before_consume")),
        "incarnation": fence.get("incarnation_id"),
    }


def _blank_observation(invocation: Invocation, incarnation: str, status: str) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL_VERSION,
        "execution_id": execution_id(invocation),
        "invocation": {
            "namespace": invocation.namespace,
            "schedule_id": invocation.schedule_id,
            "occurrence_id": invocation.occurrence_id,
            "attempt": invocation.attempt,
        },
        "incarnation": incarnation,
        "status": status,
        "result": None,
        "error": None,
        "reason": None,
        "note": None,
        "started_at": None,
        "finished_at": None,
        "output": {"text": "", "bytes": 0, "truncated": False},
        "egress": None,
        "fence": None,
        "pid": None,
    }


def _stored_view(execution: ExecutionRecord) -> dict[str, Any]:
    outcome = execution.result if isinstance(execution.result, dict) else {}
    text = execution.output.decode("utf-8", errors="replace")
    return {
        "status": "running" if execution.status == "submitted" else execution.status,
        "result": outcome.get("value"),
        "error": execution.error,
        "reason": outcome.get("reason"),
        "note": outcome.get("note"),
        "started_at": outcome.get("started_at"),
        "finished_at": outcome.get("finished_at")
        or (None if execution.finished_at_ms is None else _ms_iso(execution.finished_at_ms)),
        "output": {
            "text": text,
            "bytes": len(execution.output),
            "truncated": bool(outcome.get("output_truncated")),
        },
        "egress": bounded_report(outcome.get("egress")),
    }


def _live_view(report: ExecutionReport) -> dict[str, Any]:
    view = {
        "status": report.status.value,
        "result": report.result,
        "error": report.error,
        "reason": report.reason,
        "note": report.note,
        "started_at": _iso(report.started_at),
        "finished_at": _iso(report.finished_at),
        "pid": report.pid,
        # A running execution's console output so far (the engine streams it from the child),
        # bounded by engine.output_limit_bytes like the final output (docs/protocol.md).
        "output": {
            "text": report.output,
            "bytes": len(report.output.encode("utf-8")),
            "truncated": report.output_truncated,
        },
    }
    if report.status.terminal:
        view["egress"] = bounded_report(report.egress)
    return view


def _ms_iso(ms: int) -> str:
    return format_utc(datetime.fromtimestamp(ms / 1000, UTC))
