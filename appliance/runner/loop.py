"""The runner loop: the owner core's thin driver (as appliance/raft/driver.py is for RaftNode).

Theory of operation (SPEC §2 "One serialized runner loop")
---------------------------------------------------------
Every decision is the owner core's (appliance/owner/owner.py); this module only moves events in
and effects out. One bounded queue, one consumer thread that alone calls ``Owner.handle``. Into
the queue go: leadership changes (from the replication layer), operator commands, admission
requests, and the answers of background work — proposals and read barriers (on the proposer
pool), worker calls (on the task pool). After each item the loop fires the due timers (a heap on
the monotonic clock) and hands the owner a ``Tick``; it wakes at least every ``WAKE_S_MAX`` and at
the owner's next due instant (a wall instant on the injected, possibly scaled, clock). Two
operator commands do not go through it: membership changes (Raft entries, not Machine commands)
and ``list`` (this voter's local applied view, rendered on the caller's thread).

The loop thread never blocks on Raft or the worker: a proposal, a barrier or a worker call runs
on a pool and its answer comes back through the queue, where the owner continues the decision
that waited for it. This module builds no core command: it proposes only what an owner
``Propose`` effect carries (tests/runner/test_driver.py checks).

An exception out of the owner is a bug. In production (``strict=False``) it is logged as
``loop_error``, the caller waiting on that event is failed, and the loop goes on; under
``strict=True`` (the tests) the loop also stops, keeps the exception in ``failure`` and re-raises
it on its thread, so the test sees it instead of a log line nobody reads.
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

from appliance.clock import RunnerClock
from appliance.commands.operator import MUTATIONS, OperatorCommand, error_reply
from appliance.config.runner import RunnerConfig
from appliance.metrics.feed import ChangeFeed
from appliance.owner import ownership
from appliance.owner.applied import Accepted, Refused
from appliance.owner.events import (
    AdmissionRequest,
    BarrierDone,
    CancelAnswered,
    CancelRequest,
    DispatchRequest,
    Drain,
    Effect,
    Event,
    ExecAnswered,
    FailedAnswer,
    LeadershipChanged,
    LogRecord,
    LostAnswer,
    NotLeaderAnswer,
    ObserveAnswered,
    ObserveRequest,
    OperatorRequest,
    Outcome,
    ProposalDone,
    Propose,
    ReadBarrier,
    Reply,
    ReplyFailed,
    SetTimer,
    Tick,
    TimerFired,
)
from appliance.owner.owner import OBSERVE_GRACE_S, UNKNOWN_POLL_S, Owner
from appliance.owner.requests import list_reply
from appliance.owner.serial import Gate
from appliance.protocol import v1
from appliance.replication.base import Leadership
from appliance.replication.errors import NotLeader, ProposalLost
from appliance.runner.code_check import code_refusal
from appliance.runner.logs import DecisionLog
from appliance.runner.machine import Machine, encode_command
from appliance.runner.membership_commands import (
    MEMBERSHIP_ACTIONS,
    configuration_view,
    membership_reply,
)
from appliance.runner.worker_client import WorkerClient

__all__ = ["OBSERVE_GRACE_S", "Runner"]

LOOP_QUEUE_MAX: Final = 1024
WAKE_S_MAX: Final = 1.0  # real seconds: the loop wakes at least this often
PROPOSE_TIMEOUT_S: Final = 5.0
BARRIER_TIMEOUT_S: Final = 5.0
# Each exec holds a thread for the worker's whole launch path (its admission round trip and
# fsyncs included), and the owner sends as many as the worker's stated window takes. At 32, a
# window raised for a burst (docs/bench-capacity.md) was held to 32 launches in flight, about a
# third of the burst's acceptance time spent waiting for a thread here. Threads start lazily.
TASK_THREADS: Final = 64
# Each proposal holds a proposer thread until it commits; a burst proposes one Admit per
# execution in the worker's window plus the outcomes of the same work at once, and Raft batches
# what arrives together. 16 threads held back a window of admissions behind its own outcomes.
PROPOSERS_MAX: Final = 48
REPLY_TIMEOUT_S: Final = 15.0  # how long a caller waits for the loop's answer
ADMIT_REPLY_TIMEOUT_S: Final = 10.0
OPEN_PUBLISH_S: Final = 0.25  # how stale the published open occurrences may be (not draining)


@dataclass(frozen=True)
class _Wake:
    """Look at the clock now (nothing else to hand over)."""


@dataclass(frozen=True)
class _Stop:
    """The loop thread stops after this item."""


@dataclass(frozen=True)
class _Feed:
    """An owner event to hand over, from any thread."""

    event: Event


QueueItem = _Wake | _Stop | _Feed


def proposal_outcome(raw: Any) -> Outcome:
    """A proposal's raw result (the apply's result, or the exception) as an owner outcome."""
    if isinstance(raw, Accepted | Refused):
        return raw
    if isinstance(raw, NotLeader):
        return NotLeaderAnswer(getattr(raw, "leader_hint", None), str(raw))
    if isinstance(raw, ProposalLost):
        return LostAnswer(str(raw))
    if isinstance(raw, BaseException):
        return FailedAnswer(str(raw) or type(raw).__name__)
    return FailedAnswer("the apply hook returned no result")


class Runner:
    def __init__(
        self,
        *,
        cfg: RunnerConfig,
        machine: Machine,
        replication: Any,
        worker: WorkerClient,
        clock: RunnerClock,
        log: DecisionLog,
        unknown_poll_s: float = UNKNOWN_POLL_S,
        gate: Gate | None = None,
        gate_refresh: Callable[[], None] | None = None,
        promotion_check: Callable[[str], str | None] | None = None,
        strict: bool = False,
        check_env: Callable[[str], str | None] | None = None,
    ) -> None:
        """``gate_refresh``: asks the voters the version gate has no report from yet, on an
        operator command's thread before the command reaches the owner (issue 36);
        ``promotion_check(learner)``: why ``promote_voter`` must wait (None: it may go)."""
        self._gate_refresh = gate_refresh
        self._promotion_check = promotion_check
        self.cfg = cfg
        # Strict (tests): an exception inside the owner or this loop stops the loop and is kept
        # in ``failure``; otherwise (production) it is logged as ``loop_error`` and the loop
        # goes on.
        self.strict = strict
        self.failure: BaseException | None = None
        self.node_id = cfg.node_id
        self.machine = machine
        self.replication = replication
        self.worker = worker
        self.clock = clock
        self.log = log
        # The committed changes this voter applied, for watch and follow (metrics/feed.py).
        self.changes = ChangeFeed(machine) if hasattr(machine, "on_changes") else None
        self.owner = Owner(
            cfg=cfg,
            state=machine,
            time_scale=clock.time_scale,
            unknown_poll_s=unknown_poll_s,
            gate=gate,
            strict=strict,
            check_env=check_env,
        )
        self._queue: queue.Queue[QueueItem] = queue.Queue(LOOP_QUEUE_MAX)
        self._pool = ThreadPoolExecutor(TASK_THREADS, thread_name_prefix="runner-task")
        # Proposals and barriers wait here, never on the loop thread.
        self._proposer = ThreadPoolExecutor(PROPOSERS_MAX, thread_name_prefix="runner-propose")
        self._thread = threading.Thread(target=self._run, name="runner-loop", daemon=True)
        self._stopped = threading.Event()
        self._timers: list[tuple[float, int, int]] = []  # (monotonic due, seq, owner token)
        self._seq = itertools.count()
        self._requests: dict[int, Future[Any]] = {}
        self._request_ids = itertools.count(1)
        self._requests_lock = threading.Lock()
        # The occurrences still observed or cancelled: published by the loop thread after each
        # turn, read by drain_and_stop and the stop notice (only the loop thread touches the
        # owner itself).
        self._open_ids: tuple[int, ...] = ()
        self._open_published_s = float("-inf")
        self._drain_taken = threading.Event()  # the owner drains (and what is open is published)

    # ---- what the owner knows, for status views and tests ------------------------------------

    @property
    def epoch(self) -> int | None:
        return self.owner.epoch

    @property
    def term(self) -> int:
        return self.owner.term

    @property
    def leader_hint(self) -> str | None:
        return self.owner.leader_hint

    # ---- thread-safe entry points ------------------------------------------------------------

    def start(self) -> None:
        self.replication.subscribe(self._on_leadership)
        self._thread.start()

    def _on_leadership(self, leadership: Leadership) -> None:
        # Called by whichever thread runs the Raft node: never block it.
        event = LeadershipChanged(leadership.is_leader, leadership.term, leadership.leader_id)
        try:
            self._queue.put_nowait(_Feed(event))
        except queue.Full:
            self.log.emit("loop_queue_full", dropped="leadership")

    def wake(self) -> None:
        """Make the loop look at the clock now (after an injected clock moved, in tests)."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_Wake())

    def _call(self, make: Any, timeout_s: float) -> Any:
        future: Future[Any] = Future()
        with self._requests_lock:
            request = next(self._request_ids)
            self._requests[request] = future
        try:
            self._queue.put(_Feed(make(request)), timeout=timeout_s)
            return future.result(timeout=timeout_s)
        except queue.Full:
            raise TimeoutError("the runner loop is busy") from None
        finally:
            with self._requests_lock:
                self._requests.pop(request, None)

    def operator(self, command: OperatorCommand) -> dict[str, Any]:
        """Run one operator command on the loop; one JSON-able reply. A membership change is a
        Raft entry, not a Machine command: it goes to the replication directly, from here."""
        if command.action in MEMBERSHIP_ACTIONS:
            refusal = self._promotion_refusal(command)
            if refusal is not None:
                self.log.emit("membership_refused", action=command.action, reason=refusal)
                return error_reply(400, "refused", f"{command.action}: {refusal}")
            return membership_reply(self.replication, command, self.log)
        if command.action == "list":
            return self._list()
        refused = code_refusal(command)  # V8 parses the code first; nothing runs (issue 35)
        if refused is not None:
            return refused
        if command.action in MUTATIONS and self._gate_refresh is not None:
            self._refresh_gate()
        try:
            reply: dict[str, Any] = self._call(
                lambda r: OperatorRequest(r, command), REPLY_TIMEOUT_S
            )
        except Exception:  # a timeout, or a failure inside the loop: the outcome is unknown
            fields: dict[str, Any] = {}
            if command.action in MUTATIONS:
                fields = {"outcome": "uncertain", "retry_safe": False}
            return error_reply(503, "unavailable", "the runner did not answer in time", **fields)
        if command.action == "status" and reply.get("status") == 409:
            # A follower, a learner or a removed voter: say which, and why it does not lead.
            seen = configuration_view(self.replication)
            if seen.get("member_status"):
                reply.setdefault("error", {})["member_status"] = seen["member_status"]
        return reply

    def _promotion_refusal(self, command: OperatorCommand) -> str | None:
        """A learner becomes a voter only once it reported a binary that applies every kind the
        log committed (it was left out of the gate until it reported; docs/raft.md)."""
        if command.action != "promote_voter" or self._promotion_check is None:
            return None
        configuration = configuration_view(self.replication).get("configuration") or {}
        if command.args["id"] not in (configuration.get("learners") or ()):
            return None  # not a learner: the Raft leader says why
        return self._promotion_check(command.args["id"])

    def _refresh_gate(self) -> None:
        refresh = self._gate_refresh
        try:
            if refresh is not None:
                refresh()
        except Exception as exc:  # only the gate's freshness depends on it
            self.log.emit("gate_refresh_failed", error=repr(exc))

    def _list(self) -> dict[str, Any]:
        """``list`` is this voter's local view, which needs nothing of the owner: it is answered
        on the caller's thread, with only references taken under the machine lock. Rendering
        1,024 records on the loop held every admission behind it for tens of milliseconds (and
        the Raft apply behind the lock)."""
        try:
            return list_reply(self.node_id, self.machine.read, self.cfg.remote)
        except Exception as exc:  # a bug must not kill the caller's thread either
            self.log.emit("list_failed", error=repr(exc))
            return error_reply(503, "unavailable", "the runner could not render its local view")

    def admit(
        self, binding: dict[str, Any], incarnation: str, caller: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """The admission route's call: (HTTP status, body); an error body is the protocol's
        error document (``v1.error_document``). ``caller``: the fleet worker whose own admission
        credential was presented (issue 33)."""
        try:
            return self._call(  # type: ignore[no-any-return]
                lambda r: AdmissionRequest(r, binding, incarnation, caller),
                ADMIT_REPLY_TIMEOUT_S,
            )
        except Exception:  # a timeout, or a failure inside the loop: a permit may exist
            return 503, v1.error_document(v1.ADMIT_UNCERTAIN_CODE, "no answer in time")

    def drain_and_stop(self, drain_s: float) -> None:
        """Stop scheduling; keep answering admissions while observation and cancellation finish
        (at most ``drain_s``); then stop the loop."""
        with contextlib.suppress(queue.Full):
            self._queue.put(_Feed(Drain()), timeout=1.0)
        deadline = time.monotonic() + drain_s
        # A loop in the middle of a turn must take the drain item before it is stopped;
        # otherwise it would stop with the item unread and never drain (nor log it).
        self._drain_taken.wait(max(0.0, deadline - time.monotonic()))
        while time.monotonic() < deadline and self._open_ids:
            time.sleep(0.05)
        self._stopped.set()
        with contextlib.suppress(queue.Full):  # stopped is set: the loop ends within a wake
            self._queue.put(_Stop(), timeout=1.0)
        self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._proposer.shutdown(wait=False, cancel_futures=True)

    def open_occurrences(self) -> list[int]:
        """The occurrences this voter still observes or cancels (as of the loop's last turn)."""
        return list(self._open_ids)

    def _publish_open(self) -> None:
        """Publish what is still open: every turn once draining (the drain waits on it),
        otherwise at most every ``OPEN_PUBLISH_S`` — the list is sorted over every tracked
        attempt, and a burst of a thousand of them made it a visible share of the loop's CPU."""
        now = time.monotonic()
        if self.owner.draining or now >= self._open_published_s + OPEN_PUBLISH_S:
            self._open_ids = tuple(self.owner.open_occurrences())
            self._open_published_s = now

    def _feed(self, event: Event) -> None:
        """Hand an answer back to the loop (from a pool thread): it must never be dropped."""
        self._queue.put(_Feed(event))

    # ---- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                item: QueueItem | None = self._queue.get(timeout=self._wait_s())
            except queue.Empty:
                item = None
            if isinstance(item, _Stop):
                break
            if isinstance(item, _Feed):
                self._hand(item.event)
            self._fire_timers()
            self._hand(Tick())
            self._publish_open()
            if self.owner.draining:
                # After publishing what is still open. Not when the item is taken: a decision
                # waiting for its commit holds the Drain back, and a stop decided before the
                # owner drains would miss the work that decision is about to send.
                self._drain_taken.set()

    def _hand(self, event: Event) -> None:
        try:
            effects = self.owner.handle(event, self.clock.now_s())
        except Exception as exc:  # a bug must not kill scheduling silently
            self.log.emit("loop_error", error=repr(exc))
            request = getattr(event, "request", None)
            if isinstance(request, int):
                self._fail(request, repr(exc))
            if self.strict:  # a bug is a bug: the loop stops and the test sees ``failure``
                self.failure = exc
                self._stopped.set()
                with self._requests_lock:  # no one waits for a loop that stopped
                    waiting = list(self._requests)
                for pending in waiting:
                    self._fail(pending, f"the runner loop stopped: {exc!r}")
                raise
            return
        for effect in effects:
            self._carry_out(effect)

    def _wait_s(self) -> float:
        wait = WAKE_S_MAX
        if self._timers:
            wait = min(wait, self._timers[0][0] - time.monotonic())
        due = self.owner.next_due_s()
        if due is not None:
            wait = min(wait, (due - self.clock.now_s()) / self.clock.time_scale)
        return max(0.0, wait)

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, token = heapq.heappop(self._timers)
            self._hand(TimerFired(token))

    # ---- effects -----------------------------------------------------------------------------

    def _carry_out(self, effect: Effect) -> None:
        if isinstance(effect, LogRecord):
            self.log.emit(effect.event, **effect.fields)
        elif isinstance(effect, Propose):
            self._proposer.submit(self._propose, effect)
        elif isinstance(effect, ReadBarrier):
            self._proposer.submit(self._barrier, effect.token)
        elif isinstance(effect, SetTimer):
            due = time.monotonic() + effect.delay_s
            heapq.heappush(self._timers, (due, next(self._seq), effect.token))
        elif isinstance(effect, DispatchRequest):
            binding, code, floor = dict(effect.binding), effect.code, effect.retained_through
            worker = effect.worker_id
            self._spawn(
                lambda: self._client(worker).execute(binding, code, retained_through=floor),
                ExecAnswered,
                effect.token,
            )
        elif isinstance(effect, ObserveRequest):
            eid, floor, worker = effect.execution_id, effect.retained_through, effect.worker_id
            self._spawn(
                lambda: self._client(worker).observe(eid, retained_through=floor),
                ObserveAnswered,
                effect.token,
            )
        elif isinstance(effect, CancelRequest):
            binding, worker = dict(effect.binding), effect.worker_id
            self._spawn(lambda: self._client(worker).cancel(binding), CancelAnswered, effect.token)
        elif isinstance(effect, Reply):
            self._resolve(effect.request, effect.value)
        elif isinstance(effect, ReplyFailed):
            self._fail(effect.request, effect.error)

    def _client(self, worker_id: str | None) -> Any:
        """The fleet worker's client (appliance/runner/worker_pool.py), or the one worker's."""
        for_worker = getattr(self.worker, "for_worker", None)
        return self.worker if for_worker is None else for_worker(worker_id)

    def _propose(self, effect: Propose) -> None:
        """On a proposer thread: the proposal, then its outcome back to the loop. A committed
        admission is answered from here at once (the worker waits for it on its launch path)."""
        try:
            raw = self.replication.propose(
                encode_command(effect.command), timeout_s=PROPOSE_TIMEOUT_S
            )
        except Exception as exc:
            raw = exc
        outcome = proposal_outcome(raw)
        if effect.answers_admission is not None and isinstance(outcome, Accepted | Refused):
            self._resolve(effect.answers_admission, ownership.admit_answer(outcome))
        self._feed(ProposalDone(effect.token, outcome))

    def _barrier(self, token: int) -> None:
        failure: NotLeaderAnswer | FailedAnswer | None = None
        status: dict[str, Any] = {}
        try:
            self.replication.read_barrier(timeout_s=BARRIER_TIMEOUT_S)
        except NotLeader as exc:
            failure = NotLeaderAnswer(getattr(exc, "leader_hint", None), str(exc))
        except Exception as exc:
            failure = FailedAnswer(str(exc))
        else:
            try:
                status = dict(self.replication.status())
            except Exception as exc:  # the status reply then carries what the owner knows
                self.log.emit("raft_status_unavailable", error=repr(exc))
        self._feed(BarrierDone(token, failure, status))

    def _spawn(self, fn: Any, answer: Any, token: int) -> None:
        def done(future: Future[Any]) -> None:
            try:
                value = future.result()
            except Exception as exc:  # the client classifies I/O; anything else is a bug
                value = exc
            self._feed(answer(token, value))

        self._pool.submit(fn).add_done_callback(done)

    def _resolve(self, request: int, value: Any) -> None:
        with self._requests_lock:
            future = self._requests.get(request)
        if future is not None and not future.done():
            with contextlib.suppress(Exception):  # answered meanwhile by another thread
                future.set_result(value)

    def _fail(self, request: int, error: str) -> None:
        with self._requests_lock:
            future = self._requests.get(request)
        if future is not None and not future.done():
            with contextlib.suppress(Exception):
                future.set_exception(RuntimeError(error))
