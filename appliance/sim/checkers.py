"""Safety checkers that watch the simulated cluster from outside the code under test.

They see only what an observer could: each node's public role, term, commit index and log, and
the stream of entries each node applies. They keep their own memory, so a fact survives the
crash of the node that revealed it (an index applied before a crash must be applied identically
after the restart). Each violation raises ``Violation`` naming the rule (Raft thesis fig. 3.2).
"""

from __future__ import annotations

from appliance.raft import Entry, RaftNode, Role


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
        self.max_commit_seen = 0
        self.checks = 0

    # Election safety: at most one leader per term.
    def observe(self, node: RaftNode) -> None:
        self.checks += 1
        self.max_commit_seen = max(self.max_commit_seen, node.commit_index)
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
        for index, (term, payload) in self.applied.items():
            entries = leader.log.entries(index, index + 1, entries_max=1, bytes_max=1 << 30)
            if not entries or (entries[0].term, entries[0].payload) != (term, payload):
                have = (entries[0].term, entries[0].payload[:16]) if entries else None
                raise Violation(
                    "leader completeness",
                    f"{leader.id} leads term {leader.term} without applied entry {index} "
                    f"(term {term}); it holds {have}",
                )

    def node_restarted(self, node_id: str, applied_index: int) -> None:
        self.next_apply[node_id] = applied_index + 1

    # State-machine safety: no index applied with two different entries, on any node, ever.
    def on_apply(self, node_id: str, entry: Entry) -> None:
        self.checks += 1
        expected = self.next_apply.get(node_id, 1)
        if entry.index != expected:
            raise Violation(
                "apply order", f"{node_id} applied {entry.index} when {expected} was next"
            )
        self.next_apply[node_id] = expected + 1
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

    # Linearizable reads: a read barrier covers everything committed before it was requested.
    def on_read_released(self, node_id: str, read_index: int, required_index: int) -> None:
        self.checks += 1
        if read_index < required_index:
            raise Violation(
                "linearizable read",
                f"{node_id} released a read at index {read_index}, but {required_index} "
                "was already committed when the read was requested",
            )


def log_of(node: RaftNode) -> list[tuple[int, bytes]]:
    """Every (term, payload) of a node's log, index 1 first."""
    out: list[tuple[int, bytes]] = []
    index = 1
    last = node.last_index
    while index <= last:
        batch = node.log.entries(index, last + 1, entries_max=4096, bytes_max=1 << 30)
        out.extend((e.term, e.payload) for e in batch)
        index += len(batch)
    return out


def check_log_matching(nodes: list[RaftNode]) -> None:
    """Log matching: two logs with the same term at an index agree on everything up to it."""
    logs = [(node.id, log_of(node)) for node in nodes]
    for a in range(len(logs)):
        for b in range(a + 1, len(logs)):
            (id_a, log_a), (id_b, log_b) = logs[a], logs[b]
            top = min(len(log_a), len(log_b))
            while top > 0 and log_a[top - 1][0] != log_b[top - 1][0]:
                top -= 1
            for i in range(top):
                if log_a[i] != log_b[i]:
                    raise Violation(
                        "log matching",
                        f"{id_a} and {id_b} share term {log_a[top - 1][0]} at index {top} "
                        f"but differ at index {i + 1}",
                    )
