"""One chaos run: start, inject seeded faults, heal, converge, freeze, check.

Theory of operation. Everything random comes from one ``random.Random(seed)``: which faults, on
what, for how long, the skewed voter and its offset. (Process and network timing is not seeded, so
a seed reproduces the *fault plan*, not every interleaving.) The run has four phases:

1. **start** — 3 voters and the worker, every link through the proxy, the workload as initial
   schedules; wait for an acquired owner.
2. **chaos** — for ``chaos_s`` seconds, every 0.3-1.2 s one action: SIGKILL (restarted after a
   while) or SIGSTOP/SIGCONT of a voter or the worker, a proxy fault on one link or a whole voter
   partition (drop = reset new connections, delay, cut one way = swallow one direction, cut both
   ways), an operator ``create`` or ``cancel`` through the owner. Each fault is lifted after
   0.5-4 s; one voter's clock is skewed for the whole run.
3. **heal and converge** — lift every fault, restart what is down, wait for an owner, disable
   every schedule (no new occurrences), wait until every occurrence is terminal, ``Unknown`` or
   ``Cancelling``, and until the three voters report the same commit and applied index.
4. **freeze and check** — SIGSTOP the voters together, read their checkpoints read-only (retry if
   they are not at one index), stop everything, read the worker store, check the invariants.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.limits import Limits
from tests.chaos.cluster import NAMESPACE, ChaosCluster
from tests.chaos.invariants import (
    SETTLED_NAMES,
    Evidence,
    Violation,
    check,
    claims_in_logs,
    must_wait,
    read_voter,
    read_worker,
    unknown_by_permit,
)
from tests.chaos.proxy import Fault, Proxy
from tests.chaos.workload import CREATED, LONG_SCHEDULE_ID, WORKLOAD
from tests.runner.cluster import ENV

FIRST_PASS_TRIES = 5
ACTIONS = (
    ("voter_kill", 2),
    ("voter_pause", 2),
    ("worker_kill", 1),
    ("worker_pause", 1),
    ("link_drop", 2),
    ("link_delay", 2),
    ("link_cut_one_way", 2),
    ("link_cut_both", 2),
    ("voter_partition", 1),
    ("op_create", 1),
    ("op_cancel", 2),
)


@dataclass(frozen=True)
class RunConfig:
    seed: int
    root: Path
    chaos_s: float = 30.0
    time_scale: float = 20.0
    timeout_seconds: int = 120
    converge_s: float = 60.0


@dataclass
class RunReport:
    seed: int
    chaos_s: float
    skew: tuple[str, float] = ("", 0.0)
    faults: Counter[str] = field(default_factory=Counter)
    occurrences: int = 0
    by_state: Counter[str] = field(default_factory=Counter)
    executions: int = 0
    schedules: int = 0
    applied_index: int = 0
    wall_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)
    # Unknown attempts the worker never submitted (it stopped on an uncertain admission, or the
    # exec request never reached it): pessimistic, as promised, until an operator resolves them.
    unknown_never_ran: int = 0
    # Unknown occurrences split by the checkpoint's evidence: a committed permit for the attempt
    # (it may have run) or none (it never could: the checker counts it as a violation).
    unknown_with_permit: int = 0
    unknown_without_permit: int = 0
    converged: bool = False  # every occurrence settled and one Raft index, within converge_s
    violations: list[Violation] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "chaos_s": self.chaos_s,
            "skew": {"voter": self.skew[0], "offset_s": round(self.skew[1], 1)},
            "faults": dict(sorted(self.faults.items())),
            "occurrences": self.occurrences,
            "by_state": dict(sorted(self.by_state.items())),
            "executions": self.executions,
            "unknown_never_ran": self.unknown_never_ran,
            "unknown_with_permit": self.unknown_with_permit,
            "unknown_without_permit": self.unknown_without_permit,
            "schedules": self.schedules,
            "applied_index": self.applied_index,
            "wall_s": round(self.wall_s, 1),
            "phases_s": self.phases_s,
            "converged": self.converged,
            "violations": [str(v) for v in self.violations],
        }


class ChaosRun:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.proxy = Proxy(cfg.seed)
        ids = ["v1", "v2", "v3"]
        skew = (self.rng.choice(ids), self.rng.choice((-1, 1)) * self.rng.uniform(20, 90))
        cfg.root.mkdir(parents=True, exist_ok=True)
        self.cluster = ChaosCluster(
            cfg.root,
            self.proxy,
            schedules=WORKLOAD,
            time_scale=cfg.time_scale,
            timeout_seconds=cfg.timeout_seconds,
            skew=skew,
        )
        self.report = RunReport(cfg.seed, cfg.chaos_s, skew)
        self.committed_schedules = set(range(1, len(WORKLOAD) + 1))
        # (monotonic deadline, what to undo) — faults are lifted in deadline order.
        self.pending_heals: list[tuple[float, str, str]] = []

    # ------------------------------------------------------------------ phases
    def run(self) -> RunReport:
        started = time.monotonic()
        try:
            self.cluster.start()
            if self.cluster.owner(60.0) is None:
                raise RuntimeError(f"no owner after start\n{self.cluster.dump_logs()}")
            self._phase("start", started)
            self._chaos()
            self._phase("chaos", started)
            self._heal()
            self._converge()
            self._phase("converge", started)
            self._freeze_and_check()
            self._phase("check", started)
        finally:
            self.cluster.stop()
            self.proxy.close()
            self.report.wall_s = time.monotonic() - started
        return self.report

    def _chaos(self) -> None:
        deadline = time.monotonic() + self.cfg.chaos_s
        kinds = [k for k, _ in ACTIONS]
        weights = [w for _, w in ACTIONS]
        # Every kind once first (in a seeded order), so even a short run covers them all; a kind
        # that is not possible now (no owner, nothing running) is retried a few times, later.
        first = self.rng.sample(kinds, len(kinds))
        tries: Counter[str] = Counter()
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(0.3, 1.2))
            self._lift_due()
            if first:
                kind = first.pop(0)
                if self._act(kind):
                    continue
                tries[kind] += 1
                if tries[kind] < FIRST_PASS_TRIES:
                    first.append(kind)
            self._act(self.rng.choices(kinds, weights)[0])

    def _act(self, kind: str) -> bool:
        done = bool(getattr(self, f"_do_{kind}")())
        if done:
            self.report.faults[kind] += 1
        return done

    def _heal(self) -> None:
        self.proxy.heal_all()
        self.pending_heals.clear()
        for voter in self.cluster.voters.values():
            if voter.stopped:
                voter.signal(signal.SIGCONT)
        for node_id, voter in self.cluster.voters.items():
            if not voter.alive:
                self.cluster.start_voter(node_id)
        worker = self.cluster.worker
        if worker.stopped:
            worker.signal(signal.SIGCONT)
        if not worker.alive:
            worker.start()

    def _converge(self) -> None:
        deadline = time.monotonic() + self.cfg.converge_s
        disabled: set[int] = set()
        while time.monotonic() < deadline:
            owner = self.cluster.owner(max(deadline - time.monotonic(), 1.0))
            if owner is None:
                break
            listing = owner.command({"action": "list"})
            if not listing.get("ok", True) or "schedules" not in listing:
                continue
            for schedule in listing["schedules"]:
                sid = schedule["id"]
                if not schedule.get("enabled", True):
                    disabled.add(sid)
                if sid in disabled:
                    continue
                reply = owner.command({"action": "disable", "id": sid})
                if reply.get("ok") or reply.get("status") == 400:
                    disabled.add(sid)
            ids = {s["id"] for s in listing["schedules"]}
            unsettled = _unsettled(listing)
            if ids <= disabled and not unsettled and self._raft_converged():
                self.report.converged = True
                return
            time.sleep(0.3)

    def _raft_status(self, node_id: str) -> dict[str, Any] | None:
        port = self.cluster.cluster_ports[node_id]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/raft/v1/status",
            headers={"Authorization": f"Bearer {ENV['RUNNER_CLUSTER_TOKEN']}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=2.0) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            return None

    def _raft_converged(self) -> bool:
        seen = []
        for _ in range(2):
            statuses = [self._raft_status(n) for n in self.cluster.ids]
            if any(s is None for s in statuses):
                return False
            marks = {(s["commit_index"], s["applied_index"]) for s in statuses if s}
            if len(marks) != 1:
                return False
            seen.append(marks.pop())
            time.sleep(0.3)
        return seen[0] == seen[1]

    def _freeze_and_check(self) -> None:
        limits = Limits()
        voters = []
        for _ in range(10):
            for voter in self.cluster.voters.values():
                voter.signal(signal.SIGSTOP)
            time.sleep(0.1)
            voters = [read_voter(n, self.cfg.root / n, limits) for n in self.cluster.ids]
            if len({v.applied_index for v in voters}) == 1:
                break
            for voter in self.cluster.voters.values():
                voter.signal(signal.SIGCONT)
            time.sleep(1.0)
        # The evidence is read: a graceful drain (up to 10 s a voter) would only cost time.
        for voter in self.cluster.voters.values():
            voter.kill()
        self.cluster.stop()  # the worker: SIGTERM, so its store is closed cleanly
        executions, consumed = read_worker(self.cfg.root / "worker-data")
        events = [e for v in self.cluster.voters.values() for e in v.events()]
        evidence = Evidence(
            voters=voters,
            executions=[e for e in executions if e.key[0] == NAMESPACE],
            consumed=consumed,
            claims=claims_in_logs(events),
            committed_schedules=frozenset(self.committed_schedules),
        )
        self.report.violations = check(evidence)
        first = voters[0]
        self.report.occurrences = len(first.state.occurrences)
        self.report.by_state = Counter(o.state.value for o in first.state.occurrences.values())
        self.report.executions = len(executions)
        ran = {(e.key[2], e.key[3]) for e in executions}
        self.report.unknown_never_ran = sum(
            1
            for o in first.state.occurrences.values()
            if o.state.value == "Unknown" and (o.id, o.attempt) not in ran
        )
        self.report.unknown_with_permit, self.report.unknown_without_permit = unknown_by_permit(
            first.state
        )
        self.report.schedules = len(first.state.schedules)
        self.report.applied_index = first.applied_index

    def _phase(self, name: str, started: float) -> None:
        """Seconds from the run's start to the end of ``name``."""
        self.report.phases_s[name] = round(time.monotonic() - started, 1)

    # ------------------------------------------------------------------ faults
    def _after(self, what: str, target: str) -> None:
        self.pending_heals.append((time.monotonic() + self.rng.uniform(0.5, 4.0), what, target))

    def _lift_due(self) -> None:
        now = time.monotonic()
        due = [h for h in self.pending_heals if h[0] <= now]
        self.pending_heals = [h for h in self.pending_heals if h[0] > now]
        for _, what, target in due:
            if what == "restart_voter" and not self.cluster.voters[target].alive:
                self.cluster.start_voter(target)
            elif what == "cont_voter":
                self.cluster.voters[target].signal(signal.SIGCONT)
            elif what == "restart_worker" and not self.cluster.worker.alive:
                self.cluster.worker.start()
            elif what == "cont_worker":
                self.cluster.worker.signal(signal.SIGCONT)
            elif what == "heal_link":
                self.proxy.set_fault(target, Fault())

    def _impaired_voters(self) -> set[str]:
        return {t for _, what, t in self.pending_heals if what in ("restart_voter", "cont_voter")}

    def _healthy_voter(self) -> str | None:
        # At most one voter process down at a time: the other faults already cost quorum often.
        if self._impaired_voters():
            return None
        return self.rng.choice(self.cluster.ids)

    def _do_voter_kill(self) -> bool:
        node_id = self._healthy_voter()
        if node_id is None:
            return False
        self.cluster.voters[node_id].kill()
        self._after("restart_voter", node_id)
        return True

    def _do_voter_pause(self) -> bool:
        node_id = self._healthy_voter()
        if node_id is None:
            return False
        self.cluster.voters[node_id].signal(signal.SIGSTOP)
        self._after("cont_voter", node_id)
        return True

    def _worker_busy(self) -> bool:
        return any(w in ("restart_worker", "cont_worker") for _, w, _ in self.pending_heals)

    def _do_worker_kill(self) -> bool:
        if self._worker_busy():
            return False
        self.cluster.worker.kill()
        self._after("restart_worker", "worker")
        return True

    def _do_worker_pause(self) -> bool:
        if self._worker_busy():
            return False
        self.cluster.worker.signal(signal.SIGSTOP)
        self._after("cont_worker", "worker")
        return True

    def _link_fault(self, fault: Fault) -> bool:
        name = self.rng.choice(sorted(self.proxy.links))
        if any(t == name for _, _, t in self.pending_heals):
            return False
        self.proxy.set_fault(name, fault)
        self._after("heal_link", name)
        return True

    def _do_link_drop(self) -> bool:
        return self._link_fault(Fault(reset_probability=self.rng.uniform(0.3, 1.0)))

    def _do_link_delay(self) -> bool:
        return self._link_fault(Fault(delay_ms=self.rng.randint(20, 600)))

    def _do_link_cut_one_way(self) -> bool:
        up = self.rng.random() < 0.5
        return self._link_fault(Fault(block_up=up, block_down=not up))

    def _do_link_cut_both(self) -> bool:
        return self._link_fault(Fault(cut=True))

    def _do_voter_partition(self) -> bool:
        node_id = self.rng.choice(self.cluster.ids)
        names = [
            n
            for n in self.proxy.links
            if n.startswith(f"{node_id}->") or n.endswith(f"->{node_id}")
        ]
        if any(t in names for _, _, t in self.pending_heals):
            return False
        for name in names:
            self.proxy.set_fault(name, Fault(cut=True))
        until = time.monotonic() + self.rng.uniform(0.5, 4.0)
        self.pending_heals.extend((until, "heal_link", name) for name in names)
        return True

    def _owner_now(self) -> Any:
        return self.cluster.owner(timeout_s=2.0)

    def _do_op_create(self) -> bool:
        owner = self._owner_now()
        if owner is None:
            return False
        reply = owner.command({"action": "create", "definition": CREATED})
        if reply.get("ok"):
            self.committed_schedules.add(int(reply["id"]))
        return True

    def _do_op_cancel(self) -> bool:
        owner = self._owner_now()
        if owner is None:
            return False
        listing = owner.command({"action": "list"})
        running = [
            o["id"]
            for o in listing.get("occurrences", [])
            if o.get("schedule_id") == LONG_SCHEDULE_ID and o["state"] == "Running"
        ]
        if not running:
            return False
        with contextlib.suppress(KeyError):
            owner.command({"action": "cancel", "occurrence_id": self.rng.choice(running)})
        return True


def _unsettled(listing: dict[str, Any]) -> list[dict[str, Any]]:
    """Occurrences of the owner's ``list`` that may still move without an operator."""
    queued = {
        s["id"]: s["definition"]["policy"]["overlap"] == "Queue" for s in listing["schedules"]
    }
    records = [(o["schedule_id"], o["state"]) for o in listing["occurrences"]]
    running_max = Limits().running
    return [
        o
        for o in listing["occurrences"]
        if o["state"] not in SETTLED_NAMES
        and not must_wait(
            (o["schedule_id"], o["state"]),
            records,
            queued.get(o["schedule_id"], False),
            running_max,
        )
    ]


def run_chaos(cfg: RunConfig) -> RunReport:
    return ChaosRun(cfg).run()
