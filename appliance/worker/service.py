"""The worker's launch path, cancel and observation: at most one submission per invocation.

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

Concurrency: one lock per invocation serializes exec, cancel and the receipt. The lock is NOT
held while the permit request is in flight, so a cancel can fence the invocation meanwhile; the
consume that follows then refuses (``fenced``) and nothing is submitted. consume, submit and the
receipt happen under the lock as one critical section, so a cancel sees either "not consumed"
(and its fence provably came first) or "consumed, submitted and receipted".

Every stop of the admission attempt (refused, uncertain, unavailable) fences the invocation with
the reason: "stops the attempt and records why", and no later request can revive it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from appliance.config.rfc3339 import format_utc
from appliance.config.worker import WorkerConfig
from appliance.core.canonical import canonical_json
from appliance.engine import (
    Engine,
    EngineError,
    ExecutionReport,
    ExecutionRequest,
    ExecutionStatus,
    PoolFull,
    ScheduledInfo,
    UnknownExecution,
)
from appliance.engine.clock import Clock
from appliance.store.errors import WorkerRecordRefused
from appliance.store.worker_store import (
    ExecutionRecord,
    Invocation,
    InvocationRecord,
    WorkerStore,
)
from appliance.worker.admission import AdmissionClient, AdmissionResult
from appliance.worker.crash import CrashHook
from appliance.worker.wire import PROTOCOL_VERSION, Binding, ExecRequest, execution_id_of

log = logging.getLogger("appliance.worker")

CANCEL_WAIT_SECONDS_DEFAULT: Final = 2.0
FENCE_REASON_CANCEL: Final = "cancel requested"


@dataclass(frozen=True)
class Answer:
    """An HTTP answer of the worker: status code and JSON body (always ``"protocol": 1``)."""

    status: int
    body: dict[str, Any]


def _error(status: int, code: str, message: str, **fields: Any) -> Answer:
    error = {"code": code, "message": message, **fields}
    return Answer(status, {"protocol": PROTOCOL_VERSION, "error": error})


def now_ms_of(clock: Clock) -> int:
    return int(clock.now().timestamp() * 1000)


class InvocationLocks:
    """One lock per invocation key, dropped when nobody holds or waits for it (bounded)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, int, int, int], tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, invocation: Invocation) -> Iterator[None]:
        key = invocation.key()
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


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
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else format_utc(value)


