"""The Raft configuration: who votes and who only listens (Raft thesis chapter 4).

A ``Membership`` is a set of voters and a set of learners (non-voting members: they receive
entries and snapshots but never count in a quorum or an election, §4.2.1). It changes one server
at a time (§4.1): a learner is added, a learner is promoted to voter, or a member is removed.
Any two majorities of configurations that differ by one voter intersect, so no joint consensus
is needed — provided only one change is in flight at a time.

A change travels as a CONFIG log entry whose data is ``encode()``: the whole new configuration,
not a delta, so a server reads the configuration in force from the latest such entry in its log,
committed or not (§4.1), or from its snapshot's metadata when the entry was compacted away.

Snapshot metadata and ``LogStorage.compact`` keep a configuration as one tuple of strings
(``members()``): each voter's id, then each learner's id prefixed with ``learner:`` (a colon is
never part of a node id, so the two cannot be confused, and stores written before learners
existed read back as voters only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from appliance.raft.errors import RaftInvariantError
from appliance.raft.validation import check_node_id

LEARNER_PREFIX = "learner:"
MEMBERS_MAX = 64  # voters plus learners


@dataclass(frozen=True)
class Membership:
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for node_id in self.voters + self.learners:
            check_node_id(node_id)
        everyone = self.voters + self.learners
        if len(set(everyone)) != len(everyone):
            raise ValueError(
                f"members must be distinct: voters {self.voters}, learners {self.learners}"
            )
        if not self.voters:
            raise ValueError("a configuration needs at least one voter")
        if len(everyone) > MEMBERS_MAX:
            raise ValueError(f"{len(everyone)} members exceed {MEMBERS_MAX}")

    def is_voter(self, node_id: str) -> bool:
        return node_id in self.voters

    def is_member(self, node_id: str) -> bool:
        return node_id in self.voters or node_id in self.learners

    def everyone(self) -> tuple[str, ...]:
        return self.voters + self.learners

    # -- the three single-server changes (each refused with the reason, naming the id) --------

    def with_learner(self, node_id: str) -> Membership:
        check_node_id(node_id)
        if self.is_member(node_id):
            raise ValueError(f"{node_id!r} is already a {self.role_of(node_id)}")
        return Membership(self.voters, (*self.learners, node_id))

    def with_promoted(self, node_id: str) -> Membership:
        if node_id not in self.learners:
            raise ValueError(
                f"{node_id!r} is not a learner ({self.role_of(node_id)}); add it as a learner first"
            )
        learners = tuple(n for n in self.learners if n != node_id)
        return Membership((*self.voters, node_id), learners)

    def without(self, node_id: str) -> Membership:
        if not self.is_member(node_id):
            raise ValueError(f"{node_id!r} is not a member of the configuration")
        if self.voters == (node_id,):
            raise ValueError(f"{node_id!r} is the last voter: the cluster cannot remove it")
        return Membership(
            tuple(n for n in self.voters if n != node_id),
            tuple(n for n in self.learners if n != node_id),
        )

    def role_of(self, node_id: str) -> str:
        if node_id in self.voters:
            return "voter"
        if node_id in self.learners:
            return "learner"
        return "non-member"

    # -- encodings ---------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The data of a CONFIG entry (canonical: sorted keys, no spaces)."""
        body = {"learners": list(self.learners), "voters": list(self.voters)}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        try:
            body = json.loads(data)
            if not isinstance(body, dict) or set(body) != {"learners", "voters"}:
                raise ValueError("expected exactly the keys learners and voters")
            return cls(tuple(body["voters"]), tuple(body["learners"]))
        except (ValueError, TypeError) as exc:
            raise RaftInvariantError(f"configuration entry is malformed: {exc}") from None

    def members(self) -> tuple[str, ...]:
        """The snapshot-metadata form (module docstring)."""
        return self.voters + tuple(LEARNER_PREFIX + n for n in self.learners)

    @classmethod
    def from_members(cls, members: tuple[str, ...] | list[str]) -> Membership:
        voters = tuple(m for m in members if not m.startswith(LEARNER_PREFIX))
        learners = tuple(m[len(LEARNER_PREFIX) :] for m in members if m.startswith(LEARNER_PREFIX))
        return cls(voters, learners)

    def as_dict(self) -> dict[str, list[str]]:
        return {"voters": list(self.voters), "learners": list(self.learners)}


class ConfigHistory:
    """The configurations a log holds: the one at its compaction point (``base``), then every
    CONFIG entry after it, in index order. The configuration in force is the last (§4.1)."""

    def __init__(self, base: Membership) -> None:
        self.base = base
        self.entries: list[tuple[int, Membership]] = []

    @property
    def latest(self) -> Membership:
        return self.entries[-1][1] if self.entries else self.base

    @property
    def latest_index(self) -> int:
        """Index of the latest CONFIG entry (0 when the configuration comes from the base)."""
        return self.entries[-1][0] if self.entries else 0

    def at(self, index: int) -> Membership:
        """The configuration in force once the log is applied up to ``index``."""
        found = self.base
        for at_index, membership in self.entries:
            if at_index > index:
                break
            found = membership
        return found

    def appended(self, index: int, membership: Membership) -> None:
        self.truncate_from(index)
        self.entries.append((index, membership))

    def truncate_from(self, index: int) -> None:
        """Entries at ``index`` and after left the log (replaced by a leader's)."""
        while self.entries and self.entries[-1][0] >= index:
            self.entries.pop()

    def compacted(self, index: int) -> None:
        self.base = self.at(index)
        self.entries = [(i, m) for i, m in self.entries if i > index]

    def restored(self, base: Membership) -> None:
        self.base = base
        self.entries = []
