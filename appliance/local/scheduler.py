"""The local scheduler: one coordinator thread, a fixed callback pool, optional durable state.

Theory of operation (seeds/002, "appcore-scheduler"):
- ``Scheduler`` is a thin facade over ``_Core``. Threads reference only the core, so when the
  facade is garbage collected (or the interpreter exits) a ``weakref.finalize`` requests shutdown
  without waiting; unfinished threads are daemons and are detached.
- Registered tasks wait in a ``DueIndex`` (one deadline heap per priority). A scan takes only as
  many due tasks as the bounded worker queue has free slots (priority descending, earlier
  deadline, registration order). Due work that does not fit stays scheduled, keeps its attempt
  number (no retry is consumed) and is counted in ``queue_saturation_count``. While saturated,
  the worker that takes an item off the queue refills the freed slot itself, under the same lock
  acquisition, so dispatch under load costs no coordinator wake-up per task.
- Workers run callbacks with a ``TaskContext``; a failed attempt retries after the policy delay,
  a finished run moves to the next slot. Every deadline is computed with checked arithmetic; an
  unrepresentable one fails that task with ``InvalidSchedule`` and the coordinator carries on.
- Shutdown closes admission atomically with the stop request, sets cancellation on every accepted
  (queued or running) callback, lets workers drain the queue, and joins within a budget. Nothing
  is killed preemptively: callbacks must cooperate through ``is_cancelled()``.
- Durable tasks (``schedule_durable``) take a claim stamped with this scheduler's fencing epoch
  before each run, renew it while running and commit a receipt with the next run afterwards.
"""

from __future__ import annotations

import threading
import weakref
from datetime import datetime, timedelta
from typing import NamedTuple

from appliance.core.errors import InvalidSchedule

from .clock import Clock, SystemClock, monotonic_s
from .config import (
    MAX_DURABLE_TASKS,
    SHUTDOWN_WAIT_SECONDS,
    DurableSchedulerConfigV1,
    SchedulerConfig,
)
from .dueindex import DueIndex
from .durable.provider import SchedulerStateProvider
from .durable.records import Claim, Receipt, check_key
from .errors import (
    ClaimConflict,
    ClaimLost,
    DurabilityNotConfigured,
    SchedulerClosed,
    SchedulerError,
    ShutdownIncomplete,
    StateProviderError,
    TaskLimitExceeded,
)
from .pool import WorkerPool
from .tasks import (
    MisfirePolicy,
    RunOutcome,
    RunResult,
    ScheduledTask,
    SchedulerSnapshot,
    TaskCancelled,
    TaskContext,
    TaskSnapshot,
    TaskState,
)
from .threads import start_thread
from .timemath import EPOCH, checked_add, micros_since_epoch

_WAITING = (TaskState.SCHEDULED, TaskState.RETRY_WAITING)


class _Entry:
    """Mutable per-task state; only touched under the core lock (or by the one running worker)."""

    __slots__ = (
        "attempt",
        "cancel_event",
        "cancel_requested",
        "claim",
        "claim_lost",
        "due",
        "due_us",
        "durable_key",
        "error",
        "last_result",
        "priority",
        "runs_completed",
        "state",
        "task",
        "task_id",
        "version",
    )

    def __init__(self, task_id: int, task: ScheduledTask, durable_key: str | None):
        self.task_id = task_id
        self.task = task
        self.priority = task.priority
        self.durable_key = durable_key
        self.state = TaskState.SCHEDULED
        self.due: datetime | None = None
        self.due_us = 0
        self.attempt = 1
        self.runs_completed = 0
        self.version = 0
        self.cancel_event = threading.Event()
        self.cancel_requested = False
        self.claim: Claim | None = None
        self.claim_lost = False
        self.last_result: RunResult | None = None
        self.error: str | None = None

    def snapshot(self) -> TaskSnapshot:
        return TaskSnapshot(
            task_id=self.task_id,
            name=self.task.name,
            state=self.state,
            next_due=self.due if self.state in (*_WAITING, TaskState.QUEUED) else None,
            attempt=self.attempt,
            runs_completed=self.runs_completed,
            priority=self.priority,
            durable_key=self.durable_key,
            last_result=self.last_result,
            error=self.error,
        )


class _Plan(NamedTuple):
    """What happens to a task after one attempt (computed before the durable commit)."""

    state: TaskState
    due: datetime | None
    attempt: int
    runs_completed: int
    error: str | None = None


