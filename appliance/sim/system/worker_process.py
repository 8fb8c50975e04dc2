"""The simulated worker process: the real launch core over the in-memory store and a simulated
engine, asking for permits through the real permit pass, crashing at any step.

See appliance/sim/system/world.py for the theory of operation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance.config.urls import Origin
from appliance.config.worker import EngineSettings
from appliance.http.client import AmbiguousSend, ConnectFailed, Response
from appliance.protocol import v1
from appliance.sim.system.config import BEARER, NAMESPACE, WORKER_ID, Clock, ProcessCrash
from appliance.sim.system.engine import SimEngine
from appliance.worker.admission import AdmissionClient
from appliance.worker.launch import Answer, LaunchCore, LaunchSettings, Reserving
from appliance.worker.memory_store import MemoryDisk, MemoryWorkerStore
from appliance.worker.wire import WireError, parse_cancel, parse_exec

if TYPE_CHECKING:
    from appliance.sim.system.world import SystemSim

__all__ = ["LaunchCore", "StepCrash", "WorkerProcess"]


class StepCrash:
    """The launch path's crash hook: the process dies right after a step, by the seed's roll."""

    def __init__(self, sim: SystemSim) -> None:
        self._sim = sim

    def after(self, step: str) -> None:
        if self._sim.faulty and self._sim.rng.random() < self._sim.step_crash_rate:
            raise ProcessCrash(step)


class WorkerProcess:
    def __init__(self, sim: SystemSim, worker_id: str = WORKER_ID) -> None:
        self.sim = sim
        self.worker_id = worker_id
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
        # Incarnations are distinct across the fleet, as a real worker's uuid4 is.
        prefix = "" if self.worker_id == WORKER_ID else f"{self.worker_id}-"
        return f"{prefix}inc-{self.generation}"

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
            slots=sim.engine_slots,
            queued=sim.engine_queue,
        )
        self.engines[incarnation] = self.engine
        self.admission = AdmissionClient(
            tuple(Origin("http", voter, 8000) for voter in sim.voter_ids),
            BEARER,
            incarnation,
            None,  # type: ignore[arg-type]  # the simulation drives permit_pass itself
        )
        self.core = LaunchCore(
            settings=LaunchSettings(NAMESPACE, self.worker_id, EngineSettings()),
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
            self.sim.schedule_restart_worker(self)
            return None

    # -- the routes --

    def handle(
        self,
        route: str,
        payload: Any,
        reply: Callable[[Answer | None], None],
        retained_through: int | None = None,
    ) -> None:
        core = self.core
        if core is None:
            reply(None)
            return
        if retained_through is not None:
            self.sim.ledger.on_retained_through(retained_through)
            core.note_retained_through(retained_through)
        if route == "observe":
            invocation = v1.invocation_of(payload, NAMESPACE)
            if invocation is None:
                reply(Answer(404, v1.error_document("unknown_execution", "not an id")))
                return
            answer = self.run(lambda: core.observation(invocation, core.settle(invocation)))
            if answer is not None and answer.status == 410:
                self.sim.ledger.events["observe_retired"] += 1
            self._prune(core)  # as WorkerService does: one batch on an observation
            reply(None if answer is None else core.with_capacity(answer))
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
        if isinstance(step, Answer) and step.body.get("error", {}).get("code") == v1.RETIRED_CODE:
            self.sim.ledger.events["exec_retired"] += 1
        if step is None or isinstance(step, Answer):
            reply(None if step is None else core.with_capacity(step))
            return
        self._permit(step, lambda answer: reply(_capacity(self.core, answer)))

    def _prune(self, core: LaunchCore) -> None:
        before = core.pruned_records
        core.prune_batch()
        if core.pruned_records > before:
            self.sim.result.worker_pruned += core.pruned_records - before
            self.sim.ledger.events["worker_pruned"] += core.pruned_records - before

    def _permit(self, step: Reserving, reply: Callable[[Answer | None], None]) -> None:
        sim = self.sim
        generation = self.generation
        binding, document = step.request.binding, step.request.document
        steps = self.admission.permit_pass(binding, document)

        def ask(request: tuple[str, bytes]) -> None:
            url, body = request
            voter = url.split("//")[1].split(":")[0]
            sim.admit_call(voter, json.loads(body), on_reply, self.worker_id)

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


def _capacity(core: LaunchCore | None, answer: Answer | None) -> Answer | None:
    """The answer stating the engine's capacity, as the process driver sends it."""
    if answer is None or core is None:
        return answer
    return core.with_capacity(answer)
