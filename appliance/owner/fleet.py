"""The owner's knowledge of each worker of the fleet: its pacing and whether it answers.

Theory of operation (issue 33, "Failover without a second run")
----------------------------------------------------------------
Pacing (appliance/owner/pacing.py) and observation are per worker: each worker states its own
capacity, so each has its own ``Pacing`` (probe, paced or off), learnt from its own answers.
Reachability is learnt the same way, from every call the owner makes to the worker (exec,
observation, cancel, and the probes below): any protocol-1 answer — a refusal and a ``404``
included — proves it answers; a failed connection, a timeout, a reset or an answer that is not
protocol 1 is a *failure*.

"Stops answering" is a threshold, not one lost reply: a worker is **unreachable** once at least
``UNREACHABLE_FAILURES`` calls failed in a row *and* ``UNREACHABLE_AFTER_S`` real seconds passed
since the first of them with no answer in between. One answer makes it reachable again. A worker
whose last call failed but that is not unreachable yet is *failing*: placement still considers it,
after every worker that answers (appliance/core/placement.py), so new work avoids it while the
threshold runs.

A failing or unreachable worker is probed every ``PROBE_EVERY_S``, and in a fleet of more than
one an idle worker every ``IDLE_PROBE_S`` (so a worker that died while idle is found before work is
placed on it, and every worker hears the committed retention floor W, which a probe carries like
any observation). A probe is an observation of ``PROBE_EXECUTION_ID``, an execution no claim can
have (occurrence 0): the worker answers ``410 retired`` (or 404) and nothing changes there.

When a worker turns unreachable the owner fences its attempts that hold **no committed permit**
with ``FenceDispatch`` — the apply refuses it if a permit exists, checked at apply, not from this
view (the terminal fence of seeds/000) — and claims each occurrence again as the next attempt, on
another worker, without spending a retry. Attempts with a committed permit stay observed and become
``Unknown`` at their deadline, never re-run; an Unknown attempt is still asked about, so the real
outcome wins when the worker answers again. A worker that comes back refuses the fenced attempts
(its permit request is answered ``fenced``) and prunes them below W as usual.

Everything here is owner memory (never replicated): a new owner starts with every worker unknown
and learns again. Pure: instants come from the owner's events. The decisions that use it — the
placement, the timer, the probes — are ``FleetDecisions`` (appliance/owner/fleet_decisions.py);
the fence is ``Attempts.fence_unreachable`` (appliance/owner/attempts.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from appliance.owner.pacing import Pacing

UNREACHABLE_FAILURES: Final = 2  # failed calls in a row, at least …
UNREACHABLE_AFTER_S: Final = 3.0  # … and this many real seconds since the first, no answer
PROBE_EVERY_S: Final = 1.0  # real seconds between probes of a failing or unreachable worker
IDLE_PROBE_S: Final = 5.0  # real seconds between probes of an idle worker (fleets of 2+)
FLEET_TICK_S: Final = 0.5  # real seconds between the owner's looks at the fleet's health
# An observation no claim can match (occurrence ids start at 1): the worker answers 404.
PROBE_EXECUTION_ID: Final = "s1-o0-a1"

REACHABLE: Final = "reachable"
FAILING: Final = "failing"
UNREACHABLE: Final = "unreachable"


@dataclass
class WorkerHealth:
    """Whether one worker answers, from the owner's calls to it."""

    last_answer_s: float | None = None  # wall instant of its last answer
    failing_since_s: float | None = None  # wall instant of the first failure since then
    failures: int = 0  # failed calls in a row
    unreachable: bool = False
    probe_out: bool = False  # a probe is unanswered
    last_probe_s: float | None = None

    @property
    def state(self) -> str:
        if self.unreachable:
            return UNREACHABLE
        return FAILING if self.failures else REACHABLE


@dataclass
class Fleet:
    """Per-worker pacing and health, by ``worker_id`` (created on first use). ``log`` is the
    owner's decision log, which each worker's ``Pacing`` writes to."""

    time_scale: float = 1.0
    log: Callable[..., None] = lambda event, **fields: None
    paces: dict[str, Pacing] = field(default_factory=dict)
    health: dict[str, WorkerHealth] = field(default_factory=dict)

    def pace(self, worker_id: str) -> Pacing:
        found = self.paces.get(worker_id)
        if found is None:
            found = self.paces[worker_id] = Pacing(self.log, worker_id)
        return found

    def health_of(self, worker_id: str) -> WorkerHealth:
        found = self.health.get(worker_id)
        if found is None:
            found = self.health[worker_id] = WorkerHealth()
        return found

    def state_of(self, worker_id: str) -> str:
        found = self.health.get(worker_id)
        return REACHABLE if found is None else found.state

    def clear(self) -> None:
        """Ownership lost: the next owner learns again."""
        self.paces.clear()
        self.health.clear()

    def keep_only(self, worker_ids: set[str]) -> None:
        """Forget the workers that left the fleet."""
        for table in (self.paces, self.health):
            for worker_id in [w for w in table if w not in worker_ids]:
                del table[worker_id]

    # ---- reachability ----------------------------------------------------------------------

    def answered(self, worker_id: str, wall_s: float) -> bool:
        """The worker answered a call; True when that makes an unreachable worker reachable."""
        health = self.health_of(worker_id)
        back = health.unreachable
        health.last_answer_s = wall_s
        health.failing_since_s = None
        health.failures = 0
        health.unreachable = False
        return back

    def failed(self, worker_id: str, wall_s: float) -> None:
        health = self.health_of(worker_id)
        if health.failures == 0:
            health.failing_since_s = wall_s
        health.failures += 1

    def turns_unreachable(self, worker_id: str, wall_s: float) -> bool:
        """Apply the threshold; True exactly when the worker becomes unreachable now."""
        health = self.health_of(worker_id)
        if health.unreachable or health.failures < UNREACHABLE_FAILURES:
            return False
        since = health.failing_since_s if health.failing_since_s is not None else wall_s
        if (wall_s - since) / self.time_scale < UNREACHABLE_AFTER_S:
            return False
        health.unreachable = True
        return True

    def probe_due(self, worker_id: str, wall_s: float, *, idle: bool, fleet_size: int) -> bool:
        """Whether to probe the worker now (see the module doc)."""
        health = self.health_of(worker_id)
        if health.probe_out:
            return False
        if health.failures or health.unreachable:
            every_s = PROBE_EVERY_S
        elif idle and fleet_size > 1:
            every_s = IDLE_PROBE_S
        else:
            return False
        last = health.last_probe_s
        return last is None or (wall_s - last) / self.time_scale >= every_s

    def view(self, worker_id: str, wall_s: float) -> dict[str, object]:
        """What status shows about the worker's health and pace."""
        health = self.health.get(worker_id) or WorkerHealth()
        silent_s = None
        if health.failing_since_s is not None:
            silent_s = round((wall_s - health.failing_since_s) / self.time_scale, 3)
        return {
            "reachability": health.state,
            "failed_calls": health.failures,
            "failing_for_s": silent_s,
        }