class _Core:
    def __init__(
        self,
        config: SchedulerConfig,
        clock: Clock,
        provider: SchedulerStateProvider | None = None,
        durable: DurableSchedulerConfigV1 | None = None,
    ):
        self.config = config
        self.clock = clock
        self.provider = provider
        self.durable = durable
        self.epoch: int | None = None
        if provider is not None:
            self.epoch = provider.acquire_epoch()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.wakeup = threading.Event()
        self.entries: dict[int, _Entry] = {}  # live (non-terminal) tasks
        self.durable_ids: dict[str, int] = {}
        self.index: DueIndex[_Entry] = DueIndex()
        self.queue_capacity = config.queue_capacity
        self.queued = 0  # items handed to the pool and not yet taken by a worker
        self.running: dict[int, _Entry] = {}
        self.next_id = 1
        self.admission_open = True
        self.stop_requested = False
        self.saturated = False
        self.saturation_count = 0
        self.waiter_count = 0  # threads blocked in wait_for
        self.shutdown_pending = False  # set by the finalizer when it could not take the lock
        self.pool: WorkerPool[_Entry] = WorkerPool(
            config.max_concurrent_tasks, self._run, "appliance-local-worker"
        )
        self.coordinator = start_thread(self._coordinate, "appliance-local-coordinator")

    # ---- admission ------------------------------------------------------------------------------
    def admit(self, task: ScheduledTask, durable_key: str | None = None) -> _Entry:
        now = self.clock.now()
        with self.lock:
            self._check_admission()
            entry = self._new_entry(task, durable_key)
            first_due = task.schedule.first_due(now)  # InvalidSchedule reaches the caller
            self._arm(entry, first_due, 1)
            self.entries[entry.task_id] = entry
        self.wakeup.set()
        return entry

    def admit_durable(self, task_key: str, task: ScheduledTask) -> _Entry:
        if self.provider is None or self.epoch is None:
            raise DurabilityNotConfigured("schedule_durable needs Scheduler.with_state_provider")
        check_key(task_key)
        with self.lock:
            self._check_admission()
            if task_key in self.durable_ids:
                raise SchedulerError(f"durable task {task_key!r} is already scheduled here")
            if len(self.durable_ids) >= MAX_DURABLE_TASKS:
                raise TaskLimitExceeded(f"more than {MAX_DURABLE_TASKS} durable tasks")
            self.durable_ids[task_key] = 0  # reserve the key while the provider is consulted
        try:
            due, attempt, runs = self._recover(task_key, task)
        except BaseException:
            with self.lock:
                del self.durable_ids[task_key]
            raise
        with self.lock:
            try:
                self._check_admission()
            except SchedulerClosed:
                del self.durable_ids[task_key]
                raise
            entry = self._new_entry(task, task_key)
            entry.runs_completed = runs
            self.durable_ids[task_key] = entry.task_id
            if due is None:
                entry.state = TaskState.COMPLETED  # the stored record says it is finished
                del self.durable_ids[task_key]
            else:
                self._arm(entry, due, attempt)
                self.entries[entry.task_id] = entry
        self.wakeup.set()
        return entry

    def _recover(self, task_key: str, task: ScheduledTask) -> tuple[datetime | None, int, int]:
        """Next run, attempt and completed runs from the provider, applying the misfire policy."""
        provider = self.provider
        if provider is None:
            raise DurabilityNotConfigured("no state provider")
        now = self.clock.now()
        definition = task.schedule.describe()
        record = provider.load(task_key)
        if record is None or record.definition != definition:
            due = task.schedule.first_due(now)
            record = provider.register(task_key, definition, due, 1)
            return due, 1, record.runs_completed
        due, attempt = record.next_run, record.attempt
        if due is not None and due < now and task.misfire is MisfirePolicy.SKIP:
            due, attempt = task.schedule.next_due(due, now), 1
            provider.register(task_key, definition, due, attempt)
        return due, attempt, record.runs_completed

    def _check_admission(self) -> None:
        if not self.admission_open:
            raise SchedulerClosed("scheduler is shut down; admission is closed")
        if len(self.entries) >= self.config.max_tasks:
            raise TaskLimitExceeded(f"max_tasks {self.config.max_tasks} tasks already registered")

    def _new_entry(self, task: ScheduledTask, durable_key: str | None) -> _Entry:
        entry = _Entry(self.next_id, task, durable_key)
        self.next_id += 1
        return entry

    def _arm(self, entry: _Entry, due: datetime, attempt: int, retry: bool = False) -> None:
        entry.due = due
        entry.due_us = micros_since_epoch(due)
        entry.attempt = attempt
        entry.state = TaskState.RETRY_WAITING if retry else TaskState.SCHEDULED
        entry.version += 1
        self.index.push(entry)

    def _retire(self, entry: _Entry, state: TaskState) -> None:
        entry.state = state
        entry.version += 1  # any index item for it is now stale
        self.entries.pop(entry.task_id, None)
        if entry.durable_key is not None:
            self.durable_ids.pop(entry.durable_key, None)
        self._notify()

    # ---- coordinator ----------------------------------------------------------------------------
    def _coordinate(self) -> None:
        while True:
            self.wakeup.clear()
            if self.shutdown_pending:
                self.request_shutdown()
            with self.lock:
                if self.stop_requested:
                    return
                now = self.clock.now()
                deadline = self.scan(now)
                renewals = self._due_renewals(now)
            for entry, claim in renewals:
                self._renew(entry, claim, now)
            if renewals:
                continue
            self.clock.wait(self.wakeup, deadline)

    def scan(self, now: datetime) -> datetime | None:
        """One coordinator scan (core lock held); returns the next instant worth waking for."""
        self.dispatch(now)
        deadline = None
        if not self.saturated:  # while saturated, workers refill slots as they free them
            next_us = self.index.next_due_us()
            if next_us is not None:
                deadline = EPOCH + timedelta(microseconds=next_us)
        for entry in self.running.values():
            if entry.claim is not None:
                renew_at = self._renew_at(entry.claim)
                deadline = renew_at if deadline is None else min(deadline, renew_at)
        return deadline

    def dispatch(self, now: datetime) -> None:
        """Hand the best due tasks to the free queue slots (core lock held)."""
        if self.stop_requested:
            return
        now_us = micros_since_epoch(now)
        free = self.queue_capacity - self.queued
        taken = self.index.take_due(now_us, free)
        for entry in taken:
            entry.version += 1
            entry.state = TaskState.QUEUED
            self.pool.put(entry)
        self.queued += len(taken)
        was_saturated = self.saturated
        self.saturated = len(taken) == free and self.index.has_due(now_us)
        if self.saturated:
            self.saturation_count += 1
        elif was_saturated:
            self.wakeup.set()  # the coordinator slept without a deadline; let it recompute one
        if taken:
            self._notify()

    # ---- claims ---------------------------------------------------------------------------------
    def _ttl(self) -> timedelta:
        durable = self.durable
        return timedelta(milliseconds=durable.claim_ttl_ms if durable else 0)

    def _renew_at(self, claim: Claim) -> datetime:
        renew_every = timedelta(milliseconds=self.durable.renew_every_ms if self.durable else 0)
        return claim.expires_at - self._ttl() + renew_every

    def _due_renewals(self, now: datetime) -> list[tuple[_Entry, Claim]]:
        return [
            (entry, entry.claim)
            for entry in self.running.values()
            if entry.claim is not None and self._renew_at(entry.claim) <= now
        ]

    def _renew(self, entry: _Entry, claim: Claim, now: datetime) -> None:
        provider = self.provider
        if provider is None:
            return
        try:
            fresh: Claim | None = provider.renew(claim, now, self._ttl())
            error = None
        except (StateProviderError, InvalidSchedule) as exc:
            # Fail closed: a claim we cannot prove we hold may be run by another owner.
            fresh, error = None, f"claim renewal failed: {exc}"
        with self.lock:
            if entry.claim is not claim:
                return
            if fresh is None:
                entry.claim = None
                entry.claim_lost = True
                entry.error = error
                entry.cancel_event.set()  # the callback must stop cooperating with the claim
            else:
                entry.claim = fresh

    # ---- workers --------------------------------------------------------------------------------
    def _run(self, entry: _Entry) -> None:
        try:
            self._run_entry(entry)
        except Exception as exc:  # a provider or internal failure must not shrink the pool
            with self.lock:
                self.running.pop(entry.task_id, None)
                entry.claim = None
                entry.error = f"internal failure: {type(exc).__name__}: {exc}"
                if not entry.state.is_terminal:
                    self._retire(entry, TaskState.FAILED)

    def _run_entry(self, entry: _Entry) -> None:
        with self.lock:
            self.queued -= 1
            if self.saturated:
                self.dispatch(self.clock.now())  # refill the slot this worker just freed
            if entry.state is not TaskState.QUEUED:
                return  # cancelled while queued
            entry.state = TaskState.RUNNING
            self.running[entry.task_id] = entry
            self._notify()
            due, attempt = entry.due, entry.attempt
        if due is None:
            raise SchedulerError("queued task without a due time")
        epoch = None
        if entry.durable_key is not None:
            claim = self._claim(entry, due, attempt)
            if claim is None:
                return
            epoch = claim.epoch
        context = TaskContext(
            entry.task_id, entry.task.name, attempt, due, epoch, entry.cancel_event
        )
        started = self.clock.now()
        error = None
        try:
            entry.task.callback(context)
            outcome = RunOutcome.SUCCEEDED
        except TaskCancelled:
            outcome = RunOutcome.CANCELLED
        except Exception as exc:  # a callback's failure is a result, never a crash
            outcome = RunOutcome.CANCELLED if context.is_cancelled() else RunOutcome.FAILED
            error = f"{type(exc).__name__}: {exc}"
        finished = self.clock.now()
        result = RunResult(outcome, attempt, due, started, finished, epoch, error)
        self._finish(entry, result)

    def _claim(self, entry: _Entry, due: datetime, attempt: int) -> Claim | None:
        provider, durable, key = self.provider, self.durable, entry.durable_key
        if provider is None or durable is None or key is None or self.epoch is None:
            raise SchedulerError("durable task without a state provider")
        now = self.clock.now()
        try:
            claim = provider.claim(
                key, durable.owner_id, self.epoch, due, attempt, now, self._ttl()
            )
        except ClaimConflict as conflict:
            self._requeue_after_conflict(entry, key, conflict)
            return None
        except (ClaimLost, StateProviderError, InvalidSchedule) as exc:
            with self.lock:
                self.running.pop(entry.task_id, None)
                entry.error = f"claim refused: {exc}"
                self._retire(entry, TaskState.FENCED)
            return None
        with self.lock:
            entry.claim = claim
        self.wakeup.set()  # the coordinator now owes this claim a renewal
        return claim

    def _requeue_after_conflict(self, entry: _Entry, key: str, conflict: ClaimConflict) -> None:
        """Another owner holds the slot: resynchronize with the record and try again later."""
        provider = self.provider
        record = provider.load(key) if provider is not None else None
        with self.lock:
            self.running.pop(entry.task_id, None)
            entry.error = str(conflict)
            if record is None or record.next_run is None or entry.cancel_requested:
                self._retire(
                    entry, TaskState.CANCELLED if entry.cancel_requested else TaskState.COMPLETED
                )
                return
            retry_at = conflict.retry_at or record.next_run
            self._arm(entry, max(record.next_run, retry_at), record.attempt)
            self._notify()
        self.wakeup.set()

    def _finish(self, entry: _Entry, result: RunResult) -> None:
        if entry.durable_key is None:
            with self.lock:  # process-local: plan and apply in one step
                self._apply(entry, result, self._plan(entry, result))
            return
        with self.lock:
            plan = self._plan(entry, result)
            claim = entry.claim
        if claim is not None and not entry.claim_lost:
            plan = self._commit(entry, claim, result, plan)
        else:
            error = entry.error or "claim lost"
            plan = _Plan(TaskState.FENCED, None, entry.attempt, entry.runs_completed, error)
        with self.lock:
            self._apply(entry, result, plan)

    def _apply(self, entry: _Entry, result: RunResult, plan: _Plan) -> None:
        """Record an attempt's result and move the task on (core lock held)."""
        self.running.pop(entry.task_id, None)
        entry.claim = None
        entry.last_result = result
        entry.runs_completed = plan.runs_completed
        if plan.error is not None:
            entry.error = plan.error
        if entry.cancel_requested or self.stop_requested:
            # Locally this task is over; a durable record keeps the planned next run.
            self._retire(entry, TaskState.CANCELLED if plan.due is not None else plan.state)
            return
        if plan.state.is_terminal or plan.due is None:
            self._retire(entry, plan.state)
            return
        self._arm(entry, plan.due, plan.attempt, plan.state is TaskState.RETRY_WAITING)
        self._notify()
        self.wakeup.set()  # the coordinator may need an earlier deadline

    def _commit(self, entry: _Entry, claim: Claim, result: RunResult, plan: _Plan) -> _Plan:
        provider = self.provider
        if provider is None:
            raise SchedulerError("durable task without a state provider")
        receipt = Receipt(
            result.due, result.attempt, claim.epoch, result.outcome.value, result.finished_at
        )
        # A run that ended cancelled keeps its slot durable: recovery runs it again.
        if result.outcome is RunOutcome.CANCELLED:
            next_run, attempt, runs = result.due, result.attempt, entry.runs_completed
        else:
            next_run, attempt, runs = plan.due, plan.attempt, plan.runs_completed
        try:
            provider.commit_receipt(claim, receipt, next_run, attempt, runs)
        except (ClaimLost, StateProviderError) as exc:
            return _Plan(
                TaskState.FENCED,
                None,
                entry.attempt,
                entry.runs_completed,
                f"receipt refused: {exc}",
            )
        return plan

    def _plan(self, entry: _Entry, result: RunResult) -> _Plan:
        task = entry.task
        runs = entry.runs_completed
        if result.outcome is RunOutcome.CANCELLED:
            return _Plan(TaskState.CANCELLED, None, result.attempt, runs)
        try:
            if result.outcome is RunOutcome.FAILED and result.attempt <= task.retry.max_retries:
                retry_at = checked_add(result.finished_at, task.retry.delay, "retry.delay")
                return _Plan(TaskState.RETRY_WAITING, retry_at, result.attempt + 1, runs)
            runs += 1
            if task.limits.max_runs is not None and runs >= task.limits.max_runs:
                return _Plan(TaskState.COMPLETED, None, result.attempt, runs)
            next_due = task.schedule.next_due(result.due, result.finished_at)
        except InvalidSchedule as exc:
            return _Plan(TaskState.FAILED, None, result.attempt, runs, f"InvalidSchedule: {exc}")
        if next_due is None:
            final = TaskState.FAILED if result.outcome is RunOutcome.FAILED else TaskState.COMPLETED
            return _Plan(final, None, result.attempt, runs)
        return _Plan(TaskState.SCHEDULED, next_due, 1, runs)

    # ---- control --------------------------------------------------------------------------------
    def cancel(self, entry: _Entry) -> bool:
        with self.lock:
            if entry.state.is_terminal:
                return False
            entry.cancel_requested = True
            entry.cancel_event.set()
            if entry.state is not TaskState.RUNNING:
                self._retire(entry, TaskState.CANCELLED)
        self.wakeup.set()
        return True

    def request_shutdown(self) -> None:
        with self.lock:
            if not self.stop_requested:
                self.admission_open = False  # atomically with the stop request
                self.stop_requested = True
                for entry in self.entries.values():
                    if entry.state in (TaskState.QUEUED, TaskState.RUNNING):
                        entry.cancel_event.set()
                self.pool.close()  # under the lock: nothing can be put behind the stop markers
                self._notify()
        self.wakeup.set()

    def request_shutdown_from_finalizer(self) -> None:
        """Never blocks: the garbage collector may run this on a thread holding the core lock."""
        if self.lock.acquire(blocking=False):
            self.lock.release()
            self.request_shutdown()
        else:
            self.shutdown_pending = True
            self.wakeup.set()

    def threads(self) -> list[threading.Thread]:
        return [self.coordinator, *self.pool.threads]

    def join(self, timeout_s: float) -> bool:
        deadline_s = monotonic_s() + max(timeout_s, 0.0)
        for thread in self.threads():
            thread.join(max(deadline_s - monotonic_s(), 0.0))
        return not any(thread.is_alive() for thread in self.threads())

    def _notify(self) -> None:
        """Wake handle waiters (core lock held); free when nobody waits, the common case."""
        if self.waiter_count:
            self.changed.notify_all()

    def wait_for(self, entry: _Entry, predicate, timeout_s: float) -> TaskSnapshot:
        with self.changed:
            self.waiter_count += 1
            try:
                reached = self.changed.wait_for(lambda: predicate(entry.snapshot()), timeout_s)
            finally:
                self.waiter_count -= 1
            if not reached:
                raise TimeoutError(f"task {entry.task_id}: condition not reached in {timeout_s}s")
            return entry.snapshot()


