"""The whole system in one seeded run: voters (Raft, apply, Owner) and a worker (launch core).

Theory of operation. Everything that decides in production runs here unchanged: each voter is a
real ``RaftNode`` (appliance/raft/node.py) on a ``MemoryLogStorage``, a real ``Machine``
(appliance/runner/machine.py: the core's apply) and a real ``Owner`` (appliance/runner/owner.py)
fed the events its driver feeds it; the worker is the real ``LaunchCore``
(appliance/worker/launch.py) over a ``MemoryWorkerStore`` and a ``SimEngine``, asking for
permits through the real ``AdmissionClient.permit_pass`` and answered by the real admission
parsing and ``ownership.admit_answer``; the runner reads the worker's answers through the real
``WorkerClient`` classification. What this module adds is only what the process drivers add —
delivery, timeouts, timers, restarts — with one ``random.Random(seed)`` choosing every fault:

- a network between voters (loss, duplication, reordering, partitions: appliance/sim/network.py)
  and between voters and the worker (a request that cannot connect fails definitely, one whose
  request or answer is lost times out ambiguously);
- process crashes and restarts of voters (at a ``ready()``: the unpersisted batch is lost, as
  an unsynced write is) and of the worker (at any named step of its launch path, and at random;
  with a power loss its unsynced writes are gone: appliance/worker/memory_store.py);
- clocks: every process reads its own wall clock, skewed and jumping (forwards and back);
- an engine that completes, fails, hangs and loses work (appliance/sim/system/engine.py);
- an operator who cancels occurrences.

Time: the event queue counts real milliseconds; the owners see wall seconds scaled by
``time_scale`` (as a quickstart's owner does) so that a run covers many cron minutes.

A run has a SAFETY phase (every fault) and a LIVENESS phase (faults stop, everything heals and
restarts, the schedule is disabled) that must end with every occurrence settled and every
replica identical. The checkers are in appliance/sim/system/checkers.py.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from appliance.config.addresses import HostPort
from appliance.config.credentials import Secret
from appliance.config.runner import Peer, RemoteConfig, RunnerConfig
from appliance.config.urls import Origin
from appliance.config.worker import EngineSettings
from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.http import ApiError
from appliance.http.client import AmbiguousSend, ConnectFailed, Response
from appliance.protocol import v1
from appliance.raft import (
    MemoryLogStorage,
    Message,
    NotLeader,
    ProposalRefused,
    RaftConfig,
    RaftNode,
    ReadRefused,
    Role,
)
from appliance.raft.messages import EntryKind
from appliance.raft.send_order import may_send_before_persist
from appliance.runner import owner_events as ev
from appliance.runner import ownership
from appliance.runner.admission import parse_admit
from appliance.runner.machine import Machine, encode_command
from appliance.runner.operator import parse_operator
from appliance.runner.owner import Owner
from appliance.runner.worker_client import WorkerClient
from appliance.sim.faults import FaultSettings
from appliance.sim.network import FakeNetwork
from appliance.sim.system.checkers import Ledger, Violation
from appliance.sim.system.engine import EngineFaults, SimEngine
from appliance.worker.admission import AdmissionClient
from appliance.worker.launch import Answer, LaunchCore, LaunchSettings, Reserving
from appliance.worker.memory_store import MemoryDisk, MemoryWorkerStore
from appliance.worker.wire import WireError, parse_cancel, parse_exec

START_S: Final = 1_800_000_000  # the wall clock's origin (2027-01-15)
TICK_MS: Final = 100
WAKE_MS_MAX: Final = 1_000  # an owner's driver wakes at least this often
PROPOSAL_TIMEOUT_MS: Final = 10_000  # then FailedAnswer: it may still commit
FAULT_EVERY_MS_MAX: Final = 3_000
OPERATOR_EVERY_MS_MAX: Final = 8_000
LINK_MS: Final = (1, 30)  # one-way latency voter<->worker
CONNECT_FAIL_MS: Final = 50
EXEC_TIMEOUT_MS: Final = 30_000  # appliance/runner/worker_client.py's read timeouts
OBSERVE_TIMEOUT_MS: Final = 5_000
CANCEL_TIMEOUT_MS: Final = 30_000
ADMIT_TIMEOUT_MS: Final = 15_000  # appliance/worker/admission.py's read timeout
ADMISSION_ROUTE_MS_MAX: Final = 10_000  # the route answers 503 "uncertain" past this
NAMESPACE: Final = "sim"
WORKER_ID: Final = "worker-1"
WORKER: Final = "worker"
CODE: Final = "console.log('tick')"
BEARER: Final = Secret("sim-bearer")
LIMITS: Final = Limits(schedules=4, records=256, outstanding=64, running=16)
DEFINITION: Final = {
    "name": "every-minute",
    "code": CODE,
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": {"CatchUp": {"cap": 3}},
        "overlap": "Concurrent",
        "retry": {"max_retries": 1, "delay_seconds": 30},
    },
}
LAUNCH_STEPS: Final = (
    "validated",
    "pool_reserved",
    "reserved",
    "permit_received",
    "permit_recorded",
    "consumed",
    "submitted",
    "receipt_recorded",
    "fenced",
)


@dataclass(frozen=True)
class SystemOptions:
    voters: int = 3
    safety_ms: int = 60_000
    liveness_ms: int = 90_000
    time_scale: float = 6.0
    faults: bool = True
    strict_unknown: bool = False  # issue 23: fail any Unknown without a committed permit
    timeout_seconds: int = 20  # the remote grant's engine timeout (wall seconds)


@dataclass
class SystemResult:
    seed: int
    ok: bool = True
    violation: str = ""
    rule: str = ""
    events: int = 0
    occurrences: int = 0
    states: dict[str, int] = field(default_factory=dict)
    permits: int = 0
    launches: int = 0
    unknown_with_permit: int = 0
    unknown_without_permit: int = 0
    voter_crashes: int = 0
    worker_crashes: int = 0
    power_losses: int = 0
    log_entries: int = 0
    reached: dict[str, int] = field(default_factory=dict)  # which rules the run exercised


class ProcessCrash(Exception):
    """The simulated process died at this point (a crash hook, or a fault)."""


class Clock:
    """A process's wall clock: the simulation's time plus this process's own offset."""

    def __init__(self, sim: SystemSim) -> None:
        self._sim = sim
        self.offset_ms = 0

    def wall_s(self) -> float:
        return START_S + (self._sim.now_ms + self.offset_ms) / 1000 * self._sim.options.time_scale

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.wall_s(), UTC)


