"""The worker's three operations for waitress threads: the driver of the launch core.

Theory of operation. The decisions (steps, fences, answers) are ``LaunchCore``'s
(appliance/worker/launch.py, whose docstring is the launch path's theory of operation). This
driver adds what a core may not hold: one lock per invocation, which serializes exec, cancel and
the receipt, and the permit request over HTTP, made with the lock released so that a cancel can
fence the invocation meanwhile. The routes (appliance/worker/routes.py) only parse and call it.

Retention: the runner's W (a query parameter of exec and observation) is noted under one lock
(so concurrent requests can only raise it), and one bounded prune batch runs on an observation,
never on an exec — pruning is never on the launch path, and a batch another thread is already
running is not waited for.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from appliance.config.worker import WorkerConfig
from appliance.engine import Engine
from appliance.engine.clock import Clock
from appliance.protocol.v1 import Invocation
from appliance.store.worker_store import WorkerStore
from appliance.worker.admission import AdmissionClient, AdmissionResult
from appliance.worker.crash import CrashHook
from appliance.worker.launch import (
    CANCEL_WAIT_SECONDS_DEFAULT,
    FENCE_REASON_CANCEL,
    Answer,
    LaunchCore,
    LaunchSettings,
    now_ms_of,
    outcome_document,
)
from appliance.worker.wire import CancelRequest, ExecRequest

__all__ = [
    "CANCEL_WAIT_SECONDS_DEFAULT",
    "FENCE_REASON_CANCEL",
    "Answer",
    "InvocationLocks",
    "WorkerService",
    "now_ms_of",
    "outcome_document",
]

log = logging.getLogger("appliance.worker")


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


class WorkerService:
    """Exec, cancel and observe; thread-safe (called from waitress threads)."""

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
        self._store = store
        self._engine = engine
        self._admission = admission
        self._locks = InvocationLocks()
        self._retention = threading.Lock()
        self._core = LaunchCore(
            settings=LaunchSettings.of(config),
            store=store,
            engine=engine,
            clock=clock,
            crash=crash or CrashHook(None),
            cancel_wait_seconds=cancel_wait_seconds,
        )
        self.incarnation_id = self._core.incarnation_id

    def mark_lost_executions(self) -> list[str]:
        return self._core.mark_lost_executions()

    def execute(self, request: ExecRequest, retained_through: int | None = None) -> Answer:
        """The exec, its answer stating the engine's capacity (the owner paces by it)."""
        return self._core.with_capacity(self._execute(request, retained_through))

    def _execute(self, request: ExecRequest, retained_through: int | None) -> Answer:
        refusal = self._core.check_binding(request.binding)
        if refusal is not None:
            return refusal  # a W from a runner of another namespace or worker is not taken
        self.note_retained_through(retained_through)
        invocation = request.binding.invocation
        with self._locks.hold(invocation):
            step = self._core.begin_exec(request)
        if isinstance(step, Answer):
            return step
        try:
            admission = self._request_permit(request)
            with self._locks.hold(invocation):
                return self._core.permit_arrived(step, admission)
        finally:
            self._core.end_exec(step)

    def _request_permit(self, request: ExecRequest) -> AdmissionResult:
        try:
            return self._admission.request_permit(request.binding, request.document)
        except Exception as exc:  # a bug must not leave the attempt in a state nobody records
            log.exception("permit request failed unexpectedly")
            return AdmissionResult("uncertain", None, f"permit request failed: {exc}")

    def cancel(self, request: CancelRequest) -> Answer:
        with self._locks.hold(request.binding.invocation):
            fenced = self._core.fence_for_cancel(request)
        if isinstance(fenced, Answer):
            return fenced
        return self._core.cancel_answer(request, fenced)

    def observe(self, invocation: Invocation, retained_through: int | None = None) -> Answer:
        self.note_retained_through(retained_through)
        with self._locks.hold(invocation):
            record = self._core.settle(invocation)
        answer = self._core.with_capacity(self._core.observation(invocation, record))
        self.prune_once()
        return answer

    # ---- retention -----------------------------------------------------------------------------
    def note_retained_through(self, value: int | None) -> None:
        """The runner's W from a request's query (None: not stated)."""
        if value is None:
            return
        with self._retention:
            self._core.note_retained_through(value)

    def prune_once(self) -> bool:
        """One retention batch if one is due and no other thread is running one."""
        if not self._retention.acquire(blocking=False):
            return False
        try:
            return self._core.prune_batch()
        except Exception:  # a failed batch deletes nothing (one transaction): try again later
            log.exception("retention batch failed")
            return False
        finally:
            self._retention.release()

    @property
    def retained_through(self) -> int:
        return self._core.retained_through