class TaskHandle:
    """Refers to one registered task: observe it, wait for it, cancel it."""

    __slots__ = ("_core", "_entry")

    def __init__(self, core: _Core, entry: _Entry):
        self._core = core
        self._entry = entry

    @property
    def task_id(self) -> int:
        return self._entry.task_id

    def status(self) -> TaskState:
        with self._core.lock:
            return self._entry.state

    def snapshot(self) -> TaskSnapshot:
        with self._core.lock:
            return self._entry.snapshot()

    def cancel(self) -> bool:
        """Stop future runs and signal a running callback; False if already finished."""
        return self._core.cancel(self._entry)

    def wait_until(self, predicate, timeout_s: float) -> TaskSnapshot:
        """Block until ``predicate(snapshot)`` holds; ``TimeoutError`` after ``timeout_s``."""
        return self._core.wait_for(self._entry, predicate, timeout_s)

    def wait_finished(self, timeout_s: float) -> TaskSnapshot:
        return self.wait_until(lambda s: s.state.is_terminal, timeout_s)


class Scheduler:
    """Bounded in-process scheduling of one-shot, interval and cron tasks.

    ``Scheduler()`` and ``schedule`` are process-local and offline; durable recovery is opt-in
    through :meth:`with_state_provider` and :meth:`schedule_durable`.
    """

    def __init__(self, config: SchedulerConfig | None = None, *, clock: Clock | None = None):
        self._core = _Core(config or SchedulerConfig(), clock or SystemClock())
        self._finalizer = weakref.finalize(self, _Core.request_shutdown_from_finalizer, self._core)

    @classmethod
    def with_state_provider(
        cls,
        provider: SchedulerStateProvider,
        durable_config: DurableSchedulerConfigV1,
        *,
        clock: Clock | None = None,
    ) -> Scheduler:
        """A scheduler whose ``schedule_durable`` tasks recover through ``provider``.

        Takes a new fencing epoch from the provider (strictly greater than every earlier one).
        """
        scheduler = cls.__new__(cls)
        scheduler._core = _Core(
            durable_config.scheduler, clock or SystemClock(), provider, durable_config
        )
        scheduler._finalizer = weakref.finalize(
            scheduler, _Core.request_shutdown_from_finalizer, scheduler._core
        )
        return scheduler

    def schedule(self, task: ScheduledTask) -> TaskHandle:
        """Register a process-local task. Raises SchedulerClosed, TaskLimitExceeded or
        InvalidSchedule (for an unrepresentable first deadline)."""
        return TaskHandle(self._core, self._core.admit(task))

    def schedule_durable(self, task_key: str, task: ScheduledTask) -> TaskHandle:
        """Register a task whose next run, attempts and receipts live in the state provider.

        ``task_key`` identifies the task across restarts; re-registering it after a restart
        resumes from the stored record (the misfire policy decides about a passed due time).
        """
        return TaskHandle(self._core, self._core.admit_durable(task_key, task))

    @property
    def fencing_epoch(self) -> int | None:
        return self._core.epoch

    @property
    def queued_task_count(self) -> int:
        with self._core.lock:
            return self._core.queued

    @property
    def queue_saturation_count(self) -> int:
        with self._core.lock:
            return self._core.saturation_count

    @property
    def running_task_count(self) -> int:
        with self._core.lock:
            return len(self._core.running)

    @property
    def live_thread_count(self) -> int:
        return sum(thread.is_alive() for thread in self._core.threads())

    def snapshot(self) -> SchedulerSnapshot:
        core = self._core
        with core.lock:
            tasks = tuple(entry.snapshot() for entry in core.entries.values())
            saturation, admission_open = core.saturation_count, core.admission_open
            queued, running = core.queued, len(core.running)
        return SchedulerSnapshot(
            tasks=tasks,
            registered_task_count=len(tasks),
            queued_task_count=queued,
            running_task_count=running,
            queue_saturation_count=saturation,
            live_thread_count=self.live_thread_count,
            admission_open=admission_open,
        )

    def shutdown_with_timeout(self, seconds: float) -> bool:
        """Close admission, request cancellation, wait up to ``seconds``.

        True: the coordinator and every worker finished. False: some are still live (the
        scheduler must be quarantined, not replaced); call again to observe completion.
        """
        self._core.request_shutdown()
        return self._core.join(seconds)

    def shutdown(self) -> None:
        """Shut down with a five-second budget; ``ShutdownIncomplete`` if threads remain."""
        if not self.shutdown_with_timeout(SHUTDOWN_WAIT_SECONDS):
            live = [t.name for t in self._core.threads() if t.is_alive()]
            raise ShutdownIncomplete(
                f"threads still live after {SHUTDOWN_WAIT_SECONDS}s: {', '.join(live)}; "
                "quarantine this scheduler (their effects may continue)"
            )

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
