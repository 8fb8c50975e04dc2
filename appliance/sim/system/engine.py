"""A simulated engine for the system simulator: completes, fails, hangs or loses work.

Theory of operation. ``SimEngine`` keeps the engine's contract as the launch core uses it
(appliance/worker/ports.py ``LaunchEngine``): pool capacity is reserved before the permit
request and refused with ``PoolFull`` when ``slots`` and the ``queued`` places behind them are all
held; a submission beyond ``slots`` waits in FIFO order, ``running`` with ``started_at`` None,
until a running one ends (its timeout starts when it starts); a reservation binds once to
one request and yields a one-shot capability that re-checks the durable consume record before
it submits (``SubmitRefused`` otherwise); ``cancel`` waits a bounded time for the stop and
answers the report as it stands; listeners hear every progress and terminal report.

What a submitted script does is drawn from the simulation's random source at submission:
``complete`` or ``fail`` after a delay, ``hang`` (runs until cancelled or its timeout), or
``lose`` (the engine forgets it: no terminal report ever comes, ``status`` does not know it).
A cancel stops a hanging or running script at once or only later (``stop_later``), as a child
that takes time to be reaped. Nothing here reads a clock or sleeps: ``schedule(delay_ms, fn)``
is the simulation's event queue and ``now`` its clock.

``submitted`` records every launch (execution id -> the incarnation's store said consumed); the
checkers read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from appliance.engine.model import (
    REASON_CANCELLED,
    REASON_EXCEPTION,
    REASON_TIMEOUT,
    CapabilityError,
    EngineClosed,
    ExecutionReport,
    ExecutionRequest,
    ExecutionStatus,
    PoolFull,
    SubmitRefused,
    UnknownExecution,
)
from appliance.sim.network import RandomSource
from appliance.worker.ports import EngineListener, Recheck

BEHAVIOURS = ("complete", "fail", "hang", "lose")


@dataclass(frozen=True)
class EngineFaults:
    """How scripts behave; weights for complete, fail, hang, lose; delays in ms."""

    weights: tuple[float, float, float, float] = (0.7, 0.15, 0.1, 0.05)
    # A run lasts this share of its timeout (past 1.0: it times out); the timeout is the
    # grant's, in the owners' scaled seconds, so that both sides measure one duration.
    run_share: tuple[float, float] = (0.02, 1.2)
    time_scale: float = 1.0
    stop_later: float = 0.3  # a cancel that the engine confirms only after its wait
    stop_later_ms_max: int = 5_000


@dataclass
class _Run:
    request: ExecutionRequest
    behaviour: str
    started_at: datetime | None  # None: waiting in the queue for a slot
    status: ExecutionStatus = ExecutionStatus.RUNNING
    finished_at: datetime | None = None
    stopping: bool = False
    forgotten: bool = False

    def report(self) -> ExecutionReport:
        reason = {
            ExecutionStatus.FAILED: REASON_EXCEPTION,
            ExecutionStatus.TIMED_OUT: REASON_TIMEOUT,
            ExecutionStatus.CANCELLED: REASON_CANCELLED,
        }.get(self.status)
        return ExecutionReport(
            execution_id=self.request.execution_id,
            status=self.status,
            result={"ok": True} if self.status is ExecutionStatus.COMPLETED else None,
            error="boom" if self.status is ExecutionStatus.FAILED else None,
            reason=reason,
            output="tick\n" if self.status.terminal else "",
            started_at=self.started_at,
            finished_at=self.finished_at,
        )


class SimReservation:
    def __init__(self, engine: SimEngine, token: int) -> None:
        self._engine = engine
        self.token = token
        self._released = False
        self._bound = False

    def capability(self, request: ExecutionRequest, recheck: Recheck) -> SimCapability:
        request.validate()
        if self._released:
            raise CapabilityError("reservation was already released")
        if self._bound:
            raise CapabilityError("reservation is already bound to a capability")
        self._bound = True
        return SimCapability(self, request, recheck)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._engine._held.discard(self.token)

    def _hand_over(self) -> None:
        if self._released:
            raise CapabilityError("reservation was already released")
        self._released = True  # the execution holds the slot now


class SimCapability:
    def __init__(self, reservation: SimReservation, request: ExecutionRequest, recheck: Recheck):
        self._reservation = reservation
        self._request = request
        self._recheck = recheck
        self._used = False

    def submit(self) -> ExecutionReport:
        if self._used:
            raise CapabilityError("capability was already used")
        self._used = True
        if self._recheck() is not True:
            self._reservation.release()
            raise SubmitRefused("re-check did not confirm the durable consume record")
        return self._reservation._engine._submit(self._reservation, self._request)


@dataclass
class SimEngine:
    """One engine per worker incarnation; ``close`` when the incarnation dies."""

    rng: RandomSource
    faults: EngineFaults
    schedule: Callable[[int, Callable[[], None]], None]
    now: Callable[[], datetime]
    on_launch: Callable[[ExecutionRequest], None]
    slots: int = 4
    queued: int = 0  # places behind the slots (the engine's max_queued)
    _held: set[int] = field(default_factory=set)
    _runs: dict[str, _Run] = field(default_factory=dict)
    _waiting: list[_Run] = field(default_factory=list)  # submitted, not started (FIFO)
    _listeners: list[EngineListener] = field(default_factory=list)
    _next_token: int = 0
    closed: bool = False

    # -- the LaunchEngine contract --

    def reserve(self) -> SimReservation:
        if self.closed:
            raise EngineClosed("the engine is shut down")
        if len(self._held) + self._running() >= self.slots + self.queued:
            raise PoolFull(f"{self.slots} slots and {self.queued} queue places held")
        self._next_token += 1
        self._held.add(self._next_token)
        return SimReservation(self, self._next_token)

    def capacity(self) -> tuple[int, int, int]:
        """``(max_concurrent, max_queued, reserved)``: reserved counts every unit held."""
        return self.slots, self.queued, len(self._held) + self._running()

    def add_listener(self, listener: EngineListener) -> None:
        self._listeners.append(listener)

    def status(self, execution_id: str) -> ExecutionReport:
        run = self._runs.get(execution_id)
        if run is None or run.forgotten:
            raise UnknownExecution(execution_id)
        return run.report()

    def cancel(self, execution_id: str, wait_seconds: float = 5.0) -> ExecutionReport:
        run = self._runs.get(execution_id)
        if run is None or run.forgotten:
            raise UnknownExecution(execution_id)
        if run.status.terminal:
            return run.report()
        if run.started_at is None:  # still queued: it leaves the queue, nothing ran
            self._finish(run, ExecutionStatus.CANCELLED, deliver=False)
            return run.report()
        if not run.stopping:
            run.stopping = True
            if self.rng.random() < self.faults.stop_later:
                delay = self.rng.randint(
                    int(wait_seconds * 1000) + 1, self.faults.stop_later_ms_max
                )
                self.schedule(delay, lambda: self._finish(run, ExecutionStatus.CANCELLED))
            else:
                self._finish(run, ExecutionStatus.CANCELLED, deliver=False)
        return run.report()

    # -- internals --

    def _running(self) -> int:
        """Every submitted run that holds a unit: running or waiting in the queue."""
        return sum(1 for r in self._runs.values() if not r.status.terminal and not r.forgotten)

    def _started(self) -> int:
        return sum(
            1
            for r in self._runs.values()
            if r.started_at is not None and not r.status.terminal and not r.forgotten
        )

    def _submit(self, reservation: SimReservation, request: ExecutionRequest) -> ExecutionReport:
        if self.closed:
            reservation.release()
            raise EngineClosed("the engine is shut down")
        if request.execution_id in self._runs:
            reservation.release()
            raise SubmitRefused(f"execution {request.execution_id} was already submitted")
        reservation._hand_over()
        self._held.discard(reservation.token)
        self.on_launch(request)
        behaviour = _choose(self.rng, self.faults.weights)
        run = _Run(request, behaviour, None)
        self._runs[request.execution_id] = run
        if self._started() < self.slots:
            self._start(run)
        else:
            self._waiting.append(run)
        return run.report()

    def _start(self, run: _Run) -> None:
        run.started_at = self.now()
        request, behaviour = run.request, run.behaviour
        self.schedule(0, lambda: self._emit(run))  # the "started" progress report
        timeout_ms = int(request.timeout_seconds * 1000 / self.faults.time_scale)
        low, high = self.faults.run_share
        delay = int(timeout_ms * (low + (high - low) * self.rng.random()))
        if behaviour == "hang":
            self.schedule(timeout_ms, lambda: self._finish(run, ExecutionStatus.TIMED_OUT))
        elif behaviour == "lose":
            self.schedule(delay, lambda: self._forget(run))
        elif delay >= timeout_ms:
            self.schedule(timeout_ms, lambda: self._finish(run, ExecutionStatus.TIMED_OUT))
        else:
            status = (
                ExecutionStatus.COMPLETED if behaviour == "complete" else ExecutionStatus.FAILED
            )
            self.schedule(delay, lambda: self._finish(run, status))

    def _start_waiting(self) -> None:
        """A slot freed: the oldest waiting run starts (FIFO, as the engine pool)."""
        self._waiting = [r for r in self._waiting if not r.status.terminal and not r.forgotten]
        while self._waiting and self._started() < self.slots and not self.closed:
            self._start(self._waiting.pop(0))

    def _forget(self, run: _Run) -> None:
        if self.closed or run.status.terminal:
            return
        run.forgotten = True
        self._start_waiting()

    def _finish(self, run: _Run, status: ExecutionStatus, deliver: bool = True) -> None:
        if self.closed or run.status.terminal or run.forgotten:
            return
        run.status = status
        run.finished_at = self.now()
        if deliver:
            self._emit(run)
        self._start_waiting()
        # else: the caller (cancel) returns the terminal report and the core records it

    def _emit(self, run: _Run) -> None:
        if self.closed or run.forgotten:
            return
        report = run.report()
        for listener in list(self._listeners):
            listener(report)

    def close(self) -> None:
        """The incarnation died: its children died with it, nothing reports any more."""
        self.closed = True

    def runs(self) -> dict[str, Any]:
        return {eid: run.status.value for eid, run in self._runs.items()}


def _choose(rng: RandomSource, weights: tuple[float, ...]) -> str:
    roll = rng.random() * sum(weights)
    for behaviour, weight in zip(BEHAVIOURS, weights, strict=True):
        if roll < weight:
            return behaviour
        roll -= weight
    return BEHAVIOURS[0]
