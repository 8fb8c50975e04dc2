"""The whole system in one seeded run: voters (Raft, apply, Owner) and a worker (launch core).

Theory of operation. Everything that decides in production runs here unchanged: each voter is a
real ``RaftNode`` (appliance/raft/node.py) on a ``MemoryLogStorage``, a real ``Machine``
(appliance/runner/machine.py: the core's apply) and a real ``Owner`` (appliance/owner/owner.py)
fed the events its driver feeds it; the worker is the real ``LaunchCore``
(appliance/worker/launch.py) over a ``MemoryWorkerStore`` and a ``SimEngine``, asking for
permits through the real ``AdmissionClient.permit_pass`` and answered by the real admission
parsing and ``ownership.admit_answer``; the runner reads the worker's answers through the real
``WorkerClient`` classification. What this package adds is only what the process drivers add —
delivery, timeouts, timers, restarts (voter.py drives a voter as appliance/raft/driver.py and
appliance/runner/loop.py do, worker_process.py the worker as appliance/worker/service.py does,
this module the networks, the faults and the phases) — with one ``random.Random(seed)``
choosing every fault:

- a network between voters (loss, duplication, reordering, partitions: appliance/sim/network.py)
  and between voters and the worker (a request that cannot connect fails definitely, one whose
  request or answer is lost times out ambiguously);
- process crashes and restarts of voters (at a ``ready()``: the unpersisted batch is lost, as
  an unsynced write is) and of the worker (at any named step of its launch path, and at random;
  with a power loss its unsynced writes are gone: appliance/worker/memory_store.py);
- clocks: every process reads its own wall clock, skewed and jumping (forwards and back);
- an engine that completes, fails, hangs and loses work (appliance/sim/system/engine.py);
- an operator who sends the command table's commands: cancel, run_now (a request id sometimes
  repeated, also after a takeover), pause/resume, update (new code mid-run), enable/disable.

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
from datetime import UTC, datetime
from typing import Any

from appliance.commands.operator import parse_operator
from appliance.config.addresses import HostPort
from appliance.config.runner import Peer, RemoteConfig, RunnerConfig, WorkerSpec
from appliance.config.urls import Origin
from appliance.core.definition import parse_definition
from appliance.http.client import AmbiguousSend, ConnectFailed, Response
from appliance.owner import events as ev
from appliance.raft import Message, Role
from appliance.runner.worker_client import WorkerClient
from appliance.sim.faults import FaultSettings
from appliance.sim.network import FakeNetwork
from appliance.sim.system.checkers import Ledger, Violation
from appliance.sim.system.config import (
    ADMIT_TIMEOUT_MS,
    BEARER,
    CANCEL_TIMEOUT_MS,
    CODE,
    CONNECT_FAIL_MS,
    DEFINITION,
    EXEC_TIMEOUT_MS,
    FAULT_EVERY_MS_MAX,
    FLEET_WORKERS_MAX,
    LIMITS,
    LINK_MS,
    NAMESPACE,
    OBSERVE_TIMEOUT_MS,
    OPERATOR_EVERY_MS_MAX,
    START_S,
    WORKER,
    WORKER_ID,
    SystemOptions,
    SystemResult,
    limits_for,
)
from appliance.sim.system.engine import EngineFaults
from appliance.sim.system.voter import Voter
from appliance.sim.system.worker_process import WorkerProcess
from appliance.worker.launch import Answer

__all__ = ["LIMITS", "SystemOptions", "SystemResult", "SystemSim", "run_system_seed"]


class SystemSim:
    def __init__(self, seed: int, options: SystemOptions) -> None:
        self.seed = seed
        self.options = options
        self.limits = limits_for(options)
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
        # Drawn only in the retention profile, so that other runs keep their random streams.
        self.replay_rate = rng.choice((0.1, 0.5)) if options.records and options.faults else 0.0
        self.expires_at_s = START_S + (
            rng.randint(120, 600) if rng.random() < 0.3 else 10 * 365 * 86_400
        )
        # The engine's slots: one or two make claimed work wait for capacity (paced dispatch).
        # Drawn from a source of its own, so the rest of the seed's faults stay what they were.
        self.engine_slots = random.Random(f"slots-{seed}").choice((1, 2, 4))
        # Places behind the slots (the engine's FIFO queue): an execution waits there as running
        # with started_at null, and the owner's view of the queue (owner/queue.py) decides
        # when to look at it.
        self.engine_queue = random.Random(f"queue-{seed}").choice((0, 0, 2, 8))
        self.voter_ids = [f"voter-{chr(ord('a') + i)}" for i in range(options.voters)]
        self.voters = {vid: Voter(self, vid) for vid in self.voter_ids}
        # The fleet profile (issue 33): 1-4 workers, drawn from a source of its own so the rest
        # of the seed's faults stay what they were.
        count = (
            random.Random(f"workers-{seed}").randint(1, FLEET_WORKERS_MAX) if options.fleet else 1
        )
        self.worker_ids = [WORKER_ID, *(f"worker-{j}" for j in range(2, count + 1))]
        self.workers = {wid: WorkerProcess(self, wid) for wid in self.worker_ids}
        self.worker = self.workers[WORKER_ID]
        self.result.workers = count
        self.ledger = Ledger(self, self.limits, strict_unknown=options.strict_unknown)
        self.read_ids = 0
        self.request_ids = 0
        self.admission_answers: dict[int, Callable[[int, dict[str, Any]], None]] = {}
        self.operator_replies: dict[int, Any] = {}
        # voters cut off from each worker (a partition between voters and single workers)
        self.worker_blocked: dict[str, set[str]] = {}
        self.definitions = tuple(
            parse_definition(
                {**DEFINITION, "name": f"{DEFINITION['name']}-{i}" if i else DEFINITION["name"]},
                self.limits,
            )
            for i in range(options.schedules)
        )
        self.run_now_ids: list[str] = []
        self.code_versions = 0
        self._liveness = False

    def wall_s(self) -> float:
        """The true wall clock (no process's skew)."""
        return START_S + self.now_ms / 1000 * self.options.time_scale

    # -- configuration --

    def runner_config(self, node_id: str) -> RunnerConfig:
        fleet = len(self.worker_ids) > 1
        remote = RemoteConfig(
            url=None if fleet else Origin("http", WORKER, 9000),
            bearer_env="SIM_BEARER",
            expires_at=datetime.fromtimestamp(self.expires_at_s, UTC),
            session="sim",
            timeout_seconds=self.options.timeout_seconds,
            heap_mb=64,
            namespace=NAMESPACE,
            worker_id=None if fleet else WORKER_ID,
            workers=tuple(WorkerSpec(wid, Origin("http", wid, 9000)) for wid in self.worker_ids)
            if fleet
            else (),
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
            limits=self.limits,
            schedules=self.definitions,
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
            for worker in self.workers.values():
                worker.start()
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
            worker = (
                self.worker if len(self.workers) == 1 else rng.choice(list(self.workers.values()))
            )
            if worker.up and rng.random() < 0.3:
                worker.crash(power_loss=rng.random() < 0.4)
                self.schedule_restart_worker(worker)
        elif roll < 0.8:
            clock = rng.choice([v.clock for v in self.voters.values()] + [self.worker.clock])
            clock.offset_ms += rng.choice((-1, 1)) * rng.randint(100, 5_000)
            clock.offset_ms = max(-10_000, min(clock.offset_ms, 30_000))

    def _repartition(self) -> None:
        self.net.heal()
        self.worker_blocked = {}
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
            blocked = set(self.rng.sample(ids, self.rng.randint(1, len(ids))))
            # With a fleet, the cut is between those voters and a single worker.
            target = WORKER_ID if len(self.workers) == 1 else self.rng.choice(self.worker_ids)
            self.worker_blocked = {target: blocked}

    def schedule_restart(self, voter: Voter) -> None:
        def restart() -> None:
            if not voter.up:
                voter.start()

        self.at(self.rng.randint(200, 4_000), restart)

    def schedule_restart_worker(self, worker: WorkerProcess | None = None) -> None:
        process = self.worker if worker is None else worker

        def restart() -> None:
            if not process.up:
                process.start()

        self.at(self.rng.randint(200, 4_000), restart)

    def blocked(self, worker_id: str | None) -> set[str]:
        """The voters cut off from ``worker_id`` now."""
        return self.worker_blocked.get(worker_id or WORKER_ID, set())

    def _heal(self) -> None:
        self.faulty = False
        self._liveness = True
        self.net = FakeNetwork(FaultSettings(), self.rng)
        self.worker_loss = 0.0
        self.worker_blocked = {}
        for voter in self.voters.values():
            voter.clock.offset_ms = 0
            if not voter.up:
                voter.start()
        for worker in self.workers.values():
            worker.clock.offset_ms = 0
            if not worker.up:
                worker.start()
        self.at(self.rng.randint(1_000, 5_000), self._disable)

    def _disable(self) -> None:
        """The liveness phase resumes scheduling and stops new slots, so the work can settle."""
        paused = self.ledger.paused()
        draining = self.ledger.draining()
        owners = [v for v in self.voters.values() if v.owner is not None and v.owner.epoch]
        if owners and draining:
            # The fleet settles only if its drained workers take work again (a drained fleet
            # leaves Pending occurrences waiting, visibly, for a worker).
            self._send(owners[0], {"action": "undrain_worker", "worker_id": draining[0]})
        if self.ledger.schedule_disabled() and not paused:
            # Look again later: an operator command of the safety phase still in flight (an
            # enable, a resume) may commit after this and schedule slots again.
            self.at(2_000, self._disable)
            return
        leaders = owners
        if leaders:
            self.request_ids += 1
            schedules = self.ledger.reference.state.schedules
            enabled = min((sid for sid, sch in schedules.items() if sch.enabled), default=1)
            action = {"action": "resume"} if paused else {"action": "disable", "id": enabled}
            command = parse_operator(json.dumps(action))
            leaders[0].feed(ev.OperatorRequest(self.request_ids, command))
        self.at(2_000, self._disable)

    def _operator(self) -> None:
        if self._liveness:
            return
        self.at(self.rng.randint(1, OPERATOR_EVERY_MS_MAX), self._operator)
        owners = [v for v in self.voters.values() if v.owner is not None]
        if not owners:
            return
        candidates = self.ledger.cancellable()
        if candidates:
            occurrence = self.rng.choice(candidates)
            self._send(self.rng.choice(owners), {"action": "cancel", "occurrence_id": occurrence})
        if self.rng.random() < 0.6:
            # Mostly to an acquired owner (the operator follows a 409's leader hint).
            acquired = [v for v in owners if v.owner is not None and v.owner.epoch]
            target = self.rng.choice(acquired if acquired and self.rng.random() < 0.7 else owners)
            document = self._operator_document()
            if document is not None:
                self._send(target, document)

    def _send(self, voter: Voter, document: dict[str, Any]) -> None:
        self.request_ids += 1
        voter.feed(ev.OperatorRequest(self.request_ids, parse_operator(json.dumps(document))))

    def _operator_document(self) -> dict[str, Any] | None:
        """One seeded command of the command table (appliance/commands/table.py) besides
        cancel. A run_now reuses an earlier request id half the time — an operator repeating an
        uncertain call, often to the next owner after a takeover; an update changes the code
        mid-run."""
        rng = self.rng
        roll = rng.random()
        schedule_id = min(self.ledger.reference.state.schedules, default=None)
        if schedule_id is None:
            return None
        if roll < 0.35:
            if self.run_now_ids and rng.random() < 0.5:
                request_id = rng.choice(self.run_now_ids)
            else:
                request_id = f"req-{len(self.run_now_ids) + 1}"
                self.run_now_ids.append(request_id)
            return {"action": "run_now", "id": schedule_id, "request_id": request_id}
        if roll < 0.6:
            if rng.random() < 0.5:
                return {"action": "pause"}
            return {"action": "resume", "catch_up": rng.random() < 0.5}
        if roll < 0.8:
            self.code_versions += 1
            code = f"{CODE} // v{self.code_versions}"
            return {"action": "update", "id": schedule_id, "code": code}
        if len(self.workers) > 1 and rng.random() < 0.5:
            # The fleet profile: drain a worker (live attempts finish there), or undrain one.
            worker_id = rng.choice(self.worker_ids)
            action = "undrain_worker" if worker_id in self.ledger.draining() else "drain_worker"
            return {"action": action, "worker_id": worker_id}
        if rng.random() < 0.5:
            return {"action": "disable", "id": schedule_id}
        return {"action": "enable", "id": schedule_id, "catch_up": rng.random() < 0.3}

    # -- the networks --

    def send_raft(self, message: Message) -> None:
        for delay_ms in self.net.delivery_delays_ms(message.sender, message.to):
            self.at(delay_ms, lambda m=message: self.voters[m.to].step(m))

    def _link_ms(self) -> int:
        return self.rng.randint(*LINK_MS)

    def _lost(self) -> bool:
        return self.rng.random() < self.worker_loss

    def worker_call(
        self,
        voter: Voter,
        route: str,
        payload: Any,
        token: int,
        retained_through: int | None = None,
        worker_id: str | None = None,
    ) -> None:
        """One request of the runner's WorkerClient to ``worker_id`` (the fleet's first when
        None): delivered, timed out or refused; ``retained_through`` is the floor W the request
        carries (its query parameter)."""
        worker = self.workers.get(worker_id or WORKER_ID)
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

        if worker is None or voter.id in self.blocked(worker_id) or not worker.up:
            self.at(CONNECT_FAIL_MS, lambda: answer(ConnectFailed("sim", "connection refused")))
            return
        self.at(timeout_ms, lambda: answer(AmbiguousSend("sim", "read timed out")))
        if self._lost():
            return  # the request was lost after the connection was made

        def deliver() -> None:
            def reply(result: Answer | None) -> None:
                if result is None or self._lost() or voter.id in self.blocked(worker_id):
                    return  # no answer: the runner's read times out
                response = Response(result.status, (), _json_bytes(result.body))
                self.at(self._link_ms(), lambda: answer(response))

            worker.handle(route, payload, reply, retained_through)
            if route == "exec" and self.replay_rate and self.faulty:
                self._maybe_replay(worker, payload, retained_through)

        self.at(self._link_ms(), deliver)

    def _maybe_replay(
        self, worker: WorkerProcess, payload: Any, retained_through: int | None
    ) -> None:
        """The retention profile's fault: the same exec reaches the worker again later (a
        duplicated request; its answer goes nowhere). After the worker pruned the invocation
        it must still never launch it twice (docs/worker.md "Retention")."""
        if self.rng.random() >= self.replay_rate:
            return

        def replay() -> None:
            if worker.up:
                self.ledger.events["exec_replayed"] += 1
                worker.handle("exec", payload, lambda _answer: None, retained_through)

        self.at(self.rng.randint(1_000, 60_000), replay)

    def admit_call(
        self,
        voter_id: str,
        document: Any,
        on_reply: Callable[[Response | ConnectFailed | AmbiguousSend], None],
        worker_id: str = WORKER_ID,
    ) -> None:
        """One POST of ``worker_id``'s permit pass to one voter's admission route."""
        voter = self.voters[voter_id]
        done = {"answered": False}

        def answer(outcome: Response | ConnectFailed | AmbiguousSend) -> None:
            if not done["answered"]:
                done["answered"] = True
                on_reply(outcome)

        if voter_id in self.blocked(worker_id) or not voter.up:
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
        # Every voter has applied everything ever committed: three voters that all restarted
        # agree at index 0 before they replayed anything, which is not settled.
        return (
            len(applied) == 1
            and applied == commit
            and min(applied) >= max(self.ledger.committed, default=0)
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