# ---- voters -----------------------------------------------------------------------------------


@dataclass
class _Pending:
    term: int
    token: int
    admission: int | None
    since_ms: int


class Voter:
    def __init__(self, sim: SystemSim, node_id: str) -> None:
        self.sim = sim
        self.id = node_id
        self.storage = MemoryLogStorage()
        self.clock = Clock(sim)
        self.incarnation = 0
        self.node: RaftNode | None = None
        self.machine: Machine | None = None
        self.owner: Owner | None = None
        self.pending: dict[int, _Pending] = {}
        self.barriers: dict[int, tuple[int, int | None]] = {}  # read id -> (token, index)
        self.admissions: dict[int, int] = {}  # request id -> worker request id it answers
        self.answered: set[int] = set()
        self.leadership: tuple[bool, int, str | None] = (False, 0, None)

    @property
    def up(self) -> bool:
        return self.node is not None

    def start(self) -> None:
        sim = self.sim
        self.incarnation += 1
        config = RaftConfig(
            node_id=self.id,
            voters=tuple(sim.voter_ids),
            election_ticks_min=10,
            election_ticks_max=20,
            batch_entries_max=sim.rng.choice((1, 4, 32)),
        )
        self.node = RaftNode(config, self.storage, random.Random(sim.rng.getrandbits(64)))
        self.machine = Machine(None, LIMITS)
        self.owner = Owner(
            cfg=sim.runner_config(self.id),
            state=self.machine,
            time_scale=sim.options.time_scale,
            unknown_poll_s=2.0,
        )
        self.pending.clear()
        self.barriers.clear()
        self.admissions.clear()
        self.answered.clear()
        self.leadership = (False, 0, None)
        incarnation = self.incarnation
        sim.at(sim.rng.randint(1, TICK_MS), lambda: self._tick(incarnation))
        sim.at(sim.rng.randint(1, WAKE_MS_MAX), lambda: self._wake(incarnation))

    def crash(self) -> None:
        if self.node is None:
            return
        self.node = None
        self.machine = None
        self.owner = None
        self.incarnation += 1
        self.sim.result.voter_crashes += 1

    def alive(self, incarnation: int) -> bool:
        return self.node is not None and self.incarnation == incarnation

    # -- the Raft driver's loop (as appliance/sim/simulation.py) --

    def _tick(self, incarnation: int) -> None:
        if not self.alive(incarnation):
            return
        assert self.node is not None
        self.node.tick()
        self.process()
        self.sim.at(TICK_MS, lambda: self._tick(incarnation))

    def step(self, message: Message) -> None:
        if self.node is None:
            return
        self.node.step(message)
        self.process()

    def process(self) -> None:
        sim = self.sim
        while self.node is not None and self.node.has_ready():
            node = self.node
            ready = node.ready()
            send_first = may_send_before_persist(ready)
            if send_first:
                for message in ready.messages:
                    sim.send_raft(message)
            if sim.faulty and sim.rng.random() < sim.crash_in_ready_rate:
                self.crash()  # before the persist: the batch is lost, as an unsynced write
                sim.schedule_restart(self)
                return
            if ready.must_persist:
                self.storage.persist(
                    term=ready.hard_state.term,
                    voted_for=ready.hard_state.voted_for,
                    truncate_from=ready.truncate_from,
                    entries=ready.stored_entries(),
                )
            if not send_first:
                for message in ready.messages:
                    sim.send_raft(message)
            for entry in ready.committed:
                self._apply(entry)
            for read in ready.reads:
                self._barrier_index(read.request_id, read.index)
            for request_id in ready.reads_failed:
                self._barrier_failed(request_id)
            if ready.recovered:
                self.storage.clear_recovering()
            node.advance(ready)
            self._barriers_due()
            self._leadership()

    def _apply(self, entry: Any) -> None:
        assert self.machine is not None
        if entry.kind is not EntryKind.NORMAL:
            self._proposal_ended(entry.index, entry.term, None)
            return  # a leader's no-op barrier entry
        self.sim.ledger.on_commit(entry.index, entry.data)
        result = self.machine.apply(entry.index, entry.data)
        self._proposal_ended(entry.index, entry.term, result)

    def _proposal_ended(self, index: int, term: int, result: Any) -> None:
        pending = self.pending.pop(index, None)
        if pending is None:
            return
        outcome: Any = result if pending.term == term and result is not None else None
        if outcome is None:
            outcome = ev.LostAnswer(f"index {index} holds another entry")
        elif pending.admission is not None:
            self._answer_admission(pending.admission, ownership.admit_answer(outcome))
        self.feed(ev.ProposalDone(pending.token, outcome))

    def _leadership(self) -> None:
        node = self.node
        if node is None:
            return
        now = (node.role is Role.LEADER, node.term, node.leader_id)
        if now != self.leadership:
            self.leadership = now
            self.feed(ev.LeadershipChanged(now[0], now[1], now[2]))

    # -- the owner's driver --

    def _wake(self, incarnation: int) -> None:
        if not self.alive(incarnation) or self.owner is None:
            return
        self.feed(ev.Tick())
        self._expire_proposals()
        delay = WAKE_MS_MAX
        due = self.owner.next_due_s() if self.owner is not None else None
        if due is not None:
            wait_ms = (due - self.clock.wall_s()) / self.sim.options.time_scale * 1000
            delay = max(1, min(delay, int(wait_ms) + 1))
        self.sim.at(delay, lambda: self._wake(incarnation))

    def feed(self, event: Any) -> None:
        """Hand one event to the owner, then a Tick, and carry out the effects (later)."""
        owner = self.owner
        if owner is None:
            return
        wall_s = self.clock.wall_s()
        effects = owner.handle(event, wall_s)
        if not isinstance(event, ev.Tick):
            effects += owner.handle(ev.Tick(), wall_s)
        incarnation = self.incarnation
        for effect in effects:
            self.sim.at(0, lambda e=effect: self._carry_out(incarnation, e))

    def _carry_out(self, incarnation: int, effect: Any) -> None:
        if not self.alive(incarnation):
            return
        sim = self.sim
        if isinstance(effect, ev.Propose):
            self._propose(effect)
        elif isinstance(effect, ev.ReadBarrier):
            self._read_barrier(effect.token)
        elif isinstance(effect, ev.DispatchRequest):
            document = {"protocol": 1, "binding": dict(effect.binding), "code": effect.code}
            sim.worker_call(self, "exec", document, effect.token)
        elif isinstance(effect, ev.ObserveRequest):
            sim.worker_call(self, "observe", effect.execution_id, effect.token)
        elif isinstance(effect, ev.CancelRequest):
            document = {"protocol": 1, "binding": dict(effect.binding)}
            sim.worker_call(self, "cancel", document, effect.token)
        elif isinstance(effect, ev.SetTimer):
            delay_ms = max(0, int(effect.delay_s * 1000))
            sim.at(delay_ms, lambda: self._fire(incarnation, effect.token))
        elif isinstance(effect, ev.Reply):
            self._reply(effect.request, effect.value)
        elif isinstance(effect, ev.ReplyFailed):
            self._reply(effect.request, None)
        # LogRecord: the decision log is not simulated

    def _fire(self, incarnation: int, token: int) -> None:
        if self.alive(incarnation):
            self.feed(ev.TimerFired(token))

    def _propose(self, effect: ev.Propose) -> None:
        node = self.node
        assert node is not None
        try:
            term, index = node.propose(encode_command(effect.command))
        except NotLeader as exc:
            self.feed(ev.ProposalDone(effect.token, ev.NotLeaderAnswer(exc.leader_hint)))
            return
        except ProposalRefused as exc:
            self.feed(ev.ProposalDone(effect.token, ev.FailedAnswer(str(exc))))
            return
        self.pending[index] = _Pending(
            term, effect.token, effect.answers_admission, self.sim.now_ms
        )
        self.process()

    def _expire_proposals(self) -> None:
        now_ms = self.sim.now_ms
        for index, pending in list(self.pending.items()):
            if now_ms - pending.since_ms > PROPOSAL_TIMEOUT_MS:
                del self.pending[index]
                if pending.admission is not None:
                    self._answer_admission(pending.admission, (503, _uncertain()))
                self.feed(ev.ProposalDone(pending.token, ev.FailedAnswer("no commit in time")))

    def _read_barrier(self, token: int) -> None:
        node = self.node
        assert node is not None
        self.sim.read_ids += 1
        read_id = self.sim.read_ids
        try:
            node.read_index(read_id)
        except NotLeader as exc:
            self.feed(ev.BarrierDone(token, ev.NotLeaderAnswer(exc.leader_hint)))
            return
        except ReadRefused as exc:
            self.feed(ev.BarrierDone(token, ev.FailedAnswer(str(exc))))
            return
        self.barriers[read_id] = (token, None)
        self.process()

    def _barrier_index(self, read_id: int, index: int) -> None:
        if read_id in self.barriers:
            self.barriers[read_id] = (self.barriers[read_id][0], index)

    def _barrier_failed(self, read_id: int) -> None:
        barrier = self.barriers.pop(read_id, None)
        if barrier is not None:
            self.feed(ev.BarrierDone(barrier[0], ev.FailedAnswer("the barrier failed")))

    def _barriers_due(self) -> None:
        node = self.node
        if node is None:
            return
        for read_id, (token, index) in list(self.barriers.items()):
            if index is not None and node.applied_index >= index:
                del self.barriers[read_id]
                status = {"role": node.role.value, "term": node.term}
                self.feed(ev.BarrierDone(token, None, status))

    # -- the admission route --

    def admit(self, document: Any, answer: Callable[[int, dict[str, Any]], None]) -> None:
        """A worker's permit request arrived: parse as the route does, hand it to the owner."""
        try:
            binding, incarnation = parse_admit(document)
        except ApiError as exc:
            answer(exc.status, v1.error_document(exc.code, str(exc)))
            return
        self.sim.request_ids += 1
        request = self.sim.request_ids
        self.sim.admission_answers[request] = answer
        self.admissions[request] = request
        incarnation_now = self.incarnation

        def route_timeout() -> None:
            if self.alive(incarnation_now):
                self._answer_admission(request, (503, _uncertain()))

        self.sim.at(ADMISSION_ROUTE_MS_MAX, route_timeout)
        self.feed(ev.AdmissionRequest(request, binding, incarnation))

    def _answer_admission(self, request: int, value: tuple[int, dict[str, Any]]) -> None:
        if request in self.answered:
            return  # answered once (on commit); the owner's later Reply is ignored
        self.answered.add(request)
        answer = self.sim.admission_answers.pop(request, None)
        if answer is not None:
            status, body = value
            answer(status, {"protocol": 1, **body})

    def _reply(self, request: int, value: Any) -> None:
        if request in self.admissions:
            if value is None:
                self._answer_admission(request, (503, _uncertain()))
            else:
                self._answer_admission(request, value)
            return
        self.sim.operator_replies[request] = value


