"""The owner's fleet decisions: which worker an attempt is claimed on, and failover.

Theory of operation (issue 33; the rules are appliance/core/placement.py and
appliance/owner/fleet.py): a claim binds the worker the pure placement function chooses from the
fleet in force (the sealed genesis with the committed fleet amendments folded in), each worker's
drain state, its reachability and its load (the attempts in flight or waiting there, plus the
claims planned in the same pass). An occurrence no worker may run is not claimed: it stays
Pending, its reason kept here for ``status`` and logged once (``placement_wait``), and is placed
as soon as a worker fits — it never becomes Unknown for that.

Every ``FLEET_TICK_S`` the owner looks at the fleet: a worker past the unreachable threshold is
marked ``unreachable`` (logged ``worker_unreachable``) and its attempts with no committed permit —
waiting for its capacity, or observed while no permit is committed — are fenced together with
``FenceDispatch`` (refused at apply where a permit exists), so each occurrence is claimed again as
the next attempt, elsewhere, without spending a retry; the probes the fleet module asks for are
sent (an observation of ``PROBE_EXECUTION_ID``, carrying W like every observation).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from appliance.core import state as core
from appliance.core.placement import (
    ACTIVE,
    DRAINING,
    UNREACHABLE,
    Candidate,
    PlacementDecision,
    PlacementRules,
    place,
)
from appliance.owner import ownership
from appliance.owner.applied import Accepted
from appliance.owner.attempts import Work, retained_through
from appliance.owner.dispatch_outcome import Fence, fence_backoff_s
from appliance.owner.events import ObserveAnswered, ObserveRequest
from appliance.owner.fleet import FLEET_TICK_S, PACING_PACED, PROBE_EXECUTION_ID
from appliance.owner.pacing import worker_of
from appliance.owner.requests import RequestDecisions
from appliance.owner.serial import Chain, NotOwner, Uncertain

PLACEMENT_WAITS_SHOWN_MAX = 32  # status lists at most this many occurrences waiting for a worker


class FleetDecisions(RequestDecisions):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probes: dict[int, str] = {}  # probe token -> worker id
        self._placement_waits: dict[int, str] = {}  # occurrence id -> why no worker takes it
        self._fleet_ticks = 0  # the generation of the running fleet timer
        self._fleet_ticking = False

    # ---- placement ---------------------------------------------------------------------------

    def _candidates(self, planned: Counter[str]) -> list[Candidate]:
        draining = set(self._read(core.fleet_state)["draining"])
        out = []
        for spec in self.cfg.remote.fleet:
            worker = spec.worker_id
            health = self._fleet.health.get(worker)
            pace = self._fleet.paces.get(worker)
            if worker in draining:
                status = DRAINING
            elif health is not None and health.unreachable:
                status = UNREACHABLE
            else:
                status = ACTIVE
            places = None
            if pace is not None and pace.mode == PACING_PACED and pace.capacity is not None:
                places = pace.capacity.takes
            load = self.in_flight(worker) + self.waiting_for_capacity(worker) + planned[worker]
            out.append(
                Candidate(
                    worker,
                    spec.labels,
                    status,
                    places,
                    load,
                    failing=health is not None and health.failures > 0,
                )
            )
        return out

    def _place(
        self,
        rules: PlacementRules,
        planned: Counter[str],
        base: list[Candidate] | None = None,
    ) -> PlacementDecision:
        """``base``: the candidates as the pass began (``_candidates(Counter())``), so a burst of
        claims reads the fleet once; ``planned`` adds this pass's claims to their load."""
        if base is None:
            return place(rules, self._candidates(planned))
        return place(
            rules, [replace(c, in_flight=c.in_flight + planned[c.worker_id]) for c in base]
        )

    def _choose_worker(
        self,
        occurrence_id: int,
        rules: PlacementRules,
        planned: Counter[str],
        base: list[Candidate] | None = None,
    ) -> str | None:
        """The worker to claim ``occurrence_id`` on, or None (it waits, with its reason)."""
        decision = self._place(rules, planned, base)
        if decision.selected is None:
            reason = decision.reason or "no worker"
            if self._placement_waits.get(occurrence_id) != reason:
                self._emit_log("placement_wait", occurrence=occurrence_id, reason=reason)
            self._placement_waits[occurrence_id] = reason
            return None
        if self._placement_waits.pop(occurrence_id, None) is not None:
            self._emit_log("placement_found", occurrence=occurrence_id, worker=decision.selected)
        planned[decision.selected] += 1
        return decision.selected

    def _placements(
        self, st: core.SchedulerState, observe: core.Observe
    ) -> tuple[tuple[int, str], ...]:
        """(schedule id, worker) for each schedule the observation selects slots for: where its
        new occurrences are claimed in the same commit (``ObserveAndPlace``). A schedule no
        worker may run is left out: its occurrences stay Pending and wait, with their reason,
        for the claim pass."""
        base = self._candidates(Counter())
        load: Counter[str] = Counter()
        out = []
        for entry in observe.entries:
            schedule = st.schedules.get(entry.schedule_id)
            if schedule is None or not entry.slots_s:
                continue
            decision = self._place(schedule.definition.placement, load, base)
            if decision.selected is not None:
                load[decision.selected] += len(entry.slots_s)
                out.append((entry.schedule_id, decision.selected))
        return tuple(sorted(out))

    def _fold_worker(self) -> str | None:
        """The worker an observation may claim its new occurrences on in the same commit
        (``ObserveAndClaim`` binds one worker for all): only in a fleet of one, while it takes
        new work and every schedule's placement rules accept it."""
        fleet = self.cfg.remote.fleet
        if len(fleet) != 1:
            return None
        (candidate,) = self._candidates(Counter())
        if candidate.status != ACTIVE:
            return None

        def rules_fit(st: core.SchedulerState) -> bool:
            return all(
                place(st.schedules[sid].definition.placement, [candidate]).selected is not None
                for sid in st.placed_schedules
                if sid in st.schedules
            )

        return candidate.worker_id if self._read(rules_fit) else None

    def placement_waits(self) -> list[dict[str, Any]]:
        """``status``: the occurrences waiting for a worker, with why (the oldest first)."""
        live = self._read(
            lambda st: {oid for oid in self._placement_waits if oid in st.occurrences}
        )
        for oid in [o for o in self._placement_waits if o not in live]:
            del self._placement_waits[oid]
        return [
            {"occurrence_id": oid, "reason": reason}
            for oid, reason in sorted(self._placement_waits.items())[:PLACEMENT_WAITS_SHOWN_MAX]
        ]

    # ---- the fleet's health ------------------------------------------------------------------

    def _start_fleet_ticks(self) -> None:
        """Look at the fleet's health every ``FLEET_TICK_S`` while this voter owns and the
        fleet has more than one worker. A fleet of one keeps the one-worker behaviour: there is
        nowhere else to place, so its attempts are dispatched and, unanswered, fenced (or
        Unknown with a permit) as before the fleet."""
        if self._fleet_ticking or self.epoch is None or len(self.cfg.remote.fleet) < 2:
            return
        self._fleet_ticks += 1
        self._fleet_ticking = True
        generation = self._fleet_ticks
        self._later(FLEET_TICK_S, lambda: self._fleet_tick(generation))

    def _fleet_tick(self, generation: int) -> None:
        ids = [spec.worker_id for spec in self.cfg.remote.fleet]
        if generation != self._fleet_ticks or self.epoch is None or len(ids) < 2:
            self._fleet_ticking = False
            return
        self._fleet.keep_only(set(ids))
        floor = self._read(retained_through)
        for worker in ids:
            if self._fleet.turns_unreachable(worker, self._wall_s):
                health = self._fleet.health_of(worker)
                self._emit_log(
                    "worker_unreachable",
                    worker=worker,
                    failed_calls=health.failures,
                    in_flight=self.in_flight(worker),
                )
                self._dirty = True
            idle = not self.in_flight(worker) and not self.waiting_for_capacity(worker)
            if self._fleet.probe_due(worker, self._wall_s, idle=idle, fleet_size=len(ids)):
                self._probe(worker, floor)
        unreachable = [w for w in ids if self._fleet.state_of(w) == UNREACHABLE]
        fenceable = [w for w in self._work.values() if worker_of(w) in unreachable]
        # While not every voter applies FenceDispatch the fence waits (no refusal every tick):
        # those attempts are observed and, unanswered, Unknown at their deadline as before.
        gated = fenceable and self._gate is not None and self._gate("FenceDispatch") is not None
        if fenceable and not gated and self._chain is None and not self._draining:
            self._run(self._fence_unreachable(fenceable))
        self._later(FLEET_TICK_S, lambda: self._fleet_tick(generation))

    def _probe(self, worker: str, floor: int) -> None:
        health = self._fleet.health_of(worker)
        health.probe_out = True
        health.last_probe_s = self._wall_s
        token = next(self._tokens)
        self._probes[token] = worker
        self._out.append(
            ObserveRequest(token, PROBE_EXECUTION_ID, retained_through=floor, worker_id=worker)
        )

    def _probe_answered(self, event: Any) -> bool:
        """Handle a probe's answer; False when ``event`` answers something else."""
        if not isinstance(event, ObserveAnswered) or event.token not in self._probes:
            return False
        worker = self._probes.pop(event.token)
        self._fleet.health_of(worker).probe_out = False
        was_failing = self._fleet.state_of(worker) != "reachable"
        self._heard(worker, event.result)
        if was_failing and self._fleet.state_of(worker) == "reachable":
            self._dirty = True  # what waited for a worker may be placed now
        return True

    def _fence_unreachable(self, works: list[Work]) -> Chain[None]:
        """Fence every attempt of an unreachable worker that holds no committed permit, in one
        batch of ``FenceDispatch`` (each refused at apply where a permit exists)."""
        planned: list[tuple[Work, Any]] = []
        now_s = self._now_s()
        for work in works:
            if work.busy or self._work.get(work.occurrence_id) is not work:
                continue  # a call is in flight: its answer decides (after_exec fences)
            record = self._current(work)
            if record is None or record.state is not core.S.RUNNING:
                continue
            committed = self._committed(work, record)
            if committed.permit is not None or not committed.epoch_held:
                continue  # observed: Unknown at its deadline if it stays silent
            reason = (
                f"worker {worker_of(work)} unreachable and no permit committed: fenced, the "
                "occurrence is placed again"
            )
            fence = Fence(reason, fence_backoff_s(committed.fenced_before))
            command = ownership.fence_dispatch_command(
                self.cfg.remote.namespace, self.epoch or 0, record, fence, now_s
            )
            planned.append((work, command))
        if not planned:
            return
        outcomes = yield from self._proposals([command for _, command in planned])
        for (work, _command), outcome in zip(planned, outcomes, strict=True):
            ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
            try:
                result = self._interpret(outcome)
            except (NotOwner, Uncertain) as exc:
                self._emit_log("unreachable_fence_uncertain", reason=str(exc), **ids)
                continue
            if isinstance(result, Accepted):
                self._emit_log("unreachable_fenced", worker=worker_of(work), **ids)
                self._waiting.pop(work.occurrence_id, None)
                self._forget(work)
                work.observing = False
            else:
                self._emit_log("unreachable_fence_refused", reason=result.message, **ids)
        self._dirty = True

    def fleet_status(self) -> list[dict[str, Any]]:
        """``status`` and health: every worker in force, its drain state and reachability."""
        draining = set(self._read(core.fleet_state)["draining"])
        return [
            {
                "worker_id": spec.worker_id,
                "url": spec.url.url,
                "labels": dict(spec.labels),
                "state": "draining" if spec.worker_id in draining else "active",
                "reachability": self._fleet.state_of(spec.worker_id),
                "in_flight": self.in_flight(spec.worker_id),
                "waiting_for_capacity": self.waiting_for_capacity(spec.worker_id),
            }
            for spec in self.cfg.remote.fleet
        ]


__all__ = ["FleetDecisions"]
