"""One seed, one whole cluster: the deterministic simulator (after TigerBeetle's VOPR).

Theory of operation. Real ``RaftNode`` cores run against a fake network (``network.py``), a fake
disk (``MemoryLogStorage``: it holds what the driver persisted, nothing more) and a fake clock
(a discrete event queue in milliseconds). One ``random.Random(seed)`` makes every decision — the
fault intensities, latencies, drops, partitions, crashes, clock jumps, client proposals and each
node's own election randomness — so the seed alone reproduces a run exactly.

The sim's driver follows the production rules: after every input it drains ``ready()``; it
persists the batch, then sends its messages, then applies committed entries, then calls
``advance`` — except that a leader's own appends and heartbeats leave before the persist when the
production driver's rule allows it (``appliance.raft.send_order``). A crash may strike between
``ready()`` and the persist: the batch is lost, as an unsynced write would be, together with its
messages unless they already left early. A crash may also strike after the persist, part way
through sending the batch's messages.

With ``leader_gone_hints`` the sim also plays the driver's ``PeerProbe``: at each tick a follower
whose leader's process is down is told so (``RaftNode.leader_gone``), and during the safety
phase any follower is sometimes told so wrongly.

A run has two phases. SAFETY: every enabled fault, while the checkers (``checkers.py``) watch
election safety, log matching, leader completeness, state-machine safety and read
linearizability. The ``disk`` fault takes one voter down and, a little later, wipes another
voter's whole durable state (and, half the time, crashes the leader too); the wiped voter
restarts 50 ms to 6 s later from a RECOVERING store — what ``appliance admin store recover``
makes — and the core's own quiet start, not a slow operator, keeps its lost incarnation's
messages and cut-off leaders away (docs/voter-recovery.md).

COMPACTION (on unless ``compaction=False``): each seed draws tiny thresholds — compact once 1, 3
or 8 checkpointed entries lie beyond a trailing window of 0, 2 or 10 entries — and snapshot
chunks of 7 or 16 bytes or one whole chunk. Every node keeps a simulated checkpoint (the state
hash at an applied index, saved after some Readies, so it lags the applied state the way the
runner's checkpoint writer does) and restarts from it, so a follower that was down, cut off or
wiped across compactions catches up by snapshot. A crash may strike before a Ready's snapshot is
installed (the old log and checkpoint stay); the checkers verify that every installed snapshot
and every restart carries a state some node had at that index.

MEMBERSHIP (``membership=True``): fault events also change the configuration through the
leader, one server at a time — a new node (n4, n5, ...) joins as a learner and catches up
(usually by snapshot), a learner is promoted (refused until caught up), a voter (a third of the
time the leader itself) or a learner is removed — during partitions and crashes like everything
else; after a third of the accepted changes the leader crashes within 0-20 ms, between the
append of the CONFIG entry and its commit. Removed nodes keep running: the checkers verify that
no non-voter ever campaigns or leads, that every applied CONFIG entry is one single-server change
from the one applied before it, and the liveness phase heals everyone and waits for the members
of the configuration in force at the marker.

LIVENESS: loss and duplication stop, clocks behave, and either everything heals or only a
random majority core does (the rest stay down or cut off; never while a wiped voter is still
recovering); crashed core nodes restart.
Within ``liveness_ms_max`` a leader must commit a marker proposal and every core node must apply
it.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

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
from appliance.raft.membership import Membership
from appliance.raft.send_order import may_send_before_persist
from appliance.sim.checkers import (
    SafetyCheckers,
    Violation,
    check_log_matching,
    next_state_hash,
)
from appliance.sim.faults import FaultSettings
from appliance.sim.network import FakeNetwork

TICK_MS = 100
FAULT_EVERY_MS_MAX = 2000
CLIENT_EVERY_MS_MAX = 150
LOG_MATCHING_EVERY_MS = 1000
WRONG_HINT_RATE = 0.005  # per follower tick, with leader_gone_hints, safety phase only


@dataclass(frozen=True)
class SimOptions:
    nodes: int = 3
    fault_classes: frozenset[str] = frozenset()
    safety_ms: int = 20_000
    liveness_ms_max: int = 8_000
    election_ticks_min: int = 5
    election_ticks_max: int = 10
    batch_entries_max: int = 32
    # A wiped voter stays down this long at least (plus up to 6 s more).
    disk_recovery_ms_min: int = 50
    # Model the production driver's PeerProbe: a follower whose leader's process is down gets
    # RaftNode.leader_gone at its next tick, and (safety phase only) any follower sometimes
    # gets a wrong one. Off by default so the documented seeds keep their exact runs.
    leader_gone_hints: bool = False
    # Snapshots and log compaction at tiny thresholds (module docstring).
    compaction: bool = True
    # Membership changes (module docstring). Off by default: the documented seeds keep their runs.
    membership: bool = False


@dataclass
class SimResult:
    seed: int
    ok: bool
    violation: str = ""
    events: int = 0
    elections: int = 0
    applied_entries: int = 0
    crashes: int = 0
    disk_losses: int = 0
    recoveries_completed: int = 0  # wiped voters that caught up and became full voters again
    compactions: int = 0
    snapshots_installed: int = 0
    messages_sent: int = 0
    messages_dropped: int = 0
    reads_released: int = 0
    leader_gone_hints: int = 0  # hints given (true ones and, in the safety phase, wrong ones)
    liveness_core: int = 0  # how many nodes the liveness phase healed (all, or a majority)
    config_changes: int = 0  # CONFIG entries a leader accepted
    config_crashes: int = 0  # leader crashes scheduled between a CONFIG append and its commit
    leaders_removed: int = 0  # changes that removed the proposing leader
    faults: FaultSettings = field(default_factory=FaultSettings)


class _Replica:
    def __init__(self, node_id: str) -> None:
        self.id = node_id
        self.storage = MemoryLogStorage()
        self.state = b""  # the simulated state machine: a hash chain (checkers.next_state_hash)
        self.node: RaftNode | None = None
        self.incarnation = 0
        self.down_until_ms = 0  # a wiped voter does not restart before this


class Simulation:
    def __init__(self, seed: int, options: SimOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.faults = FaultSettings.draw(options.fault_classes, self.rng)
        self.network = FakeNetwork(self.faults, self.rng)
        # Tiny batches split a new leader's catch-up from its barrier: that is what exposes a
        # commit rule that counts replicas of an older term's entry (thesis figure 3.7).
        self.batch_entries_max = self.rng.choice((1, 3, options.batch_entries_max))
        # One batch in flight makes a follower's catch-up a slow sequence of round trips, which
        # widens every window between "older entries acknowledged" and "barrier acknowledged".
        self.inflight_batches_max = self.rng.choice((1, 2, 4))
        self.snapshot_entries = self.trailing_entries = self.checkpoint_rate = 0.0
        self.snapshot_chunk_bytes = 1 << 20
        if options.compaction:
            self.snapshot_entries = self.rng.choice((1, 3, 8))
            self.trailing_entries = self.rng.choice((0, 2, 10))
            self.checkpoint_rate = self.rng.choice((0.2, 1.0))
            self.snapshot_chunk_bytes = self.rng.choice((7, 16, 1 << 20))
        self.ids = [f"n{i + 1}" for i in range(options.nodes)]
        self.genesis = tuple(self.ids)
        self.replicas = {node_id: _Replica(node_id) for node_id in self.ids}
        self.checkers = SafetyCheckers()
        self.now_ms = 0
        self._queue: list[tuple[int, int, str, object]] = []
        self._seq = 0
        self._liveness = False
        self._reads: dict[int, tuple[str, int]] = {}  # request_id -> (node, required index)
        self._next_read_id = 0
        self._next_payload = 0
        self._marker: bytes | None = None
        self._marker_index: int | None = None
        self._core: list[str] = list(self.ids)
        self.result = SimResult(seed, ok=True, faults=self.faults)

    # -- event queue ---------------------------------------------------------------------------

    def _at(self, delay_ms: int, kind: str, data: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now_ms + delay_ms, self._seq, kind, data))

    def run(self) -> SimResult:
        try:
            for node_id in self.ids:
                self._start(node_id)
            self._at(self.rng.randint(1, FAULT_EVERY_MS_MAX), "fault", None)
            self._at(self.rng.randint(1, CLIENT_EVERY_MS_MAX), "client", None)
            self._at(LOG_MATCHING_EVERY_MS, "log_matching", None)
            self._run_until(self.options.safety_ms)
            self._check_log_matching()
            self._heal()
            # The bound runs from the moment the last healed voter is back: a wiped voter may
            # still be in its (operator's) recovery time.
            back_ms = max([self.now_ms] + [self.replicas[i].down_until_ms for i in self._core])
            deadline_ms = back_ms + self.options.liveness_ms_max
            self._run_until(deadline_ms, stop_when_converged=True)
            self._check_log_matching()
            if not self._converged():
                raise Violation(
                    "liveness",
                    f"no convergence within {self.options.liveness_ms_max} ms after healing: "
                    + self._describe(),
                )
        except Violation as violation:
            self.result.ok = False
            self.result.violation = str(violation)
        except Exception as exc:  # an invariant raised inside a core is a finding too
            self.result.ok = False
            self.result.violation = f"exception at {self.now_ms} ms: {type(exc).__name__}: {exc}"
        self.result.messages_sent = self.network.sent
        self.result.messages_dropped = self.network.dropped
        self.result.applied_entries = len(self.checkers.applied)
        self.result.elections = len(self.checkers.leader_of_term)
        return self.result

    def _run_until(self, end_ms: int, *, stop_when_converged: bool = False) -> None:
        while self._queue and self._queue[0][0] <= end_ms:
            at_ms, _, kind, data = heapq.heappop(self._queue)
            self.now_ms = at_ms
            self.result.events += 1
            getattr(self, f"_on_{kind}")(data)
            if stop_when_converged and self._converged():
                return
        self.now_ms = end_ms

    # -- node lifecycle ------------------------------------------------------------------------

    def _start(self, node_id: str) -> None:
        replica = self.replicas[node_id]
        replica.incarnation += 1
        config = RaftConfig(
            node_id=node_id,
            voters=self.genesis,
            # A node added later starts as a learner; its log or snapshot says what it is now.
            learners=() if node_id in self.genesis else (node_id,),
            election_ticks_min=self.options.election_ticks_min,
            election_ticks_max=self.options.election_ticks_max,
            batch_entries_max=self.batch_entries_max,
            inflight_batches_max=self.inflight_batches_max,
            snapshot_chunk_bytes=int(self.snapshot_chunk_bytes),
        )
        node_rng = random.Random(self.rng.getrandbits(64))
        # The state machine restarts from the checkpoint (without compaction there is none, so
        # from index 0) and re-applies the log after it; the checker compares what it applies
        # again with what was applied before.
        applied, data = replica.storage.checkpoint()
        replica.state = _state_from_checkpoint(data)
        replica.node = RaftNode(config, replica.storage, node_rng, applied_index=applied)
        self.checkers.node_restarted(node_id, applied, replica.state)
        self._at(self.rng.randint(1, TICK_MS), "tick", (node_id, replica.incarnation))

    def _crash(self, replica: _Replica) -> None:
        replica.node = None
        replica.incarnation += 1
        self.result.crashes += 1
        delay_ms = self.rng.randint(50, 3 * FAULT_EVERY_MS_MAX)
        self._at(max(delay_ms, replica.down_until_ms - self.now_ms), "restart", replica.id)
        self._reads = {rid: r for rid, r in self._reads.items() if r[0] != replica.id}

    def _process(self, replica: _Replica) -> None:
        """The production driver's loop: persist, send (or send, persist), apply, advance."""
        node = replica.node
        while node is not None and node.has_ready():
            ready = node.ready()
            send_first = may_send_before_persist(ready)
            if send_first:
                for message in ready.messages:
                    self._send(message)
            if not self._liveness and self.rng.random() < self.faults.crash_in_ready_rate:
                self._crash(replica)  # before the persist: the batch is lost (sent or not)
                return
            if ready.snapshot is not None:
                if not self._liveness and self.rng.random() < 0.2:
                    self._crash(replica)  # mid-install: the old log and checkpoint stay
                    return
                replica.storage.install_snapshot(ready.snapshot)
                replica.state = _state_from_checkpoint(ready.snapshot.data)
                self.checkers.on_snapshot_installed(replica.id, ready.snapshot.index, replica.state)
                self.result.snapshots_installed += 1
            if ready.must_persist:
                replica.storage.persist(
                    term=ready.hard_state.term,
                    voted_for=ready.hard_state.voted_for,
                    truncate_from=ready.truncate_from,
                    entries=ready.stored_entries(),
                )
            if (
                not send_first
                and not self._liveness
                and (self.rng.random() < self.faults.crash_in_ready_rate)
            ):
                # After the persist, part way through sending: the batch is durable, but only
                # some peers (maybe none) hear of it. A leader dying here leaves entries only
                # it holds, the precondition of the paper's figure 8.
                sent = self.rng.randint(0, len(ready.messages))
                for message in ready.messages[:sent]:
                    self._send(message)
                self._crash(replica)
                return
            if not send_first:
                for message in ready.messages:
                    self._send(message)
            for entry in ready.committed:
                self.checkers.on_apply(replica.id, entry)
                replica.state = next_state_hash(replica.state, entry)
            for read in ready.reads:
                owner = self._reads.pop(read.request_id, None)
                if owner is not None:
                    self.result.reads_released += 1
                    self.checkers.on_read_released(replica.id, read.index, owner[1])
            for request_id in ready.reads_failed:
                self._reads.pop(request_id, None)
            if ready.recovered:
                replica.storage.clear_recovering()
                self.result.recoveries_completed += 1
            node.advance(ready)
            self.checkers.observe(node)
            if self.options.compaction:
                self._checkpoint_and_compact(replica, node)

    def _checkpoint_and_compact(self, replica: _Replica, node: RaftNode) -> None:
        """What the runner's checkpoint writer and the driver's compaction policy do."""
        storage = replica.storage
        behind = node.applied_index > storage.checkpoint()[0]
        if behind and self.rng.random() < self.checkpoint_rate:
            storage.save_checkpoint(
                node.applied_index, _checkpoint_data(node.applied_index, replica.state)
            )
        target = storage.snapshot_index_available() - int(self.trailing_entries)
        if target - node.log.snapshot_index >= self.snapshot_entries:
            term = node.compact(target)
            storage.compact(target, term, node.membership_at(target).members())
            self.result.compactions += 1

    def _send(self, message: Message) -> None:
        for delay_ms in self.network.delivery_delays_ms(message.sender, message.to):
            self._at(delay_ms, "deliver", message)

    # -- events --------------------------------------------------------------------------------

    def _on_tick(self, data: object) -> None:
        node_id, incarnation = data  # type: ignore[misc]
        replica = self.replicas[node_id]
        if replica.node is None or replica.incarnation != incarnation:
            return
        ticks, next_ms = 1, TICK_MS
        if self.faults.clock_faults and not self._liveness:
            next_ms = TICK_MS + self.rng.randint(-TICK_MS // 5, TICK_MS // 5)  # jitter
            roll = self.rng.random()
            if roll < 0.01:
                ticks = self.rng.randint(2, 2 * self.options.election_ticks_max)  # jump ahead
            elif roll < 0.02:
                next_ms = self.rng.randint(2, 2 * self.options.election_ticks_max) * TICK_MS
        if self.options.leader_gone_hints:
            self._hint_leader_gone(replica)
            if replica.node is None:
                return
        for _ in range(ticks):
            replica.node.tick()
            self._process(replica)
            if replica.node is None:
                return
        self._at(next_ms, "tick", data)

    def _hint_leader_gone(self, replica: _Replica) -> None:
        """What the driver's probe would say at this tick: the leader's process is gone."""
        node = replica.node
        leader = node.leader_id if node is not None else None
        if node is None or node.role is not Role.FOLLOWER or leader is None:
            return
        gone = self.replicas[leader].node is None
        if not gone and not self._liveness:
            gone = self.rng.random() < WRONG_HINT_RATE
        if gone:
            self.result.leader_gone_hints += 1
            node.leader_gone(leader)
            self._process(replica)

    def _on_deliver(self, message: object) -> None:
        replica = self.replicas[message.to]  # type: ignore[attr-defined]
        if replica.node is None:
            return
        replica.node.step(message)  # type: ignore[arg-type]
        self._process(replica)

    def _on_restart(self, node_id: object) -> None:
        replica = self.replicas[node_id]  # type: ignore[index]
        if replica.node is None and self.now_ms >= replica.down_until_ms:
            self._start(node_id)  # type: ignore[arg-type]

    def _on_log_matching(self, _: object) -> None:
        self._check_log_matching()
        self._at(LOG_MATCHING_EVERY_MS, "log_matching", None)

    def _on_fault(self, _: object) -> None:
        if self._liveness:
            return
        self._at(self.rng.randint(1, FAULT_EVERY_MS_MAX), "fault", None)
        roll = self.rng.random()
        if self.faults.partitions and roll < 0.5:
            self._repartition()
        elif self.rng.random() < self.faults.crash_rate:
            running = [r for r in self.replicas.values() if r.node is not None]
            leaders = [r for r in running if r.node is not None and r.node.role is Role.LEADER]
            if leaders and self.rng.random() < 0.5:
                self._crash(self.rng.choice(leaders))  # leaders' crashes make the hard cases
            elif running:
                self._crash(self.rng.choice(running))
        elif (
            self.faults.disk_loss_rate
            and self.rng.random() < self.faults.disk_loss_rate
            and not self.options.membership  # see _change_membership
        ):
            self._begin_disk_loss()
        if self.options.membership and self.rng.random() < 0.4:
            self._change_membership()

    def _change_membership(self) -> None:
        """One single-server change through a leader (module docstring).

        Never in a run that also wipes stores: a wiped voter is lost until a leader catches it
        up, so an uncommitted change that needs it in its new quorum (say {n1, n2, n3} minus n1,
        with n2 wiped) leaves a configuration that lost half its voters — no protocol elects a
        leader there. Membership runs therefore draw no disk losses."""
        leaders = [
            r.node
            for r in self.replicas.values()
            if r.node is not None and r.node.role is Role.LEADER
        ]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        members = node.membership
        roll = self.rng.random()
        try:
            if members.learners and roll < 0.7:
                node.promote(self.rng.choice(members.learners))
            elif len(members.everyone()) < 6 and roll < 0.75:
                new_id = f"n{len(self.ids) + 1}"
                node.add_learner(new_id)
                self.ids.append(new_id)
                self.replicas[new_id] = _Replica(new_id)
                self._start(new_id)
            elif len(members.voters) > 3 or (len(members.voters) == 3 and roll < 0.9):
                target = node.id if self.rng.random() < 1 / 3 else self.rng.choice(members.voters)
                node.remove(target)
                self.result.leaders_removed += target == node.id
            elif members.learners:
                node.remove(self.rng.choice(members.learners))
            else:
                return
        except (NotLeader, ProposalRefused):
            return
        self.result.config_changes += 1
        replica = self.replicas[node.id]
        if self.rng.random() < 1 / 3:
            self.result.config_crashes += 1
            self._at(self.rng.randint(0, 20), "crash", (node.id, replica.incarnation))
        self._process(replica)

    def _on_crash(self, data: object) -> None:
        node_id, incarnation = data  # type: ignore[misc]
        replica = self.replicas[node_id]
        if not self._liveness and replica.node is not None and replica.incarnation == incarnation:
            self._crash(replica)

    def _begin_disk_loss(self) -> None:
        """Take one voter down now; wipe another one's store a little later, so the entries
        committed in between live on the leader and the wiped voter only."""
        if len(self.ids) < 3 or any(self._wiping(r) for r in self.replicas.values()):
            # One lost store at a time: a majority of voters must still hold the committed log
            # (two lost stores out of three is data loss no protocol can undo).
            return
        down, wiped = self.rng.sample(self.ids, 2)
        self.replicas[wiped].down_until_ms = self.now_ms + FAULT_EVERY_MS_MAX  # wipe pending
        if self.replicas[down].node is not None:
            self._crash(self.replicas[down])
        self._at(self.rng.randint(100, FAULT_EVERY_MS_MAX), "disk_loss", wiped)

    def _wiping(self, replica: _Replica) -> bool:
        """A wipe is pending, or the wiped voter has not caught up yet."""
        return replica.down_until_ms > self.now_ms or replica.storage.recovering()

    def _on_disk_loss(self, node_id: object) -> None:
        if self._liveness:
            return
        replica = self.replicas[node_id]  # type: ignore[index]
        leaders = [
            r
            for r in self.replicas.values()
            if r.node is not None and r.node.role is Role.LEADER and r is not replica
        ]
        replica.down_until_ms = self.now_ms + self.rng.randint(
            self.options.disk_recovery_ms_min,
            self.options.disk_recovery_ms_min + 3 * FAULT_EVERY_MS_MAX,
        )
        if replica.node is not None:
            self._crash(replica)
        else:  # any restart already scheduled is too early now
            self._at(replica.down_until_ms - self.now_ms, "restart", replica.id)
        # The disk is gone: what ``admin store recover`` makes is an empty, recovering store.
        replica.storage = MemoryLogStorage(recovering=True)
        self.result.disk_losses += 1
        if leaders and self.rng.random() < 0.5:
            self._crash(leaders[0])  # the one voter holding what only it and the wiped one had

    def _repartition(self) -> None:
        self.network.heal()
        if len(self.ids) < 2:
            return  # nothing to partition
        shape = self.rng.choice(("heal", "isolate", "one_way", "split"))
        ids = list(self.ids)
        if shape == "isolate":
            node = self.rng.choice(ids)
            self.network.isolate(node, [i for i in ids if i != node])
        elif shape == "one_way":
            node = self.rng.choice(ids)
            self.network.isolate(node, [i for i in ids if i != node], one_way=True)
        elif shape == "split":
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.network.split(ids[:cut], ids[cut:])

    def _on_client(self, _: object) -> None:
        self._at(self.rng.randint(1, CLIENT_EVERY_MS_MAX), "client", None)
        leaders = [
            r for r in self.replicas.values() if r.node is not None and r.node.role is Role.LEADER
        ]
        if not leaders:
            return
        replica = self.rng.choice(leaders)
        node = replica.node
        if node is None:
            return
        try:
            if self._liveness:
                if self._marker is None:
                    self._marker = f"marker-{self.seed}".encode()
                if not self._marker_in_log(node):
                    node.propose(self._marker)
            elif self.rng.random() < 0.3:
                self._next_read_id += 1
                self._reads[self._next_read_id] = (replica.id, self.checkers.max_commit_seen)
                node.read_index(self._next_read_id)
            else:
                self._next_payload += 1
                node.propose(f"cmd-{self._next_payload}".encode())
        except (NotLeader, ProposalRefused, ReadRefused):
            pass
        self._process(replica)

    # -- liveness ------------------------------------------------------------------------------

    def _heal(self) -> None:
        """Heal everything, or (half the seeds) only a random majority core: the others stay
        down or cut off, and the core alone must converge. A wiped voter restarts once its
        recovery time is over."""
        self._liveness = True
        self.network.heal()
        # A healed network delivers every message within the usual latency. (Keeping the long
        # reordering delays here made seed 501971 miss the bound: catching up 140 entries one
        # per round trip, with a fifth of the messages delayed up to 400 ms, takes ~14 s.)
        self.network.faults = FaultSettings()
        quorum = len(self.ids) // 2 + 1
        wiping = any(self._wiping(r) for r in self.replicas.values())
        # A voter still recovering a lost store cannot vote: a majority core holding it could
        # never elect a leader, so such a run heals everyone.
        if (
            len(self.ids) >= 3
            and self.rng.random() < 0.5
            and not wiping
            and not self.options.membership  # the voters changed: heal every node instead
        ):
            size = self.rng.randint(quorum, len(self.ids) - 1)
            self._core = sorted(self.rng.sample(self.ids, size))
        else:
            self._core = list(self.ids)
        self.result.liveness_core = len(self._core)
        for node_id in self.ids:
            if node_id not in self._core:
                self.network.isolate(node_id, [i for i in self.ids if i != node_id])
        for node_id in self._core:
            replica = self.replicas[node_id]
            if replica.node is None:
                if self.now_ms >= replica.down_until_ms:
                    self._start(node_id)
                else:
                    self._at(replica.down_until_ms - self.now_ms, "restart", node_id)

    def _marker_in_log(self, node: RaftNode) -> bool:
        if self._marker_applied_index() is not None:
            return True  # applied somewhere, maybe compacted into snapshots since
        first = node.log.first_index()
        entries = node.log.entries(
            first, node.last_index + 1, entries_max=1 << 20, bytes_max=1 << 30
        )
        return any(e.data == self._marker for e in entries)

    def _marker_applied_index(self) -> int | None:
        if self._marker_index is None and self._marker is not None:
            self._marker_index = next(
                (
                    i
                    for i, (_, payload) in self.checkers.applied.items()
                    if payload[1:] == self._marker
                ),
                None,
            )
        return self._marker_index

    def _converged(self) -> bool:
        if not self._liveness or self._marker is None:
            return False
        marker_index = self._marker_applied_index()
        if marker_index is None:
            return False
        core = [self.replicas[i] for i in self._core if i in self._members_at(marker_index)]
        # A wiped voter must also have become a full voter again (a snapshot alone can bring
        # it to the marker before any append told it the leader's commit index).
        return all(
            r.node is not None and r.node.applied_index >= marker_index and not r.node.recovering
            for r in core
        )

    def _members_at(self, index: int) -> tuple[str, ...]:
        """Voters and learners of the configuration in force at ``index`` (applied ones)."""
        return self.checkers.membership_at(index, Membership(self.genesis)).everyone()

    def _check_log_matching(self) -> None:
        check_log_matching([r.node for r in self.replicas.values() if r.node is not None])

    def _describe(self) -> str:
        parts = []
        for replica in self.replicas.values():
            node = replica.node
            if node is None:
                parts.append(f"{replica.id}=down")
            else:
                parts.append(
                    f"{node.id}={node.role.value}/t{node.term}/c{node.commit_index}"
                    f"/a{node.applied_index}/l{node.last_index}"
                )
        return " ".join(parts)


def _checkpoint_data(index: int, state: bytes) -> bytes:
    # Padded so that a snapshot takes several of the tiny chunks.
    return index.to_bytes(8, "big") + state + state[::-1]


def _state_from_checkpoint(data: bytes) -> bytes:
    return data[8:40] if data else b""


def run_seed(seed: int, options: SimOptions) -> SimResult:
    return Simulation(seed, options).run()
