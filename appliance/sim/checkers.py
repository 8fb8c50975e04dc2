"""Safety checkers that watch the simulated cluster from outside the code under test.

They see only what an observer could: each node's public role, term, commit index and log, and
the stream of entries each node applies. They keep their own memory, so a fact survives the
crash of the node that revealed it (an index applied before a crash must be applied identically
after the restart). The state machine is a hash chain over the applied entries: each node's
state after index i must equal every other node's state after i, whether it got there by
applying entries, by restarting from its checkpoint or by installing a leader's snapshot.
Each violation raises ``Violation`` naming the rule (Raft thesis fig. 3.2).
"""

from __future__ import annotations

import hashlib

from appliance.raft import Entry, EntryKind, RaftNode, Role
from appliance.raft.membership import Membership


def next_state_hash(previous: bytes, entry: Entry) -> bytes:
    """The simulated state machine: a hash chain over every applied entry. A snapshot carries
    the hash at its index, so a snapshot with the wrong content cannot go unnoticed."""
    head = b"%d/%d/" % (entry.index, entry.term)
    return hashlib.sha256(previous + head + entry.payload).digest()


class Violation(Exception):
    """A safety or liveness property failed; the message names the rule and the evidence."""

    def __init__(self, rule: str, detail: str):
        self.rule = rule
        super().__init__(f"{rule}: {detail}")


class SafetyCheckers:
    def __init__(self) -> None:
        self.leader_of_term: dict[int, str] = {}
        self.applied: dict[int, tuple[int, bytes]] = {}  # index -> (term, payload), cluster-wide
        self.next_apply: dict[str, int] = {}  # node -> next index it must apply
        self.state_after: dict[int, bytes] = {0: b""}  # index -> state hash, cluster-wide
        self.node_state: dict[str, bytes] = {}  # node -> its state hash now
        self.snapshots_installed = 0
        self.max_commit_seen = 0
        self.checks = 0
        self.configs: dict[int, Membership] = {}  # index -> applied CONFIG entry, cluster-wide
        self.node_config: dict[str, Membership] = {}  # node -> last CONFIG it applied

    # Election safety: at most one leader per term.
    def observe(self, node: RaftNode) -> None:
        self.checks += 1
        self.max_commit_seen = max(self.max_commit_seen, node.commit_index)
        # A learner or removed node never campaigns; a leader that removed itself leads only
        # until that entry commits.
        if (
            node.role is not Role.FOLLOWER
            and not node.membership.is_voter(node.id)
            and (node.role is not Role.LEADER or not node.config_change_pending)
        ):
            raise Violation(
                "membership",
                f"{node.id} is a {node.role.value} in term {node.term} but {node.member_status()}",
            )
        if node.role is not Role.LEADER:
            return
        known = self.leader_of_term.get(node.term)
        if known is None:
            self.leader_of_term[node.term] = node.id
            self._check_leader_completeness(node)
        elif known != node.id:
            raise Violation(
                "election safety", f"term {node.term} has leaders {known} and {node.id}"
            )

    # Leader completeness: a new leader holds every entry ever applied anywhere.
    def _check_leader_completeness(self, leader: RaftNode) -> None:
        snapshot_index = leader.log.snapshot_index
        for index, (term, payload) in self.applied.items():
            if index < snapshot_index:
                continue  # compacted into the leader's snapshot (checked as state below)
            if index == snapshot_index:
                if leader.log.snapshot_term != term:
                    raise Violation(
                        "leader completeness",
                        f"{leader.id} leads term {leader.term} with a snapshot at {index} of "
                        f"term {leader.log.snapshot_term}; term {term} was applied there",
                    )
                continue
            entries = leader.log.entries(index, index + 1, entries_max=1, bytes_max=1 << 30)
            if not entries or (entries[0].term, entries[0].payload) != (term, payload):
                have = (entries[0].term, entries[0].payload[:16]) if entries else None
                raise Violation(
                    "leader completeness",
                    f"{leader.id} leads term {leader.term} without applied entry {index} "
                    f"(term {term}); it holds {have}",
                )

    def node_restarted(self, node_id: str, applied_index: int, state: bytes = b"") -> None:
        """A node (re)starts from its checkpoint: ``state`` after ``applied_index``."""
        self._check_state(node_id, applied_index, state, "restarted from a checkpoint")
        self.next_apply[node_id] = applied_index + 1
        self.node_state[node_id] = state
        self.node_config.pop(node_id, None)

    def on_snapshot_installed(self, node_id: str, index: int, state: bytes) -> None:
        self.checks += 1
        self.snapshots_installed += 1
        self._check_state(node_id, index, state, "installed a snapshot")
        self.next_apply[node_id] = index + 1
        self.node_state[node_id] = state
        self.node_config.pop(node_id, None)

    def _check_state(self, node_id: str, index: int, state: bytes, how: str) -> None:
        known = self.state_after.get(index)
        if known is None:
            self.state_after[index] = state
        elif known != state:
            raise Violation(
                "state-machine safety",
                f"{node_id} {how} at index {index} with a state no node had after {index}",
            )

    # State-machine safety: no index applied with two different entries, on any node, ever.
    def on_apply(self, node_id: str, entry: Entry) -> None:
        self.checks += 1
        expected = self.next_apply.get(node_id, 1)
        if entry.index != expected:
            raise Violation(
                "apply order", f"{node_id} applied {entry.index} when {expected} was next"
            )
        self.next_apply[node_id] = expected + 1
        state = next_state_hash(self.node_state.get(node_id, b""), entry)
        self.node_state[node_id] = state
        self._check_state(node_id, entry.index, state, "applied entries")
        if entry.kind is EntryKind.CONFIG:
            self._check_config(node_id, entry)
        seen = self.applied.get(entry.index)
        fact = (entry.term, entry.payload)
        if seen is None:
            self.applied[entry.index] = fact
        elif seen != fact:
            raise Violation(
                "state-machine safety",
                f"{node_id} applied index {entry.index} as term {entry.term}, "
                f"another node applied term {seen[0]} ({seen[1][:16]!r} vs {fact[1][:16]!r})",
            )

    # Single-server changes: each applied configuration differs from the one applied before it
    # by exactly one server (added as a learner, promoted, or removed).
    def _check_config(self, node_id: str, entry: Entry) -> None:
        new = Membership.decode(entry.data)
        self.configs.setdefault(entry.index, new)
        old = self.node_config.get(node_id)
        self.node_config[node_id] = new
        if old is None:
            return  # the first this node applied since it (re)started or installed a snapshot
        moved = {
            n for n in set(old.everyone()) | set(new.everyone()) if old.role_of(n) != new.role_of(n)
        }
        if len(moved) != 1:
            raise Violation(
                "membership",
                f"{node_id} applied configuration {new.as_dict()} at {entry.index}, changing "
                f"{sorted(moved)} at once from {old.as_dict()}",
            )

    def membership_at(self, index: int, genesis: Membership) -> Membership:
        earlier = [i for i in self.configs if i <= index]
        return self.configs[max(earlier)] if earlier else genesis

    # Linearizable reads: a read barrier covers everything committed before it was requested.
    def on_read_released(self, node_id: str, read_index: int, required_index: int) -> None:
        self.checks += 1
        if read_index < required_index:
            raise Violation(
                "linearizable read",
                f"{node_id} released a read at index {read_index}, but {required_index} "
                "was already committed when the read was requested",
            )


