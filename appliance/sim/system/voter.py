"""One simulated voter: a real RaftNode, the real apply (Machine) and a real Owner, driven as
the process drives them (appliance/raft/driver.py, appliance/runner/loop.py).

See appliance/sim/system/world.py for the theory of operation.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance.http import ApiError
from appliance.owner import events as ev
from appliance.owner import ownership
from appliance.owner.owner import Owner
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
from appliance.runner.admission import parse_admit
from appliance.runner.machine import Machine, encode_command
from appliance.sim.system.checkers import RULE_OWNER_RAISED, Violation
from appliance.sim.system.config import (
    ADMISSION_ROUTE_MS_MAX,
    PROPOSAL_TIMEOUT_MS,
    TICK_MS,
    WAKE_MS_MAX,
    Clock,
)

if TYPE_CHECKING:
    from appliance.sim.system.world import SystemSim

__all__ = ["Owner", "Voter"]


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
        self.admissions: set[int] = set()  # the request ids that are admission requests
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
        self.machine = Machine(None, sim.limits)
        self.owner = Owner(
            cfg=sim.runner_config(self.id),
            state=self.machine,
            time_scale=sim.options.time_scale,
            unknown_poll_s=2.0,
            strict=sim.options.strict,
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
        try:
            effects = owner.handle(event, wall_s)
            if not isinstance(event, ev.Tick):
                effects += owner.handle(ev.Tick(), wall_s)
        except Violation:
            raise
        except Exception as exc:  # strict owners raise what production logs as loop_error
            raise Violation(RULE_OWNER_RAISED, f"{self.id} on {event!r}: {raised(exc)}") from exc
        self.sim.ledger.on_owner_turn(owner, effects)
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
            sim.worker_call(
                self, "exec", document, effect.token, effect.retained_through, effect.worker_id
            )
        elif isinstance(effect, ev.ObserveRequest):
            sim.worker_call(
                self,
                "observe",
                effect.execution_id,
                effect.token,
                effect.retained_through,
                effect.worker_id,
            )
        elif isinstance(effect, ev.CancelRequest):
            document = {"protocol": 1, "binding": dict(effect.binding)}
            sim.worker_call(self, "cancel", document, effect.token, None, effect.worker_id)
        elif isinstance(effect, ev.SetTimer):
            delay_ms = max(0, int(effect.delay_s * 1000))
            sim.at(delay_ms, lambda: self._fire(incarnation, effect.token))
        elif isinstance(effect, ev.Reply):
            self._reply(effect.request, effect.value)
        elif isinstance(effect, ev.ReplyFailed):
            self._reply(effect.request, None)
        elif isinstance(effect, ev.LogRecord):
            sim.ledger.on_decision(effect.event, effect.fields)  # counted, not printed

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
        self.admissions.add(request)
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


def raised(exc: BaseException) -> str:
    """The exception and where it was raised (the innermost frame), for the seed's report."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return f"{exc!r}{where}"


def _uncertain() -> dict[str, Any]:
    return v1.error_document(v1.ADMIT_UNCERTAIN_CODE, "the outcome is not known")
