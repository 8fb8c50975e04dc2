"""The real engine: executions run in pre-started, reusable V8 child processes.

Theory of operation
-------------------
The pool (pool.py) decides what may run; this module runs it. A spawner thread keeps
``warm_children`` children started and warm (mini-racer imported, an isolate and the harness
built), plus one more for every execution that is waiting for a child, counting children that
are on their way back (recycling). Only that long-lived thread starts children, because the
kernel's parent-death signal fires when the *thread* that created a child exits.

Reuse. A child runs many scripts, each in a fresh isolate (child.py): after ``done`` it disposes
of the script's isolate and builds the next one, and its next ``ready`` frame proves that nothing
of the finished script can still run. The supervisor hands a child back to the ready list only
after that frame (the "recycle" step, after the report was delivered, so the report does not
wait for it). A child is never reused after anything but a clean end of the script (completed,
or an exception the harness caught): on cancel, timeout, out-of-memory, a crash or a protocol
error it is killed and reaped before the report, as a single-use child always was. It is also
retired after ``child_executions_max`` executions, when its RSS has grown more than
``child_rss_growth_bytes_max`` since its first ready frame, when it does not come back ready
within ``child_recycle_timeout_seconds``, and when it has been idle ``child_idle_seconds`` while
more than ``warm_children`` children are idle. ``child_executions_max=1`` is the single-use
engine of earlier versions.

Each started execution's supervisor takes a warm child (the one most recently returned, so the
others can idle out), sends the request, and reads frames until ``done``, end of file, or the
backstop deadline (timeout_seconds + kill_grace_seconds: the child terminates V8 itself at
timeout_seconds, the parent kills a child that failed to). A child that is not kept is reaped
before the report, and the capacity returns to the pool only then, so the number of live busy
children never exceeds max_concurrent. ``cancel`` kills the execution's child under the engine
lock and only while that child still belongs to the execution, so it can never hit a child that
was already handed to the next one.

Judging the end, in order: a ``done`` frame from the child is the truth (a completion that won a
race with cancel keeps its result); otherwise a requested cancel is ``cancelled`` (the child is
already reaped); otherwise the backstop is ``timed_out``; otherwise the child died, and a V8
out-of-memory abort on its stderr is ``failed`` with reason "out of memory".
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.engine import protocol
from appliance.engine.clock import Clock
from appliance.engine.model import (
    ERROR_LIMIT_BYTES,
    REASON_CANCELLED,
    REASON_CHILD_DIED,
    REASON_CHILD_START,
    REASON_OUT_OF_MEMORY,
    REASON_PROTOCOL,
    REASON_TIMEOUT,
    RESULT_LIMIT_BYTES_DEFAULT,
    ExecutionReport,
    ExecutionStatus,
)
from appliance.engine.pool import Execution, PoolEngine, check_positive, check_range
from appliance.engine.process import ChildProcess, ChildStartError, describe_exit
from appliance.engine.protocol import truncate_utf8
from appliance.engine.text import JSON_DEPTH_MAX, TooDeep, well_formed_json

log = logging.getLogger(__name__)

SPAWN_BACKOFF_SECONDS_MAX = 5.0
# Reuse limits (named in docs/engine.md); child_executions_max=1 means single-use children.
CHILD_EXECUTIONS_MAX_DEFAULT = 1000
CHILD_EXECUTIONS_MAX_LIMIT = 1_000_000
CHILD_RSS_GROWTH_BYTES_MAX_DEFAULT = 128 * 1024 * 1024
CHILD_RECYCLE_TIMEOUT_SECONDS_DEFAULT = 5.0
CHILD_IDLE_SECONDS_DEFAULT = 60.0
_DONE_STATUSES = {
    "completed": ExecutionStatus.COMPLETED,
    "failed": ExecutionStatus.FAILED,
    "timed_out": ExecutionStatus.TIMED_OUT,
}


@dataclass
class _Outcome:
    """What the supervisor saw of one child's run."""

    reply: dict[str, Any] | None = None
    backstop_fired: bool = False
    protocol_error: str | None = None
    exit_code: int | None = None