def log_of(node: RaftNode) -> tuple[int, list[tuple[int, bytes]]]:
    """(first index, every (term, payload) the node's log still holds from there)."""
    out: list[tuple[int, bytes]] = []
    first = index = node.log.first_index()
    last = node.last_index
    while index <= last:
        batch = node.log.entries(index, last + 1, entries_max=4096, bytes_max=1 << 30)
        out.extend((e.term, e.payload) for e in batch)
        index += len(batch)
    return first, out


def check_log_matching(nodes: list[RaftNode]) -> None:
    """Log matching: two logs with the same term at an index agree on everything up to it
    (compared where both still hold entries: below that, compaction kept only snapshots)."""
    logs = [(node.id, *log_of(node)) for node in nodes]
    for a in range(len(logs)):
        for b in range(a + 1, len(logs)):
            (id_a, first_a, log_a), (id_b, first_b, log_b) = logs[a], logs[b]
            lo = max(first_a, first_b)
            top = min(first_a + len(log_a), first_b + len(log_b)) - 1
            while top >= lo and log_a[top - first_a][0] != log_b[top - first_b][0]:
                top -= 1
            for i in range(lo, top + 1):
                if log_a[i - first_a] != log_b[i - first_b]:
                    raise Violation(
                        "log matching",
                        f"{id_a} and {id_b} share term {log_a[top - first_a][0]} at index {top} "
                        f"but differ at index {i}",
                    )
