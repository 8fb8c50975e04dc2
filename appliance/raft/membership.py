"""The Raft configuration: who votes and who only listens (Raft thesis chapter 4).

A ``Membership`` is a set of voters and a set of learners (non-voting members: they receive
entries and snapshots but never count in a quorum or an election, §4.2.1). It changes one server
at a time (§4.1): a learner is added, a learner is promoted to voter, or a member is removed.
Any two majorities of configurations that differ by one voter intersect, so no joint consensus
is needed — provided only one change is in flight at a time.

A change travels as a CONFIG log entry whose data is ``encode()``: the whole new configuration,
not a delta, so a server reads the configuration in force from the latest such entry in its log,
committed or not (§4.1), or from its snapshot's metadata when the entry was compacted away.

A member added at run time carries its cluster address (``host:port``) in the configuration, so
every voter — not only the leader that added it — can reach it once it leads. Genesis voters'
addresses come from each voter's config file, as before.

Snapshot metadata and ``LogStorage.compact`` keep a configuration as one tuple of strings
(``members()``): each voter's id, then each learner's id prefixed with ``learner:``, each followed
by ``@host:port`` when the configuration carries its address (neither ``:`` nor ``@`` is ever part
of a node id, so nothing is ambiguous, and stores written before learners existed read back as
voters only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from appliance.raft.errors import RaftInvariantError
from appliance.raft.validation import check_node_id

LEARNER_PREFIX = "learner:"
MEMBERS_MAX = 64  # voters plus learners
ADDRESS_CHARS_MAX = 180  # "learner:" + a 64-character id + "@" + this fits the 255 of the wire


def check_address(address: str) -> str:
    """A cluster address ``host:port``: ASCII, no spaces, a port 1-65535."""
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    ok = (
        isinstance(address, str)
        and address.isascii()
        and 0 < len(address) <= ADDRESS_CHARS_MAX
        and not any(c.isspace() or c == "@" for c in address)
        and bool(host)
        and port.isdigit()
        and 1 <= int(port) <= 65535
    )
    if not ok:
        raise ValueError(f"address must be host:port (port 1-65535, no spaces), got {address!r}")
    return address


def same_address(a: str, b: str) -> bool:
    """Two ``host:port`` spellings of one address: host names compare without case (DNS
    names do), ports as numbers. Names are not resolved (pure): ``localhost`` and ``127.0.0.1``
    differ here."""
    host_a, _, port_a = a.rpartition(":")
    host_b, _, port_b = b.rpartition(":")
    return host_a.strip("[]").lower() == host_b.strip("[]").lower() and int(port_a) == int(port_b)


@dataclass(frozen=True)
class Membership:
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()
    addresses: tuple[tuple[str, str], ...] = ()  # (node id, host:port) of run-time members

    def __post_init__(self) -> None:
        for node_id, address in self.addresses:
            check_address(address)
            if not self.is_member(node_id):
                raise ValueError(f"address given for {node_id!r}, which is not a member")
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

    def address_of(self, node_id: str) -> str | None:
        return dict(self.addresses).get(node_id)

    def with_learner(
        self,
        node_id: str,
        address: str | None = None,
        taken: tuple[tuple[str, str], ...] = (),
    ) -> Membership:
        """Add ``node_id`` as a learner. Its ``address`` must be its own: not one a member added
        at run time has, nor one of ``taken`` (the genesis voters' addresses, which config files
        carry, removed voters included). A second node at a member's address would receive that
        member's messages, whose certificate (or log) is not its own, and never catch up."""
        check_node_id(node_id)
        if self.is_member(node_id):
            raise ValueError(f"{node_id!r} is already a {self.role_of(node_id)}")
        addresses = self.addresses
        if address is not None:
            check_address(address)
            self._check_address_free(address, taken)
            addresses = (*addresses, (node_id, address))
        return Membership(self.voters, (*self.learners, node_id), addresses)

    def _check_address_free(self, address: str, taken: tuple[tuple[str, str], ...]) -> None:
        owners = [(owner, f"a {self.role_of(owner)}") for owner, a in self.addresses]
        owners += [(owner, "a genesis voter") for owner, _ in taken]
        known = [*self.addresses, *taken]
        for (owner, what), (_, other) in zip(owners, known, strict=True):
            if same_address(address, other):
                raise ValueError(
                    f"address: {address} is the cluster address of {owner} ({what}); a new "
                    "member needs an address of its own (a new port or host)"
                )

    def with_promoted(self, node_id: str) -> Membership:
        if node_id not in self.learners:
            raise ValueError(
                f"{node_id!r} is not a learner ({self.role_of(node_id)}); add it as a learner first"
            )
        learners = tuple(n for n in self.learners if n != node_id)
        return Membership((*self.voters, node_id), learners, self.addresses)

    def without(self, node_id: str) -> Membership:
        if not self.is_member(node_id):
            raise ValueError(f"{node_id!r} is not a member of the configuration")
        if self.voters == (node_id,):
            raise ValueError(f"{node_id!r} is the last voter: the cluster cannot remove it")
        return Membership(
            tuple(n for n in self.voters if n != node_id),
            tuple(n for n in self.learners if n != node_id),
            tuple(pair for pair in self.addresses if pair[0] != node_id),
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
        body: dict[str, object] = {"learners": list(self.learners), "voters": list(self.voters)}
        if self.addresses:
            body["addresses"] = dict(self.addresses)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        try:
            body = json.loads(data)
            if not isinstance(body, dict) or not (
                {"learners", "voters"} <= set(body) <= {"learners", "voters", "addresses"}
            ):
                raise ValueError("expected the keys learners and voters (and addresses)")
            addresses = body.get("addresses", {})
            if not isinstance(addresses, dict):
                raise ValueError("addresses must map node ids to host:port")
            return cls(
                tuple(body["voters"]), tuple(body["learners"]), tuple(sorted(addresses.items()))
            )
        except (ValueError, TypeError) as exc:
            raise RaftInvariantError(f"configuration entry is malformed: {exc}") from None

    def members(self) -> tuple[str, ...]:
        """The snapshot-metadata form (module docstring)."""
        addresses = dict(self.addresses)

        def one(node_id: str) -> str:
            address = addresses.get(node_id)
            return node_id if address is None else f"{node_id}@{address}"

        return tuple(one(n) for n in self.voters) + tuple(
            LEARNER_PREFIX + one(n) for n in self.learners
        )

    @classmethod
    def from_members(cls, members: tuple[str, ...] | list[str]) -> Membership:
        voters: list[str] = []
        learners: list[str] = []
        addresses: list[tuple[str, str]] = []
        for member in members:
            is_learner = member.startswith(LEARNER_PREFIX)
            node_id, at, address = member.removeprefix(LEARNER_PREFIX).partition("@")
            (learners if is_learner else voters).append(node_id)
            if at:
                addresses.append((node_id, address))
        return cls(tuple(voters), tuple(learners), tuple(sorted(addresses)))

    def as_dict(self) -> dict[str, object]:
        return {
            "voters": list(self.voters),
            "learners": list(self.learners),
            "addresses": dict(self.addresses),
        }


class ConfigHistory:
    """The configurations a log holds: the one at its compaction point (``base``), then every
    CONFIG entry after it, in index order. The configuration in force is the last (§4.1)."""

    def __init__(self, base: Membership, base_index: int = 0) -> None:
        self.base = base
        self.base_index = base_index  # where ``base`` was written (0: genesis; or compacted)
        self.entries: list[tuple[int, Membership]] = []

    @property
    def latest(self) -> Membership:
        return self.entries[-1][1] if self.entries else self.base

    @property
    def latest_index(self) -> int:
        """Index of the latest CONFIG entry (``base_index`` when it was compacted away)."""
        return self.entries[-1][0] if self.entries else self.base_index

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

    def replace_range(self, lo: int, hi: int, found: list[tuple[int, Membership]]) -> None:
        """The log now holds, at ``lo..hi``, entries whose CONFIG ones are ``found``."""
        kept = [(i, m) for i, m in self.entries if not lo <= i <= hi]
        self.entries = sorted(kept + found, key=lambda pair: pair[0])

    def truncate_from(self, index: int) -> None:
        """Entries at ``index`` and after left the log (replaced by a leader's)."""
        while self.entries and self.entries[-1][0] >= index:
            self.entries.pop()

    def compacted(self, index: int) -> None:
        for at_index, membership in self.entries:
            if at_index > index:
                break
            self.base, self.base_index = membership, at_index
        self.entries = [(i, m) for i, m in self.entries if i > index]

    def restored(self, base: Membership, index: int) -> None:
        """A snapshot at ``index`` replaced the log; its configuration is ``base``."""
        self.base, self.base_index = base, index
        self.entries = []