class Engine(PoolEngine):
    """Runs scripts in reusable V8 children, a fresh isolate per script. Thread-safe."""

    def __init__(
        self,
        max_concurrent: int = 4,
        max_queued: int = 8,
        output_limit_bytes: int = 64 * 1024,
        clock: Clock | None = None,
        *,
        warm_children: int | None = None,
        result_limit_bytes: int = RESULT_LIMIT_BYTES_DEFAULT,
        kill_grace_seconds: float = 0.5,
        child_start_timeout_seconds: float = 30.0,
        reports_max: int = 1024,
        on_child_spawned: Callable[[int], None] | None = None,
        child_executions_max: int = CHILD_EXECUTIONS_MAX_DEFAULT,
        child_rss_growth_bytes_max: int = CHILD_RSS_GROWTH_BYTES_MAX_DEFAULT,
        child_recycle_timeout_seconds: float = CHILD_RECYCLE_TIMEOUT_SECONDS_DEFAULT,
        child_idle_seconds: float = CHILD_IDLE_SECONDS_DEFAULT,
        egress: Any = None,
    ) -> None:
        super().__init__(max_concurrent, max_queued, output_limit_bytes, clock, reports_max)
        # The worker's appliance.egress.handoff.EgressHandoff, or None (scripts have no fetch).
        # Its to_child_json() holds credential values: it goes to children over stdin only.
        self.egress = egress
        warm = min(2, max_concurrent) if warm_children is None else warm_children
        check_range("warm_children", warm, 0, max_concurrent)
        check_range("child_executions_max", child_executions_max, 1, CHILD_EXECUTIONS_MAX_LIMIT)
        check_range("child_rss_growth_bytes_max", child_rss_growth_bytes_max, 0, 2**40)
        check_positive("child_recycle_timeout_seconds", child_recycle_timeout_seconds)
        check_positive("child_idle_seconds", child_idle_seconds)
        self.child_executions_max = child_executions_max
        self.child_rss_growth_bytes_max = child_rss_growth_bytes_max
        self._child_recycle_timeout_seconds = child_recycle_timeout_seconds
        self._child_idle_seconds = child_idle_seconds
        self.result_limit_bytes = result_limit_bytes
        self._warm_target = warm
        self._kill_grace_seconds = kill_grace_seconds
        self._child_start_timeout_seconds = child_start_timeout_seconds
        self._on_child_spawned = on_child_spawned
        # JSON escaping can grow text up to six-fold; the frame cap still bounds allocation.
        self._reply_frame_bytes_max = (
            6 * (output_limit_bytes + result_limit_bytes + 2 * ERROR_LIMIT_BYTES) + 64 * 1024
        )
        self._ready: collections.deque[ChildProcess] = collections.deque()
        self._starting: list[ChildProcess] = []
        self._starting_count = 0
        self._waiting_for_child = 0
        self._live_pids: set[int] = set()
        # Children whose script ended cleanly, on their way back to _ready (see _recycle).
        self._recycling: set[ChildProcess] = set()
        self._returning: dict[str, ChildProcess] = {}  # execution id -> its child, kept
        self._spawned_total = 0
        self._last_start_error = ""
        self._spawner = threading.Thread(
            target=self._spawner_loop, name="engine-spawner", daemon=True
        )
        self._spawner.start()

    # ----- backend hooks --------------------------------------------------------------------

    def child_pids(self) -> frozenset[int]:
        """Pids of every child this engine has started and not yet reaped."""
        with self._cond:
            return frozenset(self._live_pids)

    def _backend_counts_locked(self) -> tuple[int, int]:
        return len(self._ready), len(self._live_pids)

    def _backend_extra_stats_locked(self) -> dict[str, int]:
        return {"children_spawned_total": self._spawned_total}

    def _stop(self, execution: Execution) -> None:
        # Under the lock: once the supervisor has kept the child for reuse it clears
        # execution.backend under the same lock, so this can never kill a child that already
        # runs another execution.
        with self._cond:
            child = execution.backend
            if child is not None:
                child.kill()

    def _shutdown_backend(self, deadline_monotonic: float) -> bool:
        with self._cond:
            warm = list(self._ready) + list(self._starting)
            self._ready.clear()
            for child in self._recycling:
                child.kill()  # their recycler sees end of file, reaps and forgets them
            self._cond.notify_all()
        for child in warm:
            child.kill()
        self._spawner.join(max(0.0, deadline_monotonic - time.monotonic()))
        for child in warm:
            if child.reap(max(0.0, deadline_monotonic - time.monotonic())) is not None:
                child.close()
                self._forget_pid(child.pid)
        with self._cond:
            while self._recycling and time.monotonic() < deadline_monotonic:
                self._cond.wait(max(0.0, deadline_monotonic - time.monotonic()))
            recycled = not self._recycling
        return recycled and not self._spawner.is_alive()

    def _execute(self, execution: Execution) -> ExecutionReport:
        try:
            child = self._take_child(execution)
        except ChildStartError as exc:
            return self._failed_report(execution, REASON_CHILD_START, str(exc))
        if child is None:
            return self._cancelled_report(execution, execution.cancel_reason or REASON_CANCELLED)
        kept = False
        try:
            outcome = self._converse(execution, child)
            kept = self._keep_or_reap(execution, child, outcome)
            return self._judge(execution, child, outcome)
        finally:
            if not kept:
                if child.alive():  # only after an unexpected error: never leave a child behind
                    child.kill_and_reap()
                child.close()
                self._forget_pid(child.pid)

    def _keep_or_reap(self, execution: Execution, child: ChildProcess, outcome: _Outcome) -> bool:
        """After the conversation: keep the child for reuse (True), or kill and reap it now,
        before the report, so that only a reaped child ever backs a stop."""
        reply = outcome.reply
        reusable = (
            reply is not None
            and reply.get("reusable") is True
            and child.executions_done < self.child_executions_max
        )
        with self._cond:
            if reusable and execution.cancel_reason is None and not self._closed:
                execution.backend = None  # from here on a cancel cannot reach this child
                self._recycling.add(child)
                self._returning[execution.request.execution_id] = child
                return True
        outcome.exit_code = child.kill_and_reap()
        return False

    def _after_report(self, execution: Execution) -> None:
        with self._cond:
            child = self._returning.pop(execution.request.execution_id, None)
        if child is not None:
            self._recycle(child)

    def _recycle(self, child: ChildProcess) -> None:
        """Wait for the kept child's next ready frame (its old isolate is gone), then hand it
        back; a child that is late, broken or grown too much is killed and reaped instead."""
        why = None
        deadline = time.monotonic() + self._child_recycle_timeout_seconds
        try:
            child.wait_ready(deadline)
        except ChildStartError as exc:
            why = f"did not come back ready: {exc}"
        if why is None and time.monotonic() > deadline:  # a frame read late is late
            why = f"not back ready within {self._child_recycle_timeout_seconds} s"
        if why is None and child.rss_growth_bytes() > self.child_rss_growth_bytes_max:
            why = f"RSS grew by {child.rss_growth_bytes()} bytes"
        with self._cond:
            if why is None and not self._closed:
                self._recycling.discard(child)
                child.idle_since_monotonic = time.monotonic()
                self._ready.append(child)
                self._cond.notify_all()
                return
        if why is not None and not self._closed:
            log.info("retiring engine child %s: %s", child.pid, why)
        child.kill_and_reap()
        child.close()
        self._forget_pid(child.pid)
        with self._cond:
            self._recycling.discard(child)
            self._cond.notify_all()

    # ----- children -------------------------------------------------------------------------

    def _spawn_deficit_locked(self) -> int:
        wanted = self._warm_target + self._waiting_for_child
        return wanted - len(self._ready) - self._starting_count - len(self._recycling)

    def _idle_excess_locked(self) -> tuple[ChildProcess | None, float | None]:
        """The oldest idle child beyond warm_children that idled long enough to retire, else
        (None, seconds until the next one would)."""
        if len(self._ready) <= self._warm_target + self._waiting_for_child:
            return None, None
        oldest = self._ready[0]
        left = oldest.idle_since_monotonic + self._child_idle_seconds - time.monotonic()
        if left > 0:
            return None, left
        self._ready.popleft()
        return oldest, None

    def _spawner_loop(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._closed and self._spawn_deficit_locked() <= 0:
                    idle, wait_seconds = self._idle_excess_locked()
                    if idle is not None:
                        break
                    self._cond.wait(wait_seconds)
                else:
                    idle = None
                if self._closed:
                    return
                count = max(0, self._spawn_deficit_locked()) if idle is None else 0
                self._starting_count += count
            if idle is not None:  # the spawner retires too: it is the thread that has time
                idle.kill_and_reap()
                idle.close()
                self._forget_pid(idle.pid)
                continue
            failed = self._spawn_batch(count)
            failures = failures + 1 if failed else 0
            if failures:
                backoff = min(SPAWN_BACKOFF_SECONDS_MAX, 0.05 * 2**failures)
                with self._cond:
                    if not self._closed:
                        self._cond.wait(backoff)

    def _spawn_batch(self, count: int) -> bool:
        """Start count children and wait for them to be ready; True if any failed."""
        started: list[ChildProcess] = []
        failed = False
        for _ in range(count):
            try:
                child = ChildProcess.spawn(self._reply_frame_bytes_max)
            except OSError as exc:
                failed = True
                self._note_start_failure(None, f"cannot start engine child: {exc}")
                continue
            with self._cond:
                self._live_pids.add(child.pid)
                self._starting.append(child)
                self._spawned_total += 1
            if self._on_child_spawned is not None:
                try:
                    self._on_child_spawned(child.pid)
                except Exception:
                    log.exception("on_child_spawned callback failed")
            started.append(child)
        deadline = time.monotonic() + self._child_start_timeout_seconds
        for child in started:
            try:
                child.wait_ready(deadline)
            except ChildStartError as exc:
                failed = True
                child.kill_and_reap()
                self._note_start_failure(child, f"{exc}; stderr: {child.stderr_tail()[-2000:]}")
                child.close()
                continue
            with self._cond:
                self._starting.remove(child)
                self._starting_count -= 1
                if not self._closed:
                    child.idle_since_monotonic = time.monotonic()
                    self._ready.append(child)
                    self._cond.notify_all()
                    continue
            child.kill_and_reap()
            child.close()
            self._forget_pid(child.pid)
        return failed

    def _note_start_failure(self, child: ChildProcess | None, message: str) -> None:
        with self._cond:
            if not self._closed:  # children killed by shutdown are not failures
                log.error("%s", message)
            if child is not None:
                self._starting.remove(child)
                self._live_pids.discard(child.pid)
            self._starting_count -= 1
            self._last_start_error = message
            self._cond.notify_all()

    def _forget_pid(self, pid: int) -> None:
        with self._cond:
            self._live_pids.discard(pid)
            self._cond.notify_all()

    def _take_child(self, execution: Execution) -> ChildProcess | None:
        """A warm child bound to the execution, or None when the execution was cancelled."""
        deadline = time.monotonic() + self._child_start_timeout_seconds
        with self._cond:
            self._waiting_for_child += 1
            self._cond.notify_all()
            try:
                while True:
                    if execution.cancel_reason is not None:
                        return None
                    while self._ready:
                        child = self._ready.pop()  # the freshest: older ones may idle out
                        if child.alive():
                            execution.backend = child
                            execution.pid = child.pid
                            return child
                        child.close()  # died while idle; alive() already reaped it
                        self._live_pids.discard(child.pid)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ChildStartError(
                            f"no engine child became ready within "
                            f"{self._child_start_timeout_seconds} s: {self._last_start_error}"
                        )
                    self._cond.wait(remaining)
            finally:
                self._waiting_for_child -= 1

    # ----- one execution ----------------------------------------------------

    def _converse(self, execution: Execution, child: ChildProcess) -> _Outcome:
        request = execution.request
        outcome = _Outcome()
        try:
            child.send(
                {
                    "type": protocol.MSG_RUN,
                    "execution_id": request.execution_id,
                    "code": request.code,
                    "scheduled": request.scheduled.to_json(),
                    "heap_mb": request.heap_mb,
                    "timeout_seconds": request.timeout_seconds,
                    "output_limit_bytes": self.output_limit_bytes,
                    "result_limit_bytes": self.result_limit_bytes,
                }
            )
            deadline = time.monotonic() + request.timeout_seconds + self._kill_grace_seconds
            while outcome.reply is None:
                self._handle_frame(execution, outcome, child.read(deadline))
        except OSError:
            pass  # the child is gone; its exit status says why
        except protocol.FrameTimeout:
            outcome.backstop_fired = True
        except protocol.PeerClosed:
            pass
        except protocol.ProtocolError as exc:
            outcome.protocol_error = str(exc)
        if outcome.reply is not None:
            child.executions_done += 1
            return outcome  # _keep_or_reap decides: reuse it, or kill and reap it now
        outcome.exit_code = child.kill_and_reap()
        if outcome.protocol_error is None:
            # Everything the child wrote before it died is still in the pipe: a done frame
            # that raced the kill wins.
            with contextlib.suppress(
                protocol.FrameTimeout, protocol.PeerClosed, protocol.ProtocolError, OSError
            ):
                while outcome.reply is None:
                    self._handle_frame(execution, outcome, child.read(time.monotonic()))
        return outcome

    def _handle_frame(
        self, execution: Execution, outcome: _Outcome, message: dict[str, Any]
    ) -> None:
        kind = message["type"]
        if kind == protocol.MSG_DONE:
            outcome.reply = message
        elif kind == protocol.MSG_RUNNING:
            self._mark_started(execution)
        else:
            raise protocol.ProtocolError(f"unexpected frame {kind!r}")

    def _judge(
        self, execution: Execution, child: ChildProcess, outcome: _Outcome
    ) -> ExecutionReport:
        if outcome.reply is not None:
            return self._report_from_reply(execution, child, outcome.reply)
        if execution.cancel_reason is not None:
            return self._cancelled_report(execution, execution.cancel_reason)
        if outcome.backstop_fired:
            return self._terminal(
                execution,
                ExecutionStatus.TIMED_OUT,
                reason=REASON_TIMEOUT,
                note="the child did not stop at the timeout and was killed; output was lost",
            )
        if outcome.protocol_error is not None:
            return self._failed_report(execution, REASON_PROTOCOL, outcome.protocol_error)
        tail = child.stderr_tail()
        exit_text = describe_exit(outcome.exit_code if outcome.exit_code is not None else -9)
        if "out of memory" in tail.lower():
            lines = [line for line in tail.splitlines() if "out of memory" in line.lower()]
            return self._failed_report(
                execution, REASON_OUT_OF_MEMORY, f"V8 aborted ({exit_text}): {lines[-1].strip()}"
            )
        fatal = [line.strip("# ") for line in tail.splitlines() if "Fatal" in line]
        detail = fatal[-1] if fatal else tail[-2000:]
        error, _ = truncate_utf8(f"engine child {exit_text}: {detail}", ERROR_LIMIT_BYTES)
        return self._failed_report(execution, REASON_CHILD_DIED, error)

    def _report_from_reply(
        self, execution: Execution, child: ChildProcess, reply: dict[str, Any]
    ) -> ExecutionReport:
        status = _DONE_STATUSES.get(reply.get("status"))  # type: ignore[arg-type]
        if status is None:
            return self._failed_report(execution, REASON_PROTOCOL, f"bad status in {reply!r}")
        notes = [n for n in (reply.get("note"), reply.get("output_note")) if isinstance(n, str)]
        result = None
        result_json = reply.get("result_json")
        if isinstance(result_json, str):
            if len(result_json.encode("utf-8", errors="replace")) > self.result_limit_bytes:
                notes.append(f"completion value exceeds {self.result_limit_bytes} bytes")
            else:
                try:
                    result = well_formed_json(json.loads(result_json))
                except (RecursionError, TooDeep):
                    notes.append(f"completion value nests deeper than {JSON_DEPTH_MAX} levels")
                except ValueError as exc:
                    return self._failed_report(
                        execution, REASON_PROTOCOL, f"result_json is not JSON: {exc}"
                    )
        raw_output = reply.get("output")
        raw_output = raw_output if isinstance(raw_output, str) else ""
        output, cut = truncate_utf8(raw_output, self.output_limit_bytes)
        error = reply.get("error")
        reason = reply.get("reason")
        return self._terminal(
            execution,
            status,
            result=result,
            error=truncate_utf8(error, ERROR_LIMIT_BYTES)[0] if isinstance(error, str) else None,
            reason=reason if isinstance(reason, str) else None,
            note="; ".join(notes) or None,
            output=output,
            output_truncated=cut or bool(reply.get("output_truncated")),
        )