class WorkerService:
    """The three worker operations; thread-safe (called from waitress threads)."""

    def __init__(
        self,
        *,
        config: WorkerConfig,
        store: WorkerStore,
        engine: Engine,
        admission: AdmissionClient,
        clock: Clock,
        crash: CrashHook | None = None,
        cancel_wait_seconds: float = CANCEL_WAIT_SECONDS_DEFAULT,
    ) -> None:
        self._config = config
        self._store = store
        self._engine = engine
        self._admission = admission
        self._clock = clock
        self._crash = crash or CrashHook(None)
        self._cancel_wait_seconds = cancel_wait_seconds
        self._locks = InvocationLocks()
        self._in_flight: set[tuple[str, int, int, int]] = set()
        self._in_flight_guard = threading.Lock()
        self.incarnation_id = store.incarnation_id
        engine.add_listener(self._on_engine_report)

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
    def execute(self, request: ExecRequest) -> Answer:
        binding = request.binding
        refusal = self._check_binding(binding)
        if refusal is not None:
            return refusal
        invocation = binding.invocation
        with self._locks.hold(invocation):
            existing = self._store.get(invocation)
            if existing is not None:
                # Before the payload and expiry checks: a repeated exec for a known invocation
                # must learn its state, never a refusal that could read as "not launched".
                return self._existing(existing, binding)
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
                reserved = self._store.reserve(invocation, binding.document, now_ms=self._now_ms())
            except BaseException:
                reservation.release()
                raise
            if not reserved.created:  # cannot happen under the lock; refuse rather than guess
                reservation.release()
                return self._existing(reserved.record, binding)
            self._set_in_flight(invocation, True)
        self._crash.after("reserved")
        try:
            admission = self._request_permit(binding)
            with self._locks.hold(invocation):
                # Cleared under the lock: nobody may mistake this reservation for an
                # interrupted one between the permit's arrival and its consume.
                self._set_in_flight(invocation, False)
                return self._launch(request, admission, reservation)
        finally:
            self._set_in_flight(invocation, False)
            reservation.release()  # no effect once submitted: the execution owns it then

    def _request_permit(self, binding: Binding) -> AdmissionResult:
        try:
            return self._admission.request_permit(binding)
        except Exception as exc:  # a bug must not leave the attempt in a state nobody records
            log.exception("permit request failed unexpectedly")
            return AdmissionResult("uncertain", None, f"permit request failed: {exc}")

    def _launch(self, request: ExecRequest, admission: AdmissionResult, reservation: Any) -> Answer:
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
        execution_id = binding.execution_id
        try:
            self._store.consume(invocation, execution_id=execution_id, now_ms=self._now_ms())
        except WorkerRecordRefused as exc:
            if exc.reason == "fenced":
                return _error(
                    403, "fenced", "a cancel fenced this invocation before its permit was consumed"
                )
            self._fence(invocation, f"permit not consumed ({exc.reason})")
            message = f"the permit could not be consumed ({exc.reason})"
            return _error(503, "consume_refused", message)
        self._crash.after("consumed")
        return self._submit(request, reservation, execution_id)

    def _submit(self, request: ExecRequest, reservation: Any, execution_id: str) -> Answer:
        binding = request.binding
        invocation = binding.invocation
        engine_request = ExecutionRequest(
            execution_id=execution_id,
            code=request.code,
            scheduled=ScheduledInfo(
                namespace=binding.namespace,
                schedule_id=binding.schedule_id,
                schedule_name=binding.schedule_name,
                occurrence_id=binding.occurrence_id,
                attempt=binding.attempt,
                ownership_epoch=binding.epoch,
                due_time=format_utc(binding.due_time),
            ),
            heap_mb=self._config.engine.effective_heap_mb(binding.authority.heap_mb),
            timeout_seconds=self._config.engine.effective_timeout_seconds(
                binding.authority.timeout_seconds
            ),
        )
        try:
            capability = reservation.capability(
                engine_request, recheck=lambda: self._consumed_here(invocation, execution_id)
            )
            capability.submit()
        except EngineError as exc:
            # Consumed but not submitted: the permit is spent; report it, never launch it later.
            log.error("execution %s was consumed but not submitted: %s", execution_id, exc)
            with contextlib.suppress(WorkerRecordRefused):
                self._store.update_execution(
                    execution_id,
                    status="lost",
                    now_ms=self._now_ms(),
                    error=f"consumed but not submitted to the engine: {exc}",
                )
            return _error(503, "submit_failed", "the permit was consumed but the engine refused")
        log.info("submitted execution %s (incarnation %s)", execution_id, self.incarnation_id)
        self._crash.after("submitted")
        accepted_at = self._clock.now()
        # Evidence, not a decision: consume (durable) already made a restart report this
        # execution instead of relaunching it, so the receipt skips its own fsync.
        self._store.record_receipt(
            invocation,
            {
                "execution_id": execution_id,
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
                "execution_id": execution_id,
                "incarnation": self.incarnation_id,
                "state": "accepted",
            },
        )

    def _consumed_here(self, invocation: Invocation, execution_id: str) -> bool:
        """The capability's re-check: the durable record says THIS incarnation consumed it."""
        record = self._store.get(invocation)
        if record is None or record.consumed is None:
            return False
        return (
            record.consumed.get("execution_id") == execution_id
            and record.consumed.get("incarnation_id") == self.incarnation_id
        )

    def _stop_attempt(self, invocation: Invocation, admission: AdmissionResult) -> Answer:
        log.warning(
            "admission stopped for %s: %s", execution_id_of(invocation), admission.summary()
        )
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
    def _existing(self, record: InvocationRecord, binding: Binding) -> Answer:
        record = self._settle_interrupted(record)
        if record.binding is not None and record.binding != _canonical(binding.document):
            return _error(
                403,
                "binding_mismatch",
                "this invocation is known with a different binding",
                state=self._state_of(record),
            )
        body: dict[str, Any] = {
            "protocol": PROTOCOL_VERSION,
            "execution_id": binding.execution_id,
            "incarnation": self.incarnation_id,
        }
        if record.consumed is not None:
            body["incarnation"] = str(record.consumed.get("incarnation_id"))
        body["state"] = self._state_of(record)
        if body["state"] == "fenced":
            body["fence"] = _fence_view(record)
        return Answer(200, body)

    def _state_of(self, record: InvocationRecord) -> str:
        if record.consumed is not None:
            return str(self._observe_consumed(record)["status"])
        return "reserved" if self._is_in_flight(record.invocation) else "fenced"

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
        log.warning("fencing %s: %s", execution_id_of(record.invocation), reason)
        return self._fence(record.invocation, reason)

    # ------------------------------------------------------------------ cancel
    def cancel(self, binding: Binding) -> Answer:
        refusal = self._check_binding(binding)
        if refusal is not None:
            return refusal
        invocation = binding.invocation
        with self._locks.hold(invocation):
            record = self._store.get(invocation)
            if (
                record is not None
                and record.binding is not None
                and record.binding != _canonical(binding.document)
            ):
                return _error(
                    403, "binding_mismatch", "this invocation is known with a different binding"
                )
            record = self._store.fence(
                invocation, reason=FENCE_REASON_CANCEL, now_ms=self._now_ms()
            )
            self._crash.after("fenced")
        body: dict[str, Any] = {
            "protocol": PROTOCOL_VERSION,
            "execution_id": binding.execution_id,
            "incarnation": self.incarnation_id,
            "fence": _fence_view(record),
            "report": None,
        }
        if record.consumed is None:
            if not (record.fence or {}).get("before_consume"):
                body["result"] = "unknown"  # an invariant broke: never claim more than we know
                return Answer(200, body)
            body["result"] = "fenced_before_consume"
            return Answer(200, body)
        body["result"], body["report"] = self._stop(record)
        return Answer(200, body)

    def _stop(self, record: InvocationRecord) -> tuple[str, dict[str, Any] | None]:
        consumed = record.consumed or {}
        execution_id = str(consumed.get("execution_id"))
        if consumed.get("incarnation_id") == self.incarnation_id:
            try:
                report = self._engine.cancel(execution_id, self._cancel_wait_seconds)
            except UnknownExecution:
                report = None
            if report is not None:
                if report.status.terminal:
                    self._on_engine_report(report)  # durable before answering (idempotent)
                observed = self._observe_consumed(record)
                if report.status is ExecutionStatus.CANCELLED:
                    return "stopped", observed
                if report.status.terminal:
                    return "completed", observed
                return "stopping", observed
        observed = self._observe_consumed(record)
        status = observed["status"]
        if status == "cancelled":
            return "stopped", observed
        if status in ("completed", "failed", "timed_out"):
            return "completed", observed
        return "unknown", observed

    # ------------------------------------------------------------------ observation
    def observe(self, invocation: Invocation) -> Answer:
        with self._locks.hold(invocation):
            record = self._store.get(invocation)
            if record is None:
                return _error(404, "unknown_execution", "no record of this invocation here")
            record = self._settle_interrupted(record)
        if record.consumed is not None:
            return Answer(200, self._observe_consumed(record))
        status = "reserved" if self._is_in_flight(invocation) else "fenced"
        document = _blank_observation(invocation, self.incarnation_id, status)
        document["fence"] = _fence_view(record)
        return Answer(200, document)

    def _observe_consumed(self, record: InvocationRecord) -> dict[str, Any]:
        consumed = record.consumed or {}
        execution_id = str(consumed.get("execution_id"))
        stored = self._store.get_execution(execution_id)
        live: ExecutionReport | None = None
        if consumed.get("incarnation_id") == self.incarnation_id:
            with contextlib.suppress(UnknownExecution):
                live = self._engine.status(execution_id)
        document = _blank_observation(
            record.invocation, str(consumed.get("incarnation_id")), "running"
        )
        document["execution_id"] = execution_id
        document["fence"] = _fence_view(record) if record.fence else None
        if stored is not None:
            document.update(_stored_view(stored))
        if live is not None and (stored is None or not stored.finished or live.status.terminal):
            document.update(_live_view(live))
        return document

    # ------------------------------------------------------------------ engine reports
    def _on_engine_report(self, report: ExecutionReport) -> None:
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
            )
        except WorkerRecordRefused as exc:
            if exc.reason != "execution_finished":  # a repeated terminal report is expected
                log.error("could not record engine report for %s: %s", report.execution_id, exc)

    # ------------------------------------------------------------------ checks
    def _check_binding(self, binding: Binding) -> Answer | None:
        if binding.namespace != self._config.namespace:
            return _error(403, "binding_mismatch", "the binding names another namespace")
        if binding.worker_id != self._config.worker_id:
            return _error(403, "binding_mismatch", "the binding names another worker")
        return None

    def _check_payload(self, binding: Binding, code: str) -> Answer | None:
        digest = hashlib.sha256(code.encode("utf-8")).hexdigest()
        if digest != binding.payload_sha256:
            return _error(403, "binding_mismatch", "payload_sha256 is not the SHA-256 of the code")
        return None

    def _check_grant(self, binding: Binding) -> Answer | None:
        if binding.authority.expires_at <= self._clock.now():
            return _error(403, "grant_expired", "the grant's expires_at has passed")
        return None

    # ------------------------------------------------------------------ helpers
    def _fence(self, invocation: Invocation, reason: str) -> InvocationRecord:
        return self._store.fence(invocation, reason=reason, now_ms=self._now_ms())

    def _now_ms(self) -> int:
        return now_ms_of(self._clock)

    def _set_in_flight(self, invocation: Invocation, value: bool) -> None:
        with self._in_flight_guard:
            if value:
                self._in_flight.add(invocation.key())
            else:
                self._in_flight.discard(invocation.key())

    def _is_in_flight(self, invocation: Invocation) -> bool:
        with self._in_flight_guard:
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
        "execution_id": execution_id_of(invocation),
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
    }
    if report.status.terminal:
        view["output"] = {
            "text": report.output,
            "bytes": len(report.output.encode("utf-8")),
            "truncated": report.output_truncated,
        }
    return view


def _ms_iso(ms: int) -> str:
    return format_utc(datetime.fromtimestamp(ms / 1000, UTC))