def _uncertain() -> dict[str, Any]:
    return v1.error_document(v1.ADMIT_UNCERTAIN_CODE, "the outcome is not known")


# ---- the worker -------------------------------------------------------------------------------


class StepCrash:
    """The launch path's crash hook: the process dies right after a step, by the seed's roll."""

    def __init__(self, sim: SystemSim) -> None:
        self._sim = sim

    def after(self, step: str) -> None:
        if self._sim.faulty and self._sim.rng.random() < self._sim.step_crash_rate:
            raise ProcessCrash(step)


class WorkerProcess:
    def __init__(self, sim: SystemSim) -> None:
        self.sim = sim
        self.disk = MemoryDisk()
        self.clock = Clock(sim)
        self.generation = 0
        self.core: LaunchCore | None = None
        self.engine: SimEngine | None = None
        self.store: MemoryWorkerStore | None = None
        self.engines: dict[str, SimEngine] = {}  # incarnation -> its engine (kept for checks)
        self.admission: Any = None

    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def incarnation(self) -> str:
        return f"inc-{self.generation}"

    def start(self) -> None:
        sim = self.sim
        self.generation += 1
        incarnation = self.incarnation
        self.store = MemoryWorkerStore.open(
            self.disk,
            namespace=NAMESPACE,
            incarnation_id=incarnation,
            now_ms=int(self.clock.wall_s() * 1000),
        )
        self.engine = SimEngine(
            rng=sim.rng,
            faults=sim.engine_faults,
            schedule=lambda delay, fn: sim.at(delay, self._guard(incarnation, fn)),
            now=self.clock.now,
            on_launch=lambda request: sim.ledger.on_launch(
                request.execution_id, incarnation, self.disk, self.clock.wall_s()
            ),
        )
        self.engines[incarnation] = self.engine
        self.admission = AdmissionClient(
            tuple(Origin("http", voter, 8000) for voter in sim.voter_ids),
            BEARER,
            incarnation,
            None,  # type: ignore[arg-type]  # the simulation drives permit_pass itself
        )
        self.core = LaunchCore(
            settings=LaunchSettings(NAMESPACE, WORKER_ID, EngineSettings()),
            store=self.store,
            engine=self.engine,
            clock=self.clock,
            crash=StepCrash(sim),
        )
        self.run(self.core.mark_lost_executions)

    def _guard(self, incarnation: str, fn: Callable[[], None]) -> Callable[[], None]:
        def guarded() -> None:
            if self.up and self.incarnation == incarnation:
                self.run(fn)

        return guarded

    def crash(self, power_loss: bool = False) -> None:
        if self.core is None:
            return
        self.core = None
        self.store = None
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.sim.result.worker_crashes += 1
        if power_loss:
            self.disk.lose_unsynced()
            self.sim.result.power_losses += 1

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run worker code; a ``ProcessCrash`` kills the process (restarted later)."""
        try:
            return fn()
        except ProcessCrash:
            self.crash(power_loss=self.sim.rng.random() < 0.3)
            self.sim.schedule_restart_worker()
            return None

    # -- the routes --

    def handle(self, route: str, payload: Any, reply: Callable[[Answer | None], None]) -> None:
        core = self.core
        if core is None:
            reply(None)
            return
        if route == "observe":
            invocation = v1.invocation_of(payload, NAMESPACE)
            if invocation is None:
                reply(Answer(404, v1.error_document("unknown_execution", "not an id")))
                return
            answer = self.run(lambda: core.observation(invocation, core.settle(invocation)))
            reply(answer)
            return
        if route == "cancel":
            try:
                request = parse_cancel(payload)
            except WireError as exc:
                reply(Answer(400, v1.error_document(exc.code, exc.message)))
                return

            def cancel() -> Answer:
                fenced = core.fence_for_cancel(request)
                if isinstance(fenced, Answer):
                    return fenced
                return core.cancel_answer(request, fenced)

            reply(self.run(cancel))
            return
        try:
            exec_request = parse_exec(payload)
        except WireError as exc:
            reply(Answer(400, v1.error_document(exc.code, exc.message)))
            return
        step = self.run(lambda: core.begin_exec(exec_request))
        if step is None or isinstance(step, Answer):
            reply(step)
            return
        self._permit(step, reply)

    def _permit(self, step: Reserving, reply: Callable[[Answer | None], None]) -> None:
        sim = self.sim
        generation = self.generation
        binding, document = step.request.binding, step.request.document
        steps = self.admission.permit_pass(binding, document)

        def ask(request: tuple[str, bytes]) -> None:
            url, body = request
            voter = url.split("//")[1].split(":")[0]
            sim.admit_call(voter, json.loads(body), on_reply)

        def on_reply(answer: Response | ConnectFailed | AmbiguousSend) -> None:
            core = self.core
            if core is None or self.generation != generation:
                return  # the process that asked is gone
            try:
                ask(steps.send(answer))
            except StopIteration as done:
                result = done.value

                def finish() -> Answer:
                    try:
                        return core.permit_arrived(step, result)
                    finally:
                        core.end_exec(step)

                reply(self.run(finish))

        ask(next(steps))


# ---- the simulation ---------------------------------------------------------------------------


class SystemSim:
    def __init__(self, seed: int, options: SystemOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.now_ms = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.result = SystemResult(seed)
        self.faulty = options.faults
        rng = self.rng
        net_faults = FaultSettings(
            loss_rate=rng.choice((0.0, 0.01, 0.05)) if options.faults else 0.0,
            dup_rate=rng.choice((0.0, 0.02)) if options.faults else 0.0,
            reorder_rate=rng.choice((0.0, 0.05)) if options.faults else 0.0,
        )
        self.net = FakeNetwork(net_faults, rng)
        self.worker_loss = rng.choice((0.0, 0.02, 0.1)) if options.faults else 0.0
        self.crash_rate = rng.choice((0.1, 0.3, 0.5))
        self.crash_in_ready_rate = rng.choice((0.0, 0.001, 0.005))
        self.step_crash_rate = rng.choice((0.0, 0.002, 0.01))
        self.engine_faults = EngineFaults(time_scale=options.time_scale)
        self.expires_at_s = START_S + (
            rng.randint(120, 600) if rng.random() < 0.3 else 10 * 365 * 86_400
        )
        self.voter_ids = [f"voter-{chr(ord('a') + i)}" for i in range(options.voters)]
        self.voters = {vid: Voter(self, vid) for vid in self.voter_ids}
        self.worker = WorkerProcess(self)
        self.ledger = Ledger(self, LIMITS, strict_unknown=options.strict_unknown)
        self.read_ids = 0
        self.request_ids = 0
        self.admission_answers: dict[int, Callable[[int, dict[str, Any]], None]] = {}
        self.operator_replies: dict[int, Any] = {}
        self.worker_blocked: set[str] = set()  # voters cut off from the worker
        self.definition = parse_definition(DEFINITION, LIMITS)
        self._liveness = False

    def wall_s(self) -> float:
        """The true wall clock (no process's skew)."""
        return START_S + self.now_ms / 1000 * self.options.time_scale

    # -- configuration --

    def runner_config(self, node_id: str) -> RunnerConfig:
        remote = RemoteConfig(
            url=Origin("http", WORKER, 9000),
            bearer_env="SIM_BEARER",
            expires_at=datetime.fromtimestamp(self.expires_at_s, UTC),
            session="sim",
            timeout_seconds=self.options.timeout_seconds,
            heap_mb=64,
            namespace=NAMESPACE,
            worker_id=WORKER_ID,
        )
        return RunnerConfig(
            node_id=node_id,
            advertise_addr=node_id,
            cluster_port=7000,
            peers=tuple(
                Peer(other, HostPort(other, 7000)) for other in self.voter_ids if other != node_id
            ),
            data_dir="/nonexistent",
            admission_addr=HostPort("127.0.0.1", 8000),
            admission_bearer_env="SIM_ADMISSION",
            cluster_bearer_env="SIM_CLUSTER",
            remote=remote,
            limits=LIMITS,
            schedules=(self.definition,),
        )

    # -- the event queue --

    def at(self, delay_ms: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now_ms + max(0, delay_ms), self._seq, fn))

    def _run_until(self, end_ms: int, until: Callable[[], bool] | None = None) -> bool:
        while self._queue and self._queue[0][0] <= end_ms:
            at_ms, _, fn = heapq.heappop(self._queue)
            self.now_ms = at_ms
            self.result.events += 1
            fn()
            if until is not None and self.result.events % 200 == 0 and until():
                return True
        self.now_ms = end_ms
        return until() if until is not None else False

    def run(self) -> SystemResult:
        try:
            for voter in self.voters.values():
                voter.start()
            self.worker.start()
            if self.faulty:
                self.at(self.rng.randint(1, FAULT_EVERY_MS_MAX), self._fault)
            self.at(self.rng.randint(1, OPERATOR_EVERY_MS_MAX), self._operator)
            self._run_until(self.options.safety_ms)
            self._heal()
            settled = self._run_until(
                self.options.safety_ms + self.options.liveness_ms, self._settled
            )
            if not settled:
                raise Violation("liveness", self._unsettled())
            self.ledger.final_checks([v.machine for v in self.voters.values() if v.machine])
        except Violation as violation:
            self.result.ok = False
            self.result.rule = violation.rule
            self.result.violation = f"at {self.now_ms} ms: {violation}"
        self.ledger.summarize(self.result)
        return self.result

    # -- faults --

    def _fault(self) -> None:
        if not self.faulty:
            return
        self.at(self.rng.randint(1, FAULT_EVERY_MS_MAX), self._fault)
        rng = self.rng
        roll = rng.random()
        if roll < 0.25:
            self._repartition()
        elif roll < 0.25 + 0.25 * self.crash_rate:
            running = [v for v in self.voters.values() if v.up]
            leaders = [v for v in running if v.node is not None and v.node.role is Role.LEADER]
            pick = leaders if leaders and rng.random() < 0.6 else running
            if pick:
                victim = rng.choice(pick)
                victim.crash()
                self.schedule_restart(victim)
        elif roll < 0.6:
            if self.worker.up and rng.random() < 0.3:
                self.worker.crash(power_loss=rng.random() < 0.4)
                self.schedule_restart_worker()
        elif roll < 0.8:
            clock = rng.choice([v.clock for v in self.voters.values()] + [self.worker.clock])
            clock.offset_ms += rng.choice((-1, 1)) * rng.randint(100, 5_000)
            clock.offset_ms = max(-10_000, min(clock.offset_ms, 30_000))

    def _repartition(self) -> None:
        self.net.heal()
        self.worker_blocked.clear()
        ids = list(self.voter_ids)
        shape = self.rng.choice(("heal", "isolate", "one_way", "split", "worker"))
        if shape == "isolate":
            node = self.rng.choice(ids)
            self.net.isolate(node, [i for i in ids if i != node])
        elif shape == "one_way":
            node = self.rng.choice(ids)
            self.net.isolate(node, [i for i in ids if i != node], one_way=True)
        elif shape == "split":
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.net.split(ids[:cut], ids[cut:])
        elif shape == "worker":
            self.worker_blocked = set(self.rng.sample(ids, self.rng.randint(1, len(ids))))

    def schedule_restart(self, voter: Voter) -> None:
        def restart() -> None:
            if not voter.up:
                voter.start()

        self.at(self.rng.randint(200, 4_000), restart)

    def schedule_restart_worker(self) -> None:
        def restart() -> None:
            if not self.worker.up:
                self.worker.start()

        self.at(self.rng.randint(200, 4_000), restart)

    def _heal(self) -> None:
        self.faulty = False
        self._liveness = True
        self.net = FakeNetwork(FaultSettings(), self.rng)
        self.worker_loss = 0.0
        self.worker_blocked.clear()
        for voter in self.voters.values():
            voter.clock.offset_ms = 0
            if not voter.up:
                voter.start()
        self.worker.clock.offset_ms = 0
        if not self.worker.up:
            self.worker.start()
        self.at(self.rng.randint(1_000, 5_000), self._disable)

    def _disable(self) -> None:
        """The liveness phase stops new slots, so the work can settle."""
        if self.ledger.schedule_disabled():
            return
        leaders = [v for v in self.voters.values() if v.owner is not None and v.owner.epoch]
        if leaders:
            self.request_ids += 1
            command = parse_operator(json.dumps({"action": "disable", "id": 1}))
            leaders[0].feed(ev.OperatorRequest(self.request_ids, command))
        self.at(2_000, self._disable)

    def _operator(self) -> None:
        if self._liveness:
            return
        self.at(self.rng.randint(1, OPERATOR_EVERY_MS_MAX), self._operator)
        candidates = self.ledger.cancellable()
        owners = [v for v in self.voters.values() if v.owner is not None]
        if not candidates or not owners:
            return
        self.request_ids += 1
        occurrence = self.rng.choice(candidates)
        command = parse_operator(json.dumps({"action": "cancel", "occurrence_id": occurrence}))
        self.rng.choice(owners).feed(ev.OperatorRequest(self.request_ids, command))

    # -- the networks --

    def send_raft(self, message: Message) -> None:
        for delay_ms in self.net.delivery_delays_ms(message.sender, message.to):
            self.at(delay_ms, lambda m=message: self.voters[m.to].step(m))

    def _link_ms(self) -> int:
        return self.rng.randint(*LINK_MS)

    def _lost(self) -> bool:
        return self.rng.random() < self.worker_loss

    def worker_call(self, voter: Voter, route: str, payload: Any, token: int) -> None:
        """One request of the runner's WorkerClient: delivered, timed out or refused."""
        incarnation = voter.incarnation
        done = {"answered": False}
        timeout_ms = {"exec": EXEC_TIMEOUT_MS, "observe": OBSERVE_TIMEOUT_MS}.get(
            route, CANCEL_TIMEOUT_MS
        )

        def answer(outcome: Response | ConnectFailed | AmbiguousSend) -> None:
            if done["answered"] or not voter.alive(incarnation):
                return
            done["answered"] = True
            voter.feed(_worker_answer(route, token, payload, outcome))

        if voter.id in self.worker_blocked or not self.worker.up:
            self.at(CONNECT_FAIL_MS, lambda: answer(ConnectFailed("sim", "connection refused")))
            return
        self.at(timeout_ms, lambda: answer(AmbiguousSend("sim", "read timed out")))
        if self._lost():
            return  # the request was lost after the connection was made

        def deliver() -> None:
            def reply(result: Answer | None) -> None:
                if result is None or self._lost() or voter.id in self.worker_blocked:
                    return  # no answer: the runner's read times out
                response = Response(result.status, (), _json_bytes(result.body))
                self.at(self._link_ms(), lambda: answer(response))

            self.worker.handle(route, payload, reply)

        self.at(self._link_ms(), deliver)

    def admit_call(
        self,
        voter_id: str,
        document: Any,
        on_reply: Callable[[Response | ConnectFailed | AmbiguousSend], None],
    ) -> None:
        """One POST of the worker's permit pass to one voter's admission route."""
        voter = self.voters[voter_id]
        done = {"answered": False}

        def answer(outcome: Response | ConnectFailed | AmbiguousSend) -> None:
            if not done["answered"]:
                done["answered"] = True
                on_reply(outcome)

        if voter_id in self.worker_blocked or not voter.up:
            self.at(CONNECT_FAIL_MS, lambda: answer(ConnectFailed("sim", "connection refused")))
            return
        self.at(ADMIT_TIMEOUT_MS, lambda: answer(AmbiguousSend("sim", "read timed out")))
        if self._lost():
            return

        def deliver() -> None:
            if not voter.up:
                return

            def route_answer(status: int, body: dict[str, Any]) -> None:
                if self._lost():
                    return
                response = Response(status, (), _json_bytes(body))
                self.at(self._link_ms(), lambda: answer(response))

            voter.admit(document, route_answer)

        self.at(self._link_ms(), deliver)

    # -- liveness --

    def _settled(self) -> bool:
        machines = [v.machine for v in self.voters.values()]
        nodes = [v.node for v in self.voters.values()]
        if any(m is None for m in machines) or any(n is None for n in nodes):
            return False
        if not self.ledger.schedule_disabled() or not self.ledger.all_settled():
            return False
        applied = {n.applied_index for n in nodes if n is not None}
        commit = {n.commit_index for n in nodes if n is not None}
        return (
            len(applied) == 1
            and applied == commit
            and not any(v.pending for v in self.voters.values())
        )

    def _unsettled(self) -> str:
        return (
            self.ledger.describe_unsettled()
            + " "
            + ", ".join(
                f"{v.id}: up={v.up} applied={v.node.applied_index if v.node else None}"
                for v in self.voters.values()
            )
        )


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _OneAnswer:
    """An ``HttpClient`` that answers the one request the real ``WorkerClient`` makes with what
    the simulation delivered, so the runner's own classification reads the worker's answer."""

    def __init__(self, outcome: Response | ConnectFailed | AmbiguousSend) -> None:
        self._outcome = outcome

    def _answer(self, *args: Any, **kwargs: Any) -> Response:
        if isinstance(self._outcome, Exception):
            raise self._outcome
        return self._outcome

    post = _answer
    get = _answer

    def close(self) -> None:
        return None


def _worker_answer(
    route: str, token: int, payload: Any, outcome: Response | ConnectFailed | AmbiguousSend
) -> Any:
    client = WorkerClient(f"http://{WORKER}:9000", BEARER, _OneAnswer(outcome))  # type: ignore[arg-type]
    if route == "exec":
        return ev.ExecAnswered(token, client.execute(payload["binding"], payload["code"]))
    if route == "observe":
        return ev.ObserveAnswered(token, client.observe(payload))
    return ev.CancelAnswered(token, client.cancel(payload["binding"]))


def run_system_seed(seed: int, options: SystemOptions | None = None) -> SystemResult:
    return SystemSim(seed, options or SystemOptions()).run()
