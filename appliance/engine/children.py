"""The real engine's children: starting them warm, placing executions in them, retiring them.

Theory of operation
-------------------
A child hosts up to ``executions_per_child`` executions at once (its *slots*), each in its own
isolate (child.py). A spawner thread keeps enough children started that ``warm_children``
executions beyond the *demand* could start at once, counting children still starting. The
demand is the executions waiting for a slot or, when more, those the pool holds
capacity for that may run at once (reserved, up to ``max_concurrent``): a burst shows there
while the worker still asks for its permits, so the children it needs warm up meanwhile. Only
that long-lived thread starts children, because the kernel's parent-death signal fires when the
*thread* that created a child exits; one thread per starting child awaits its ``ready``, so the
spawner can start more meanwhile.

Placement packs: an execution takes a free slot in the child that already hosts the most
executions (then the one used most recently), so few children carry the load and surplus ones
idle out; with one slot per child this is "the most recently returned child", as before. A
child stops taking executions (*retiring*) after ``child_executions_max`` placements, when its
RSS grew more than ``child_rss_growth_bytes_max`` since it was ready, or when the engine kills
it; it is killed and reaped once it hosts nothing (the engine may kill it sooner). An idle child
beyond what is needed is retired after ``child_idle_seconds``.

Everything here runs under the engine's condition (``cond``), which also guards the pool's
executions: placement looks at ``execution.cancel_reason`` under the same lock that cancel sets
it, so a cancelled execution never gets a slot.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance.engine.process import ChildProcess, ChildStartError

log = logging.getLogger(__name__)

SPAWN_BACKOFF_SECONDS_MAX = 5.0


class Children:
    """The engine's children (module doc). Thread-safe through the engine's condition."""

    def __init__(
        self,
        cond: threading.Condition,
        *,
        executions_per_child: int,
        warm_executions: int,
        child_executions_max: int,
        child_rss_growth_bytes_max: int,
        child_idle_seconds: float,
        child_start_timeout_seconds: float,
        reply_frame_bytes_max: int,
        egress_document: Callable[[], dict[str, Any] | None],
        on_child_spawned: Callable[[int], None] | None,
        reserved_locked: Callable[[], int] = lambda: 0,
    ) -> None:
        self._cond = cond
        self.executions_per_child = executions_per_child
        self._warm_executions = warm_executions
        self.child_executions_max = child_executions_max
        self.child_rss_growth_bytes_max = child_rss_growth_bytes_max
        self._child_idle_seconds = child_idle_seconds
        self._child_start_timeout_seconds = child_start_timeout_seconds
        self._reply_frame_bytes_max = reply_frame_bytes_max
        self._egress_document = egress_document
        self._on_child_spawned = on_child_spawned
        self._reserved_locked = reserved_locked
        self._serving: list[ChildProcess] = []  # ready, least recently used first
        self._starting: list[ChildProcess] = []
        self._starting_count = 0
        self._waiting = 0  # executions waiting for a slot
        self._live_pids: set[int] = set()
        self._closed = False
        self._start_failures = 0  # children in a row that did not become ready
        self.spawned_total = 0
        self._last_start_error = ""
        self._spawner = threading.Thread(
            target=self._spawner_loop, name="engine-spawner", daemon=True
        )

    def start(self) -> None:
        self._spawner.start()

    # ----- views (under the lock) ---------------------------------------------------------

    def live_pids_locked(self) -> frozenset[int]:
        return frozenset(self._live_pids)

    def idle_count_locked(self) -> int:
        return sum(1 for child in self._serving if not child.hosted and not child.retiring)

    # ----- placement ------------------------------------------------------------------------

    def place(self, execution: Any, deadline_monotonic: float) -> ChildProcess | None:
        """A slot for the execution in a serving child (its mailbox open), or None when the
        execution was cancelled first; ChildStartError when no child is ready in time."""
        execution_id = execution.request.execution_id
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()
            try:
                while True:
                    if execution.cancel_reason is not None:
                        return None
                    child = self._best_locked()
                    if child is not None:
                        child.hosted.add(execution_id)
                        child.placed_total += 1
                        if child.placed_total >= self.child_executions_max:
                            child.retiring = True
                        child.open_mailbox(execution_id)
                        self._serving.remove(child)
                        self._serving.append(child)  # most recently used last
                        return child
                    remaining = deadline_monotonic - time.monotonic()
                    if remaining <= 0:
                        raise ChildStartError(
                            f"no engine child became ready within "
                            f"{self._child_start_timeout_seconds} s: {self._last_start_error}"
                        )
                    self._cond.wait(remaining)
            finally:
                self._waiting -= 1

    def _best_locked(self) -> ChildProcess | None:
        best = None
        for child in list(self._serving):
            if child.retiring or len(child.hosted) >= child.slots:
                continue
            if child.ended is not None or not child.alive():
                if not child.hosted:  # died while idle: nobody else will tidy it up
                    self._serving.remove(child)
                    self._live_pids.discard(child.pid)
                    threading.Thread(target=child.close, daemon=True).start()
                continue
            if best is None or len(child.hosted) >= len(best.hosted):
                best = child  # ties go to the later one: the most recently used
        return best

    def leave(self, child: ChildProcess, execution_id: str) -> None:
        """The execution is gone from the child (done, or the child died): free its slot; a
        retiring child that is now empty is killed, reaped and forgotten."""
        child.forget_mailbox(execution_id)
        with self._cond:
            child.hosted.discard(execution_id)
            if child.rss_growth_bytes() > self.child_rss_growth_bytes_max and not child.retiring:
                log.info(
                    "retiring engine child %s: RSS grew by %s bytes",
                    child.pid,
                    child.rss_growth_bytes(),
                )
                child.retiring = True
            finished = child.retiring and not child.hosted
            if finished and child in self._serving:
                self._serving.remove(child)
            elif not child.hosted:
                child.idle_since_monotonic = time.monotonic()
            self._cond.notify_all()
        if finished:
            self.bury(child)

    def retire(self, child: ChildProcess, note: str | None = None) -> None:
        """Take no more executions and kill the child now; its executions see end of file."""
        with self._cond:
            child.retiring = True
            if note is not None and child.end_note is None:
                child.end_note = note
            if child in self._serving:
                self._serving.remove(child)
            self._cond.notify_all()
        child.kill()

    def bury(self, child: ChildProcess) -> None:
        """Kill, reap, release the pipes, forget the pid (idempotent enough: kill and reap are)."""
        child.kill_and_reap()
        with self._cond:
            if child.buried:
                return
            child.buried = True
        child.close()
        with self._cond:
            self._live_pids.discard(child.pid)
            self._cond.notify_all()

    # ----- the spawner ----------------------------------------------------------------------

    def _free_slots_locked(self) -> int:
        free = self._starting_count * self.executions_per_child
        for child in self._serving:
            if not child.retiring:
                free += child.slots - len(child.hosted)
        return free

    def _demand_locked(self) -> int:
        """Executions that will want a slot soon: those waiting for one, and those the pool has
        reserved capacity for that can run at once (a burst shows here while the worker still
        asks for its permits, so children warm up meanwhile)."""
        hosted = sum(len(child.hosted) for child in self._serving)
        return max(self._waiting, self._reserved_locked() - hosted)

    def _spawn_deficit_locked(self) -> int:
        """Children to start now so that the demand plus warm executions could start at once.
        The demand comes first: children only for warmth wait until none is starting, so a
        burst's children do not share the CPU with one it does not need yet."""
        demand = self._demand_locked()
        free = self._free_slots_locked()
        missing = demand - free
        if missing <= 0 and self._starting_count == 0:
            missing = self._warm_executions + demand - free
        return math.ceil(missing / self.executions_per_child) if missing > 0 else 0

    def _idle_excess_locked(self) -> tuple[ChildProcess | None, float | None]:
        """The least recently used idle child that is not needed and idled long enough to
        retire, else (None, seconds until one would)."""
        needed = self._warm_executions + self._demand_locked()
        free = self._free_slots_locked()
        for child in self._serving:
            if child.hosted or child.retiring or free - child.slots < needed:
                continue
            left = child.idle_since_monotonic + self._child_idle_seconds - time.monotonic()
            if left > 0:
                return None, left
            child.retiring = True
            self._serving.remove(child)
            return child, None
        return None, None

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
                count = self._spawn_deficit_locked() if idle is None else 0
                self._starting_count += count
            if idle is not None:  # the spawner retires too: it is the thread that has time
                self.bury(idle)
                continue
            failed = self._spawn_batch(count)
            with self._cond:
                failures = max(failures + 1 if failed else 0, self._start_failures)
            if failures:
                backoff = min(SPAWN_BACKOFF_SECONDS_MAX, 0.05 * 2**failures)
                with self._cond:
                    if not self._closed:
                        self._cond.wait(backoff)

    def _spawn_batch(self, count: int) -> bool:
        """Start count children; True if any could not be started. Their ``ready`` is awaited
        by one thread each, so the spawner can start more while these warm up (a burst needs
        several children at once)."""
        failed = False
        egress = self._egress_document() if count else None
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
                self.spawned_total += 1
            if self._on_child_spawned is not None:
                try:
                    self._on_child_spawned(child.pid)
                except Exception:
                    log.exception("on_child_spawned callback failed")
            with contextlib.suppress(OSError):  # it died already: wait_ready says so
                child.configure(self.executions_per_child, egress)
            threading.Thread(
                target=self._await_ready, args=(child,), name="engine-child-start", daemon=True
            ).start()
        return failed

    def _await_ready(self, child: ChildProcess) -> None:
        deadline = time.monotonic() + self._child_start_timeout_seconds
        try:
            child.wait_ready(deadline)
        except ChildStartError as exc:
            child.kill_and_reap()
            self._note_start_failure(child, f"{exc}; stderr: {child.stderr_tail()[-2000:]}")
            child.close()
            with self._cond:
                self._start_failures += 1
                self._cond.notify_all()
            return
        with self._cond:
            self._starting.remove(child)
            self._starting_count -= 1
            self._start_failures = 0
            if not self._closed:
                child.idle_since_monotonic = time.monotonic()
                self._serving.insert(0, child)  # never used: the least recently used
                self._cond.notify_all()
                return
        self.bury(child)

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

    # ----- shutdown -------------------------------------------------------------------------

    def shutdown(self, deadline_monotonic: float) -> bool:
        """Kill every child (busy ones were stopped by the pool first); True when the spawner
        ended and every child is reaped."""
        with self._cond:
            self._closed = True
            serving = list(self._serving)
            starting = list(self._starting)
            for child in serving + starting:
                child.retiring = True
            self._serving.clear()
            self._cond.notify_all()
        for child in serving + starting:
            child.kill()  # a starting one's thread sees end of file and tidies it up itself
        self._spawner.join(max(0.0, deadline_monotonic - time.monotonic()))
        for child in serving:
            left = max(0.0, deadline_monotonic - time.monotonic())
            if not child.hosted and child.reap(left) is not None:
                self.bury(child)
        with self._cond:
            while self._live_pids and time.monotonic() < deadline_monotonic:
                self._cond.wait(max(0.0, deadline_monotonic - time.monotonic()))
            return not self._live_pids and not self._spawner.is_alive()
