"""The owner's fleet decisions: which worker an attempt is claimed on, and failover (issue 33).

Theory of operation (the rules are appliance/core/placement.py and appliance/owner/fleet.py): a
claim binds the worker the pure placement function chooses from the fleet in force (the sealed
genesis with the committed fleet amendments folded in), each worker's drain state, its
reachability and its load (the attempts in flight or waiting there, plus the claims planned in
the same pass). An occurrence no worker may run is not claimed: it stays Pending, its reason kept
here for ``status`` and logged once (``placement_wait``), and is placed as soon as a worker fits —
it never becomes Unknown for that.

Every ``FLEET_TICK_S`` (in a fleet of two or more) the owner looks at the fleet: a worker past
the unreachable threshold is marked ``unreachable`` (logged ``worker_unreachable``) and its
attempts with no committed permit are fenced (``Attempts.fence_unreachable``), so each occurrence
is claimed again as the next attempt, elsewhere, without spending a retry; the probes the fleet
module asks for are sent (an observation of ``PROBE_EXECUTION_ID``, carrying W like every
observation).

A part of the owner (appliance/owner/owner.py composes it), holding only the probes in flight,
the placement waits and its timer's generation; the per-worker pacing and health are the
attempts' ``Fleet``.
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
from appliance.owner.attempts import Attempts, retained_through
from appliance.owner.config_in_force import ConfigInForce
from appliance.owner.events import ObserveAnswered, ObserveRequest
from appliance.owner.fleet import FLEET_TICK_S, PROBE_EXECUTION_ID, REACHABLE
from appliance.owner.pacing import PACING_PACED
from appliance.owner.serial import Serial
from appliance.owner.standing import Standing

PLACEMENT_WAITS_SHOWN_MAX = 32  # status lists at most this many occurrences waiting for a worker


class FleetDecisions:
    def __init__(
        self, serial: Serial, standing: Standing, config: ConfigInForce, attempts: Attempts
    ) -> None:
        self._serial = serial
        self._standing = standing
        self._config = config
        self._attempts = attempts
        self._probes: dict[int, str] = {}  # probe token -> worker id
        self._placement_waits: dict[int, str] = {}  # occurrence id -> why no worker takes it
        self._ticks = 0  # the generation of the running fleet timer
        self._ticking = False

    def clear(self) -> None:
        """Ownership ended: the timer stops; the next owner learns the fleet again."""
        self._placement_waits.clear()
        self._ticks += 1
        self._ticking = False

    # ---- placement ---------------------------------------------------------------------------

    def candidates(self, planned: Counter[str]) -> list[Candidate]:
        draining = set(self._serial.read(core.fleet_state)["draining"])
        fleet, attempts = self._attempts.fleet, self._attempts
        out = []
        for spec in self._config.get().remote.fleet:
            worker = spec.worker_id
            health = fleet.health.get(worker)
            pace = fleet.paces.get(worker)
            if worker in draining:
                status = DRAINING
            elif health is not None and health.unreachable:
                status = UNREACHABLE
            else:
                status = ACTIVE
            places = None
            if pace is not None and pace.mode == PACING_PACED and pace.capacity is not None:
                places = pace.capacity.takes
            load = attempts.in_flight(worker) + attempts.waiting(worker) + planned[worker]
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

    def place(
        self,
        rules: PlacementRules,
        planned: Counter[str],
        base: list[Candidate] | None = None,
    ) -> PlacementDecision:
        """``base``: the candidates as the pass began (``candidates(Counter())``), so a burst of
        claims reads the fleet once; ``planned`` adds this pass's claims to their load."""
        if base is None:
            return place(rules, self.candidates(planned))
        loaded = [replace(c, in_flight=c.in_flight + planned[c.worker_id]) for c in base]
        return place(rules, loaded)

    def choose_worker(
        self,
        occurrence_id: int,
        rules: PlacementRules,
        planned: Counter[str],
        base: list[Candidate] | None = None,
    ) -> str | None:
        """The worker to claim ``occurrence_id`` on, or None (it waits, with its reason)."""
        decision = self.place(rules, planned, base)
        if decision.selected is None:
            reason = decision.reason or "no worker"
            if self._placement_waits.get(occurrence_id) != reason:
                self._serial.log("placement_wait", occurrence=occurrence_id, reason=reason)
            self._placement_waits[occurrence_id] = reason
            return None
        if self._placement_waits.pop(occurrence_id, None) is not None:
            self._serial.log("placement_found", occurrence=occurrence_id, worker=decision.selected)
        planned[decision.selected] += 1
        return decision.selected

    def placements(
        self, st: core.SchedulerState, observe: core.Observe
    ) -> tuple[tuple[int, str], ...]:
        """(schedule id, worker) for each schedule the observation selects slots for: where its
        new occurrences are claimed in the same commit (``ObserveAndPlace``). A schedule no
        worker may run is left out: its occurrences stay Pending and wait, with their reason,
        for the claim pass."""
        base = self.candidates(Counter())
        load: Counter[str] = Counter()
        out = []
        for entry in observe.entries:
            schedule = st.schedules.get(entry.schedule_id)
            if schedule is None or not entry.slots_s:
                continue
            decision = self.place(schedule.definition.placement, load, base)
            if decision.selected is not None:
                load[decision.selected] += len(entry.slots_s)
                out.append((entry.schedule_id, decision.selected))
        return tuple(sorted(out))

    def fold_worker(self) -> str | None:
        """The worker an observation may claim its new occurrences on in the same commit
        (``ObserveAndClaim`` binds one worker for all): only in a fleet of one, while it takes
        new work and every schedule's placement rules accept it."""
        if len(self._config.get().remote.fleet) != 1:
            return None
        (candidate,) = self.candidates(Counter())
        if candidate.status != ACTIVE:
            return None

        def rules_fit(st: core.SchedulerState) -> bool:
            return all(
                place(st.schedules[sid].definition.placement, [candidate]).selected is not None
                for sid in st.placed_schedules
                if sid in st.schedules
            )

        return candidate.worker_id if self._serial.read(rules_fit) else None

    def placement_waits(self) -> list[dict[str, Any]]:
        """``status``: the occurrences waiting for a worker, with why (the oldest first)."""
        waits = self._placement_waits
        live = self._serial.read(lambda st: {oid for oid in waits if oid in st.occurrences})
        for oid in [o for o in waits if o not in live]:
            del waits[oid]
        return [
            {"occurrence_id": oid, "reason": reason}
            for oid, reason in sorted(waits.items())[:PLACEMENT_WAITS_SHOWN_MAX]
        ]

    def status(self) -> list[dict[str, Any]]:
        """``status`` and health: every worker in force, its drain state and reachability."""
        draining = set(self._serial.read(core.fleet_state)["draining"])
        attempts = self._attempts
        return [
            {
                "worker_id": spec.worker_id,
                "url": spec.url.url,
                "labels": dict(spec.labels),
                "state": "draining" if spec.worker_id in draining else "active",
                "reachability": attempts.fleet.state_of(spec.worker_id),
                "in_flight": attempts.in_flight(spec.worker_id),
                "waiting_for_capacity": attempts.waiting(spec.worker_id),
            }
            for spec in self._config.get().remote.fleet
        ]

    # ---- the fleet's health ------------------------------------------------------------------

    def start_ticks(self) -> None:
        """Look at the fleet's health every ``FLEET_TICK_S`` while this voter owns and the
        fleet has more than one worker. A fleet of one keeps the one-worker behaviour: there is
        nowhere else to place, so its attempts are dispatched and, unanswered, fenced (or
        Unknown with a permit) as before the fleet."""
        if self._ticking or self._standing.epoch is None:
            return
        if len(self._config.get().remote.fleet) < 2:
            return
        self._ticks += 1
        self._ticking = True
        generation = self._ticks
        self._serial.later(FLEET_TICK_S, lambda: self._tick(generation))

    def _tick(self, generation: int) -> None:
        ids = [spec.worker_id for spec in self._config.get().remote.fleet]
        if generation != self._ticks or self._standing.epoch is None or len(ids) < 2:
            self._ticking = False
            return
        fleet, attempts, serial = self._attempts.fleet, self._attempts, self._serial
        fleet.keep_only(set(ids))
        floor = serial.read(retained_through)
        for worker in ids:
            if fleet.turns_unreachable(worker, serial.wall_s):
                serial.log(
                    "worker_unreachable",
                    worker=worker,
                    failed_calls=fleet.health_of(worker).failures,
                    in_flight=attempts.in_flight(worker),
                )
                serial.dirty = True
            idle = not attempts.in_flight(worker) and not attempts.waiting(worker)
            if fleet.probe_due(worker, serial.wall_s, idle=idle, fleet_size=len(ids)):
                self._probe(worker, floor)
        unreachable = [w for w in ids if fleet.state_of(w) == UNREACHABLE]
        # While not every voter applies FenceDispatch the fence waits (no refusal every tick):
        # those attempts are observed and, unanswered, Unknown at their deadline as before.
        gated = serial.kind_gated("FenceDispatch") is not None
        held = [w for w in unreachable if any(a for a in attempts.work.values() if _bound(a, w))]
        if held and not gated and not serial.suspended and not self._standing.draining:
            serial.run(self._fence_all(held))
        serial.later(FLEET_TICK_S, lambda: self._tick(generation))

    def _fence_all(self, workers: list[str]) -> Any:
        for worker in workers:
            yield from self._attempts.fence_unreachable(worker)

    def _probe(self, worker: str, floor: int) -> None:
        health = self._attempts.fleet.health_of(worker)
        health.probe_out = True
        health.last_probe_s = self._serial.wall_s
        token = self._serial.token()
        self._probes[token] = worker
        self._serial.emit(
            ObserveRequest(token, PROBE_EXECUTION_ID, retained_through=floor, worker_id=worker)
        )

    def probe_answered(self, event: Any) -> bool:
        """Handle a probe's answer; False when ``event`` answers something else."""
        if not isinstance(event, ObserveAnswered) or event.token not in self._probes:
            return False
        worker = self._probes.pop(event.token)
        fleet = self._attempts.fleet
        fleet.health_of(worker).probe_out = False
        self._attempts.heard(worker, event.result)
        if fleet.state_of(worker) == REACHABLE:
            self._serial.dirty = True  # what waited for a worker may be placed now
        return True


def _bound(work: Any, worker: str) -> bool:
    return work.binding.get("worker_id") == worker
