"""A Raft voter as a pure state machine (Ongaro 2014, "Consensus: bridging theory and practice").

Theory of operation. The node never touches a disk, a socket or a clock. Its inputs are
``tick()`` (one logical clock unit; the driver maps it to, say, 100 ms of monotonic time),
``step(message)``, ``propose(data)`` and ``read_index(request_id)``. Its outputs are collected
by ``ready()``: the hard state and entries to persist, the messages to send, the committed
entries to apply and the released read barriers. The driver persists first, then sends, then
applies, then calls ``advance(ready)``. Because every vote grant and append acknowledgement leaves
only after the state it was computed from is durable, it can never outlive a crash that forgets
it (thesis §3.8); only a leader's own appends and heartbeats may leave before its fsync
(``send_order.py``, thesis §10.2.1), since they promise nothing. Between ``ready()`` and
``advance()`` the node accepts no input.

Roles swap the step and tick functions (``_become_*``), so each role's rules read in one place:

- followers and pre-candidates: election timeout randomized in [election_ticks_min,
  election_ticks_max] (§3.4); on expiry a PRE-VOTE round at term+1 that changes nothing locally
  (§9.6); only a majority of pre-votes starts a real election, so a node cut off by a partition
  cannot inflate terms and depose a healthy leader when it returns;
- leader stickiness (§4.2.3, §9.6): a voter that heard from a live leader within the minimum
  election timeout ignores (pre-)vote requests altogether;
- a dead leader's process (the driver's ``leader_gone`` hint: its port refuses connections)
  ends that lease at once and brings the follower's campaign forward to 2-5 ticks, so a crashed
  leader is replaced in a fraction of an election timeout; a wrong hint is harmless (the other
  voters still in their lease refuse the pre-vote);
- check-quorum (§6.2): a leader that has not heard from a majority within an election timeout
  steps down, so a stale leader stops serving reads and accepting proposals;
- a new leader appends a BARRIER no-op; entries are committed only by counting replicas of an
  entry of the current term (§3.6.2, figure 3.7) and the barrier makes that happen at once;
- log replication with conflict truncation and a (hint_index, hint_term) fast back-off that
  skips a divergent term per round trip (§5.3 of the paper, as in etcd's findConflictByTerm);
- ReadIndex (§6.4): a read barrier records the commit index, confirms leadership with a
  heartbeat round acknowledged by a majority, and is then released; the caller waits until
  applied >= that index. Reads wait for the barrier of the current term first.

Batches are capped at ``batch_entries_max`` entries and ``batch_bytes_max`` payload bytes.

A RECOVERING node (its storage says ``recovering()``: the voter lost its durable state and its
store was rebuilt empty by ``admin store recover``) is a voter in name only. A server that lost
its persistent state cannot safely rejoin with its old identity (thesis §3.8): it forgot its log,
so its vote could elect a leader missing committed entries, and it forgot its term and vote, so
it could vote twice in one term. The thesis re-adds such a server through a membership change
(chapter 4), first as a non-voting member that catches up (§4.2.1). Our voters are fixed, so the
node plays that non-voting member itself: it replicates and acknowledges like any follower, but
grants no vote or pre-vote and never campaigns, until an append from the leader of its current
term leaves its log matching the leader's up to the commit index that append carries, and the
entry at that index belongs to the leader's term (so the leader's commit covers its own term's
barrier, hence every entry committed in earlier terms). It then records the leader as its vote
for that term (it must not vote for anyone else in a term whose earlier vote it forgot), and
the Ready carries ``recovered``: the driver clears the durable flag before sending. Before all
that, a recovering node stays QUIET for ``2 * election_ticks_max`` ticks after it starts: it
drops every message, so messages of its lost incarnation have drained and any leader cut off
from a majority has stepped down (check-quorum) before it answers anyone. The full safety
argument, and the assumptions it rests on, are in docs/voter-recovery.md.

A leader whose probe is answered with a rejection below the point that follower had
acknowledged (``hint_index < match``: only a lost store forgets acknowledged entries, or the
answer is a stale duplicate) forgets that match and probes from the hint, so a recovered
follower catches up instead of being probed at its old match forever.

Log compaction (thesis §5): the driver calls ``compact(index)`` for an index the application's
durable checkpoint covers; the node forgets the entries up to it (the storage deletes them). A
follower whose next entry the leader no longer holds gets the leader's snapshot instead — the
storage's checkpoint, as opaque bytes — in ``SnapshotChunk`` messages of at most
``snapshot_chunk_bytes``, one in flight at a time (resent after a heartbeat round without an
answer). The follower collects the chunks in memory, in order, and verifies the SHA-256 of the
whole before anything changes; a chunk out of order is answered with the offset it needs. With
the last chunk the node takes the snapshot as its log (``RaftLog.restore``) and ``Ready.snapshot``
tells the driver to install it — the storage replaces its checkpoint and its whole log in one
atomic step, the application reloads its state — before it persists anything else or sends the
``AppendResponse`` that tells the leader to replicate from the snapshot's index on. A crash at
any point before that install leaves the old log and checkpoint intact; the leader starts over.

Membership change (thesis chapter 4, membership.py): one server at a time. The configuration in
force is the latest CONFIG entry in the log, committed or not, or the snapshot's when compacted
away. ``add_learner``, ``promote`` and ``remove`` are leader-only and refused while a change is in
flight (the latest CONFIG entry is not committed) or before the leader's barrier committed (§4.1:
a change only after the previous one committed in the leader's term). A learner receives entries
and snapshots, never campaigns and never counts in a quorum; ``promote`` is refused
until it has caught up (its match reaches the commit index, §4.2.1). A node that is not a voter of
the configuration in force (a learner, or removed) never campaigns; one whose removal is
committed (``removed``) does not vote either (a learner does: see ``removed``);
``member_status()`` says which and since what index. A leader that removes itself keeps leading
(counting only the new voters, §4.2.2) until the entry commits, then sends ``TimeoutNow`` to the
most up-to-date remaining voter (§3.10: that voter campaigns at once, skipping pre-vote, and its
vote request carries ``transfer`` so voters still in the lease answer it) and steps down.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from appliance.raft import quorum
from appliance.raft.errors import (
    NotLeader,
    ProposalRefused,
    RaftInvariantError,
    RaftUsageError,
    ReadRefused,
)
from appliance.raft.log import RaftLog
from appliance.raft.membership import ConfigHistory, Membership
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    Message,
    SnapshotChunk,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.progress import Progress, ProgressState
from appliance.raft.snapshot import Snapshot, snapshot_checksum
from appliance.raft.storage import LogStorage
from appliance.raft.validation import check_node_id

MiB = 1024 * 1024
# After a leader_gone hint, campaign within this many ticks (inclusive range): randomized, so
# the followers of a dead leader rarely split their votes, and at least two ticks, so a fellow
# follower has had one tick to see the same hint and drop its lease before the pre-vote arrives.
LEADER_GONE_CAMPAIGN_TICKS = (2, 5)


class RandomSource(Protocol):
    """The one method the node needs from a seeded ``random.Random``."""

    def randint(self, a: int, b: int) -> int: ...


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True)
class RaftConfig:
    node_id: str
    voters: tuple[str, ...]  # the genesis voters (the configuration before any CONFIG entry)
    # Genesis learners; a node joining a running cluster names itself here, so it starts as a
    # non-voting member until the leader's log or snapshot tells it the configuration in force.
    learners: tuple[str, ...] = ()
    election_ticks_min: int = 10
    election_ticks_max: int = 20
    heartbeat_ticks: int = 1
    batch_entries_max: int = 32
    batch_bytes_max: int = 12 * MiB
    inflight_batches_max: int = 4
    uncommitted_entries_max: int = 4096
    apply_entries_max: int = 256
    reads_pending_max: int = 1024
    snapshot_chunk_bytes: int = 1 * MiB  # one SnapshotChunk's data (never above batch_bytes_max)
    # The genesis voters' cluster addresses (id, host:port), from the config files: a learner is
    # never added at one of them (Membership.with_learner).
    genesis_addresses: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_node_id(self.node_id)
        for voter in self.voters + self.learners:
            check_node_id(voter)
        if len(set(self.voters)) != len(self.voters):
            raise ValueError(f"voters must be distinct: {self.voters}")
        if set(self.voters) & set(self.learners):
            raise ValueError(f"learners {self.learners} must not be voters {self.voters}")
        if self.node_id not in self.voters + self.learners:
            raise ValueError(
                f"node_id {self.node_id!r} is not among the voters {self.voters} or learners "
                f"{self.learners}"
            )
        if not 1 <= self.heartbeat_ticks < self.election_ticks_min <= self.election_ticks_max:
            raise ValueError(
                "need 1 <= heartbeat_ticks < election_ticks_min <= election_ticks_max, got "
                f"{self.heartbeat_ticks}, {self.election_ticks_min}, {self.election_ticks_max}"
            )
        for name in (
            "batch_entries_max",
            "batch_bytes_max",
            "inflight_batches_max",
            "uncommitted_entries_max",
            "apply_entries_max",
            "reads_pending_max",
            "snapshot_chunk_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")

    @property
    def entry_data_bytes_max(self) -> int:
        """Largest proposal: one entry (kind byte + data) must fit in one batch."""
        return self.batch_bytes_max - 1


@dataclass(frozen=True)
class HardState:
    term: int
    voted_for: str | None


@dataclass(frozen=True)
class SoftState:
    role: Role
    term: int
    leader_id: str | None


@dataclass(frozen=True)
class ReadState:
    """A released read barrier: serve the read once applied >= ``index``."""

    request_id: int
    index: int


@dataclass(frozen=True)
class Ready:
    hard_state: HardState
    persist_hard_state: bool  # hard_state differs from what storage holds
    truncate_from: int | None  # storage drops every index >= this first
    entries: tuple[Entry, ...]  # then appends these
    messages: tuple[Message, ...]  # send only once the above is durable
    committed: tuple[Entry, ...]  # apply in order, after persisting
    reads: tuple[ReadState, ...]
    reads_failed: tuple[int, ...]  # request ids whose barrier can no longer succeed
    soft_state: SoftState
    # The node finished recovering (see module docstring): the driver clears the storage's
    # recovering flag durably, after persisting the above and before sending the messages.
    recovered: bool = False
    # A leader's snapshot, complete and verified: the driver installs it (storage replaces its
    # checkpoint and whole log atomically; the application reloads its state) BEFORE the
    # hard state and entries above are persisted and before any message is sent.
    snapshot: Snapshot | None = None

    @property
    def must_persist(self) -> bool:
        return (
            self.persist_hard_state
            or bool(self.entries)
            or self.truncate_from is not None
            or self.snapshot is not None
        )

    def stored_entries(self) -> list[tuple[int, int, bytes]]:
        return [(e.index, e.term, e.payload) for e in self.entries]


@dataclass
class _IncomingSnapshot:
    """A follower's snapshot in transfer: the chunks received so far, in order."""

    key: tuple[int, int, str, int, tuple[str, ...]]  # index, term, checksum, total, voters
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0


class RaftNode:
    def __init__(
        self,
        config: RaftConfig,
        storage: LogStorage,
        rng: RandomSource,
        *,
        applied_index: int = 0,
    ) -> None:
        self.config = config
        self.id = config.node_id
        self._rng = rng
        self._storage = storage
        self.log = RaftLog(storage, applied_index=applied_index)
        # After a compaction the CONFIG entry's own index is gone: the snapshot's stands in.
        self._configs = ConfigHistory(self._base_membership(), self.log.snapshot_index)
        self._load_config_entries()
        self._incoming: _IncomingSnapshot | None = None  # a follower's partial snapshot
        self._snapshot_cache: Snapshot | None = None  # a leader's image, reused across peers
        term, voted_for = storage.hard_state()
        self.term = term
        self.voted_for = voted_for
        self._persisted = HardState(term, voted_for)
        self.recovering = storage.recovering()
        self._recovery_done = False  # reported by the next ready(), then cleared
        self._quiet_ticks_left = 2 * config.election_ticks_max if self.recovering else 0
        self.leader_id: str | None = None
        self.role = Role.FOLLOWER
        self._messages: list[Message] = []
        self._outstanding: Ready | None = None
        self._last_soft = SoftState(Role.FOLLOWER, term, None)
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = config.election_ticks_min
        self._votes: dict[str, bool] = {}
        self._progress: dict[str, Progress] = {}
        self._append_pending = False
        self._term_start_index = 0
        self._read_seq = 0
        self._reads_waiting_barrier: list[int] = []
        self._reads_pending: list[tuple[int, int, int]] = []  # (seq, request_id, index)
        self._reads_ready: list[ReadState] = []
        self._reads_failed: list[int] = []
        self._transfer_sent = False  # a removed leader's TimeoutNow left (once per term)
        self._peers_of: tuple[Membership, tuple[str, ...]] | None = None  # see ``peers``
        self._step: Callable[[Message], None] = self._step_follower
        self._tick: Callable[[], None] = self._tick_election
        self._become_follower(term, None)

    # -- public inputs -----------------------------------------------------------------------

    def tick(self) -> None:
        self._check_no_outstanding_ready()
        if self._quiet_ticks_left > 0:
            self._quiet_ticks_left -= 1
        self._tick()

    def step(self, message: Message) -> None:
        self._check_no_outstanding_ready()
        if message.to != self.id:
            raise RaftUsageError(f"message for {message.to!r} stepped into {self.id!r}")
        if message.sender == self.id:
            return  # a message from ourselves is a transport loop: nothing to learn
        # Any other sender is heard (thesis §4.1): a joining node learns the configuration from a
        # leader it does not know yet; quorums count only the voters of the configuration.
        if self._quiet_ticks_left > 0:
            return  # a recovering node's quiet start (module docstring)
        if message.term > self.term:
            if not self._accept_higher_term(message):
                return
        elif message.term < self.term:
            self._answer_lower_term(message)
            return
        if isinstance(message, VoteRequest):
            self._handle_vote_request(message)
        else:
            self._step(message)

    def campaign(self) -> None:
        """Start an election now (a pre-vote round first) instead of waiting for the timeout.

        Used by the single-voter driver at start-up, and by tests; a leader ignores it. A
        recovering node refuses (it must catch up from a leader first)."""
        self._check_no_outstanding_ready()
        if self.recovering:
            raise RaftUsageError(
                f"{self.id} is recovering a lost store: it cannot campaign before it caught up "
                "from a leader (a single voter has no one to recover from)"
            )
        if not self.is_voter:
            raise RaftUsageError(f"{self.id} cannot campaign: {self.member_status()}")
        if self.role is not Role.LEADER:
            self._campaign()

    def leader_gone(self, peer: str) -> None:
        """The driver's hint that ``peer``'s process is gone (its cluster port refuses
        connections): a follower of ``peer`` forgets it — so it no longer holds a lease that
        would refuse its fellow followers' (pre-)votes — and campaigns within
        ``LEADER_GONE_CAMPAIGN_TICKS`` ticks instead of a whole election timeout.

        Only liveness changes: a wrong hint costs at most a pre-vote round that the voters
        still hearing from the leader refuse (the lease), never safety."""
        self._check_no_outstanding_ready()
        if self.role is not Role.FOLLOWER or self.leader_id != peer or self.recovering:
            return
        if self._quiet_ticks_left > 0:
            return
        self.leader_id = None
        low, high = LEADER_GONE_CAMPAIGN_TICKS
        left = self._rng.randint(low, high)
        self._election_elapsed = max(self._election_elapsed, self._randomized_timeout - left)

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append a command; returns ``(term, index)``: committed once applied with that term."""
        self._check_no_outstanding_ready()
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        if self._removing_self_done():
            raise NotLeader(None)  # removed, handing over: the next leader takes proposals
        if len(data) > self.config.entry_data_bytes_max:
            raise ProposalRefused(
                f"proposal of {len(data)} bytes exceeds {self.config.entry_data_bytes_max}"
            )
        if self.log.last_index() - self.log.commit >= self.config.uncommitted_entries_max:
            raise ProposalRefused(
                f"{self.config.uncommitted_entries_max} entries already wait for commit"
            )
        index = self.log.last_index() + 1
        self.log.append([Entry(index, self.term, EntryKind.NORMAL, bytes(data))])
        self._append_pending = True
        self._maybe_commit()  # a single voter commits once its own copy is durable
        return self.term, index

    # -- membership change (module docstring) -------------------------------------------------

    def add_learner(self, node_id: str, address: str | None = None) -> tuple[int, int]:
        """Append a CONFIG entry adding ``node_id`` (reachable at ``address``, host:port) as a
        learner; returns ``(term, index)`` like ``propose``."""
        taken = self.config.genesis_addresses
        return self._propose_config(lambda m: m.with_learner(node_id, address, taken))

    def promote(self, node_id: str) -> tuple[int, int]:
        """Append a CONFIG entry making the learner ``node_id`` a voter, once it caught up."""
        self._check_no_outstanding_ready()
        if self.role is Role.LEADER and node_id in self.membership.learners:
            pr = self._progress.get(node_id)
            match = pr.match if pr is not None else 0
            if match < self.log.commit:
                raise ProposalRefused(
                    f"learner {node_id!r} has not caught up: it holds the log up to {match}, "
                    f"the commit index is {self.log.commit}; promote it once it has"
                )
        return self._propose_config(lambda m: m.with_promoted(node_id))

    def remove(self, node_id: str) -> tuple[int, int]:
        """Append a CONFIG entry removing ``node_id`` (a voter, this leader included, or a
        learner)."""
        return self._propose_config(lambda m: m.without(node_id))

    def _propose_config(self, change: Callable[[Membership], Membership]) -> tuple[int, int]:
        self._check_no_outstanding_ready()
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        if self._configs.latest_index > self.log.commit:
            raise ProposalRefused(
                f"a configuration change is in flight (entry {self._configs.latest_index}, "
                f"commit {self.log.commit}): one change at a time"
            )
        if self.log.commit < self._term_start_index:
            raise ProposalRefused(
                "this leader has not committed an entry of its term yet: a configuration change "
                "waits until it has (one committed change per leader term first)"
            )
        if self._removing_self_done():
            raise ProposalRefused(f"{self.id} is no longer a voter: it is handing over")
        try:
            membership = change(self.membership)
        except ValueError as exc:
            raise ProposalRefused(str(exc)) from None
        index = self.log.last_index() + 1
        self._append_config(Entry(index, self.term, EntryKind.CONFIG, membership.encode()))
        self._append_pending = True
        self._maybe_commit()
        return self.term, index

    def _append_config(self, entry: Entry) -> None:
        self.log.append([entry])
        self._configs.appended(entry.index, Membership.decode(entry.data))
        if self.role is Role.LEADER:
            for peer in self.peers:
                self._progress.setdefault(peer, Progress(entry.index))

    def read_index(self, request_id: int) -> None:
        """Start a linearizable read barrier; its ReadState (or failure) comes out of ready()."""
        self._check_no_outstanding_ready()
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        pending = len(self._reads_waiting_barrier) + len(self._reads_pending)
        if pending >= self.config.reads_pending_max:
            raise ReadRefused(f"{pending} read barriers already pending")
        if self.log.commit < self._term_start_index:
            self._reads_waiting_barrier.append(request_id)
        else:
            self._start_reads([request_id])

    def compact(self, index: int) -> int:
        """Forget log entries up to ``index`` (applied, and covered by the storage's durable
        checkpoint: the caller checks ``snapshot_index_available``); returns the term at
        ``index``. The caller then calls ``storage.compact(index, term, voters)``."""
        self._check_no_outstanding_ready()
        available = self._storage.snapshot_index_available()
        if index > available:
            raise RaftInvariantError(
                f"compaction to {index} beyond the durable checkpoint at {available}"
            )
        self._snapshot_cache = None
        term = self.log.compact(index)
        self._configs.compacted(index)
        return term

    # -- the ready/advance handshake ----------------------------------------------------------

    def has_ready(self) -> bool:
        if self._outstanding is not None:
            return False
        self._flush_appends()
        persisted, soft, log = self._persisted, self._last_soft, self.log
        return bool(
            self._messages
            or self._recovery_done
            or self._reads_ready
            or self._reads_failed
            or self.term != persisted.term
            or self.voted_for != persisted.voted_for
            or log.has_unstable()
            or log.pending_snapshot is not None
            or log.truncate_from() is not None
            or log.applied < min(log.commit, log.stable_last)
            or self.role is not soft.role
            or self.term != soft.term
            or self.leader_id != soft.leader_id
        )

    def ready(self) -> Ready:
        self._check_no_outstanding_ready()
        self._flush_appends()
        hard_state = HardState(self.term, self.voted_for)
        committed = self.log.next_committed(
            entries_max=self.config.apply_entries_max, bytes_max=self.config.batch_bytes_max
        )
        ready = Ready(
            hard_state=hard_state,
            persist_hard_state=hard_state != self._persisted,
            truncate_from=self.log.truncate_from(),
            entries=self.log.unstable_entries(),
            messages=tuple(self._messages),
            committed=tuple(committed),
            reads=tuple(self._reads_ready),
            reads_failed=tuple(self._reads_failed),
            soft_state=self._soft_state(),
            recovered=self._recovery_done,
            snapshot=self.log.pending_snapshot,
        )
        self._recovery_done = False
        self._messages = []
        self._reads_ready = []
        self._reads_failed = []
        self._last_soft = ready.soft_state
        self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        if ready is not self._outstanding:
            raise RaftUsageError("advance() must be given the Ready returned by ready()")
        self._outstanding = None
        if ready.snapshot is not None:
            self.log.snapshot_installed()
        if ready.entries or ready.truncate_from is not None:
            self.log.stable_to(ready.entries[-1].index if ready.entries else self.log.last_index())
        if ready.persist_hard_state:
            self._persisted = ready.hard_state
        if ready.committed:
            self.log.applied_to(ready.committed[-1].index)
        if self.role is Role.LEADER:
            self._maybe_commit()

    # -- read-only views ---------------------------------------------------------------------

    @property
    def commit_index(self) -> int:
        return self.log.commit

    @property
    def applied_index(self) -> int:
        return self.log.applied

    @property
    def last_index(self) -> int:
        return self.log.last_index()

    @property
    def membership(self) -> Membership:
        """The configuration in force: the latest in the log, committed or not (§4.1)."""
        return self._configs.latest

    def membership_at(self, index: int) -> Membership:
        """The configuration once applied up to ``index`` (what a snapshot there carries)."""
        return self._configs.at(index)

    @property
    def config_change_pending(self) -> bool:
        """The latest CONFIG entry is not committed yet."""
        return self._configs.latest_index > self.log.commit

    @property
    def config_index(self) -> int:
        return self._configs.latest_index

    @property
    def peers(self) -> tuple[str, ...]:
        """Every other member of the configuration in force, voters and learners."""
        membership = self._configs.latest
        cached = self._peers_of
        if cached is None or cached[0] is not membership:  # computed once per configuration
            cached = self._peers_of = (
                membership,
                tuple(n for n in membership.everyone() if n != self.id),
            )
        return cached[1]

    @property
    def is_voter(self) -> bool:
        return self.membership.is_voter(self.id)

    @property
    def removed(self) -> bool:
        """Not a member of the configuration in force, and that configuration's exclusion of
        us is committed: this node neither campaigns nor votes.

        A learner still answers vote requests on the merits of the candidate's log (as in
        etcd-io/raft): it may have been promoted by an entry it has not received yet, and a
        candidate that holds that entry may need its vote. Only a candidate that counts it as a
        voter counts its vote, so answering is always safe."""
        return not self.membership.is_member(self.id) and not self.membership_at(
            self.log.commit
        ).is_member(self.id)

    def member_status(self) -> str:
        """Why this node votes or does not: one line for logs and ``status``."""
        role = self.membership.role_of(self.id)
        at = self._configs.latest_index
        where = f"the configuration at index {at}" if at else "the genesis configuration"
        if role == "voter":
            return f"voter in {where}"
        if role == "learner":
            return f"learner in {where}: receives entries, never campaigns, counts in no quorum"
        if not self.removed:
            return f"removed by {where}, not committed yet: it no longer campaigns"
        return (
            f"removed: not a member of {where}; it no longer votes or campaigns "
            "(stop this process, or re-add it with a new store)"
        )

    def _base_membership(self) -> Membership:
        members = self._storage.snapshot_voters() if self.log.snapshot_index else ()
        if members:
            return Membership.from_members(tuple(members))
        return Membership(self.config.voters, self.config.learners)

    def _load_config_entries(self) -> None:
        """Read the CONFIG entries of the stored log (a restart)."""
        index, last = self.log.first_index(), self.log.last_index()
        while index <= last:
            batch = self.log.entries(index, last + 1, entries_max=4096, bytes_max=64 * MiB)
            for entry in batch:
                if entry.kind is EntryKind.CONFIG:
                    self._configs.appended(entry.index, Membership.decode(entry.data))
            index += len(batch)

    def _soft_state(self) -> SoftState:
        return SoftState(self.role, self.term, self.leader_id)

    # -- role changes ------------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            if term < self.term:
                raise RaftInvariantError(f"term would go back from {self.term} to {term}")
            self.term = term
            self.voted_for = None
        self.leader_id = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self._rng.randint(
            self.config.election_ticks_min, self.config.election_ticks_max
        )
        self._votes = {}
        self._progress = {}
        self._transfer_sent = False
        self._append_pending = False
        self._incoming = None  # a transfer belongs to one leader's term
        self._fail_reads()

    def _become_follower(self, term: int, leader_id: str | None) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self._step = self._step_follower
        self._tick = self._tick_election

    def _become_pre_candidate(self) -> None:
        # Term and vote stay untouched: a pre-vote round is a question, not a decision.
        self._reset(self.term)
        self.role = Role.PRE_CANDIDATE
        self._step = self._step_candidate
        self._tick = self._tick_election
        self._votes = {self.id: True}

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.role = Role.CANDIDATE
        self.voted_for = self.id
        self._step = self._step_candidate
        self._tick = self._tick_election
        self._votes = {self.id: True}

    def _become_leader(self) -> None:
        if self.role is not Role.CANDIDATE:
            raise RaftInvariantError(f"only a candidate becomes leader, not a {self.role.value}")
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.id
        self._step = self._step_leader
        self._tick = self._tick_leader
        next_index = self.log.last_index() + 1
        self._progress = {peer: Progress(next_index) for peer in self.peers}
        self._term_start_index = next_index
        self._transfer_sent = False
        self.log.append([Entry(next_index, self.term, EntryKind.BARRIER)])
        self._append_pending = True
        self._maybe_commit()

    def _campaign(self, *, transfer: bool = False) -> None:
        if self.membership.voters == (self.id,):
            self._become_candidate()
            self._become_leader()
            return
        if transfer:
            # The leader asked for it (TimeoutNow): no pre-vote, the leader knows we are current.
            self._become_candidate()
            self._send_vote_requests(pre_vote=False, transfer=True)
            return
        self._become_pre_candidate()
        self._send_vote_requests(pre_vote=True)

    def _send_vote_requests(self, pre_vote: bool, transfer: bool = False) -> None:
        term = self.term + 1 if pre_vote else self.term
        for peer in self.membership.voters:
            if peer == self.id:
                continue
            self._send(
                VoteRequest(
                    self.id,
                    peer,
                    term,
                    self.log.last_index(),
                    self.log.last_term(),
                    pre_vote,
                    transfer,
                )
            )

    # -- term rules common to every role ------------------------------------------------------

    def _in_lease(self) -> bool:
        recent = self._election_elapsed < self.config.election_ticks_min
        return self.leader_id is not None and recent

    def _accept_higher_term(self, m: Message) -> bool:
        """Apply the rules for a message from a higher term; False to drop it."""
        if isinstance(m, VoteRequest):
            if self._in_lease() and not m.transfer:
                return False  # leader stickiness: a live leader is not deposed by a stranger
            if not m.pre_vote:
                self._become_follower(m.term, None)
            return True
        if isinstance(m, VoteResponse) and m.pre_vote and m.granted:
            return True  # a granted pre-vote is answered at the term we asked about
        leader = m.sender if isinstance(m, AppendRequest | Heartbeat | SnapshotChunk) else None
        self._become_follower(m.term, leader)
        return True

    def _answer_lower_term(self, m: Message) -> None:
        # A stale leader learns our term from this answer and steps down; a node that raised its
        # term alone and was ignored would otherwise never rejoin (thesis §9.6).
        if isinstance(m, AppendRequest | Heartbeat | SnapshotChunk):
            self._send(AppendResponse(self.id, m.sender, self.term, False, 0))
        elif isinstance(m, VoteRequest) and m.pre_vote:
            self._send(VoteResponse(self.id, m.sender, self.term, False, True))

    def _handle_vote_request(self, m: VoteRequest) -> None:
        if self.recovering or self.removed:
            # A lost store forgot the log and the votes: no (pre-)vote until caught up. A node
            # whose removal is committed has no say any more (and any candidate that still
            # counts it lacks that committed entry, so it could not win its vote anyway).
            self._send(VoteResponse(self.id, m.sender, self.term, False, m.pre_vote))
            return
        can_vote = (
            self.voted_for == m.sender
            or (self.voted_for is None and self.leader_id is None)
            or (m.pre_vote and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.last_log_index, m.last_log_term):
            self._send(VoteResponse(self.id, m.sender, m.term, True, m.pre_vote))
            if not m.pre_vote:
                self.voted_for = m.sender
                self._election_elapsed = 0
        else:
            self._send(VoteResponse(self.id, m.sender, self.term, False, m.pre_vote))

    # -- follower ------------------------------------------------------------------------------

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        # A non-voter keeps counting: its lease over, it answers (refuses) vote requests.
        timed_out = self._election_elapsed >= self._randomized_timeout
        if timed_out and not self.recovering and self.is_voter:
            self._campaign()

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, AppendRequest):
            self._election_elapsed = 0
            self.leader_id = m.sender
            self._handle_append(m)
        elif isinstance(m, Heartbeat):
            self._election_elapsed = 0
            self.leader_id = m.sender
            self._handle_heartbeat(m)
        elif isinstance(m, SnapshotChunk):
            self._election_elapsed = 0
            self.leader_id = m.sender
            self._handle_snapshot_chunk(m)
        elif isinstance(m, TimeoutNow) and self.is_voter and not self.recovering:
            self._campaign(transfer=True)
        # Responses addressed to a former role are stale here: ignored.

    def _handle_append(self, m: AppendRequest) -> None:
        if m.prev_index < self.log.commit:
            # Everything up to our commit is known to match; say so instead of re-checking.
            self._send(AppendResponse(self.id, m.sender, self.term, True, self.log.commit))
            return
        last_new = self.log.maybe_append(m.prev_index, m.prev_term, m.entries, m.commit)
        if last_new is not None:
            self._track_appended_configs(m.entries)
            if self.recovering:
                self._maybe_finish_recovery(m, last_new)
            self._send(AppendResponse(self.id, m.sender, self.term, True, last_new))
            return
        hint_index = self.log.find_conflict_by_term(m.prev_index, m.prev_term)
        hint_term = self.log.term_at(hint_index) or 0
        self._send(
            AppendResponse(self.id, m.sender, self.term, False, m.prev_index, hint_index, hint_term)
        )

    def _track_appended_configs(self, entries: tuple[Entry, ...]) -> None:
        """After a successful append the log holds exactly ``entries`` at their indexes, and
        nothing beyond the last of them if a conflicting suffix was cut."""
        self._configs.truncate_from(self.log.last_index() + 1)
        if entries:
            found = [
                (e.index, Membership.decode(e.data)) for e in entries if e.kind is EntryKind.CONFIG
            ]
            self._configs.replace_range(entries[0].index, entries[-1].index, found)

    def _maybe_finish_recovery(self, m: AppendRequest, last_new: int) -> None:
        """Become a full voter once this append proves we hold the leader's log up to its
        commit index, and that index is of the leader's own term (module docstring).

        A heartbeat never counts: its commit is bounded by the match the leader remembers,
        which may be the match of the incarnation that lost its store."""
        if m.commit < 1 or last_new < m.commit or self.log.term_at(m.commit) != m.term:
            return
        self.recovering = False
        self._recovery_done = True
        if self.voted_for is None:
            # Whatever this node voted in this term before it lost its store, the leader won
            # the term: recording it as our vote keeps us from electing a second leader in it.
            self.voted_for = m.sender

    def _handle_snapshot_chunk(self, m: SnapshotChunk) -> None:
        if m.index <= self.log.commit:
            self._incoming = None  # we hold everything it covers
            self._send(AppendResponse(self.id, m.sender, self.term, True, self.log.commit))
            return
        if self.log.term_at(m.index) == m.snapshot_term:
            # We hold the entry the snapshot ends with, so (log matching) all before it too.
            self._incoming = None
            self.log.commit_to(m.index)
            self._send(AppendResponse(self.id, m.sender, self.term, True, m.index))
            return
        key = (m.index, m.snapshot_term, m.checksum, m.total_bytes, m.voters)
        if m.offset == 0:
            self._incoming = _IncomingSnapshot(key)
        incoming = self._incoming
        if incoming is None or incoming.key != key or m.offset != incoming.received:
            expected = incoming.received if incoming is not None and incoming.key == key else 0
            self._send(SnapshotResponse(self.id, m.sender, self.term, m.index, expected))
            return
        incoming.chunks.append(m.data)
        incoming.received += len(m.data)
        if incoming.received < m.total_bytes:
            self._send(SnapshotResponse(self.id, m.sender, self.term, m.index, incoming.received))
            return
        self._incoming = None
        data = b"".join(incoming.chunks)
        if len(data) != m.total_bytes or snapshot_checksum(data) != m.checksum:
            self._send(SnapshotResponse(self.id, m.sender, self.term, m.index, 0))  # start over
            return
        self.log.restore(Snapshot(m.index, m.snapshot_term, tuple(m.voters), data))
        self._configs.restored(Membership.from_members(tuple(m.voters)), m.index)
        # Sent only after the driver installed the snapshot (the Ready's persist step).
        self._send(AppendResponse(self.id, m.sender, self.term, True, m.index))

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        self.log.commit_to(min(m.commit, self.log.last_index()))
        self._send(HeartbeatResponse(self.id, m.sender, self.term, m.read_seq))

    # -- pre-candidate and candidate ---------------------------------------------------------

    def _step_candidate(self, m: Message) -> None:
        if isinstance(m, AppendRequest | Heartbeat | SnapshotChunk):
            self._become_follower(self.term, m.sender)
            self._step_follower(m)
            return
        if not isinstance(m, VoteResponse):
            return
        pre_vote = self.role is Role.PRE_CANDIDATE
        if m.pre_vote != pre_vote:
            return
        if pre_vote and m.granted and m.term != self.term + 1:
            return  # a grant from an older pre-vote round
        self._votes.setdefault(m.sender, m.granted)
        result = quorum.vote_result(self._votes, self.membership.voters)
        if result is quorum.VoteResult.WON:
            if pre_vote:
                self._become_candidate()
                self._send_vote_requests(pre_vote=False)
            else:
                self._become_leader()
        elif result is quorum.VoteResult.LOST:
            self._become_follower(self.term, None)

    # -- leader ------------------------------------------------------------------------------

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self.config.election_ticks_min:
            self._election_elapsed = 0
            active = [self.id] + [p for p, pr in self._progress.items() if pr.recent_active]
            if not quorum.has_quorum(active, self.membership.voters):
                self._become_follower(self.term, None)  # check-quorum: we may be deposed
                return
            for pr in self._progress.values():
                pr.recent_active = False
        if self._heartbeat_elapsed >= self.config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat()

    def _step_leader(self, m: Message) -> None:
        if isinstance(m, AppendRequest | Heartbeat | SnapshotChunk):
            raise RaftInvariantError(
                f"two leaders in term {self.term}: {self.id!r} and {m.sender!r}"
            )
        pr = self._progress.get(m.sender)
        if pr is None:
            return
        if isinstance(m, AppendResponse):
            pr.recent_active = True
            self._handle_append_response(m.sender, pr, m)
        elif isinstance(m, HeartbeatResponse):
            pr.recent_active = True
            self._handle_heartbeat_response(m.sender, pr, m)
        elif isinstance(m, SnapshotResponse):
            pr.recent_active = True
            self._handle_snapshot_response(m.sender, pr, m)

    def _handle_snapshot_response(self, peer: str, pr: Progress, m: SnapshotResponse) -> None:
        snapshot = pr.snapshot
        if pr.state is not ProgressState.SNAPSHOT or snapshot is None:
            return  # stale: the transfer it answers is over
        if m.index != snapshot.index:
            return
        pr.snapshot_offset = min(m.next_offset, len(snapshot.data))
        pr.snapshot_sent = False
        self._send_append(peer)

    def _handle_append_response(self, peer: str, pr: Progress, m: AppendResponse) -> None:
        if pr.state is ProgressState.SNAPSHOT:
            # Only a success at or beyond the snapshot (it was installed, or not needed) ends
            # the transfer; anything else answers an append from before it.
            snapshot = pr.snapshot
            if m.success and snapshot is not None and m.index >= snapshot.index:
                pr.maybe_update(m.index)
                pr.become_replicate()
                pr.commit_sent = 0  # a snapshot carries no commit index
                self._maybe_commit()
                if pr.next > self.log.last_index():
                    # Nothing to append: say the commit index in an append at once (what ends a
                    # recovering follower's catch-up, module docstring) instead of a heartbeat
                    # round later.
                    self._send_empty_append(peer, pr)
                else:
                    self._send_append(peer)
            return
        if not m.success:
            probe_at = m.hint_index
            if m.hint_term > 0:
                probe_at = self.log.find_conflict_by_term(m.hint_index, m.hint_term)
            if (
                pr.state is ProgressState.PROBE
                and m.index == pr.next - 1
                and m.hint_index < pr.match
            ):
                # The answer to the current probe says the follower no longer holds entries it
                # acknowledged: its store was lost and recovered (or the answer is a stale
                # duplicate, and re-probing from the hint costs a few round trips, no safety).
                pr.forget_match(min(m.index, probe_at + 1))
                self._send_append(peer)
            elif pr.maybe_decrease(m.index, probe_at):
                self._send_append(peer)
            return
        if pr.maybe_update(m.index):
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            self._maybe_commit()
        elif pr.state is ProgressState.PROBE:
            pr.probe_sent = False
        self._send_append(peer)

    def _handle_heartbeat_response(self, peer: str, pr: Progress, m: HeartbeatResponse) -> None:
        if m.read_seq > pr.read_seq_acked:
            pr.read_seq_acked = m.read_seq
            self._release_reads()
        if pr.state is ProgressState.SNAPSHOT:
            pr.snapshot_sent = False  # a heartbeat round without an answer: resend the chunk
            self._send_append(peer)
            return
        if pr.match >= self.log.last_index():
            if pr.commit_sent < self.log.commit:
                # Caught up, but no append told it the current commit index: a heartbeat's
                # commit proves nothing to a follower recovering a lost store, an append does.
                self._send_empty_append(peer, pr)
            return
        if pr.state is ProgressState.PROBE:
            pr.probe_sent = False
        elif pr.match == pr.match_at_last_heartbeat:
            pr.become_probe()  # no progress for a whole heartbeat round: a batch was lost
        else:
            # The follower is alive but behind: an empty append at ``next`` costs little and,
            # if a batch was lost (or the follower restarted), is rejected at once, sending us
            # back to probing one round trip after the heartbeat instead of two heartbeats.
            self._send_empty_append(peer, pr)
        pr.match_at_last_heartbeat = pr.match
        self._send_append(peer)

    def _send_empty_append(self, peer: str, pr: Progress) -> None:
        prev_index = pr.next - 1
        if prev_index < self.log.snapshot_index:
            self._send_append(peer)  # compacted away: the follower needs the snapshot
            return
        prev_term = self.log.term_at(prev_index)
        if prev_term is None:
            raise RaftInvariantError(f"no term for {peer}'s prev_index {prev_index}")
        self._send(
            AppendRequest(self.id, peer, self.term, prev_index, prev_term, (), self.log.commit)
        )
        if prev_index >= self.log.commit:
            pr.commit_sent = max(pr.commit_sent, self.log.commit)

    def _flush_appends(self) -> None:
        if self._append_pending and self.role is Role.LEADER:
            # Members a pending change removes still hear of it (they learn why they stop).
            for peer in list(self._progress):
                self._send_append(peer)
        self._append_pending = False

    def _send_append(self, peer: str) -> None:
        """PROBE: one append, then wait. REPLICATE: stream batches until the follower is caught
        up or ``inflight_batches_max`` are unacknowledged."""
        while self._send_one_append(peer):
            pass

    def _send_one_append(self, peer: str) -> bool:
        """Send one append if the follower's progress allows it; True if another may follow."""
        pr = self._progress.get(peer)
        if pr is None:
            return False  # this leader stepped down (a committed removal) while answering
        if pr.state is ProgressState.SNAPSHOT:
            self._send_snapshot_chunk(peer, pr)
            return False
        if pr.next - 1 < self.log.snapshot_index:
            # The entries this follower needs next are compacted away (thesis §5.3).
            pr.become_snapshot(self._leader_snapshot())
            self._send_snapshot_chunk(peer, pr)
            return False
        if pr.state is ProgressState.PROBE and pr.probe_sent:
            return False
        if (
            pr.state is ProgressState.REPLICATE
            and len(pr.inflight) >= self.config.inflight_batches_max
        ):
            return False
        last = self.log.last_index()
        if pr.state is ProgressState.REPLICATE and pr.next > last:
            return False
        prev_index = pr.next - 1
        prev_term = self.log.term_at(prev_index)
        if prev_term is None:
            raise RaftInvariantError(f"no term for {peer}'s prev_index {prev_index}")
        entries = self.log.entries(
            pr.next,
            last + 1,
            entries_max=self.config.batch_entries_max,
            bytes_max=self.config.batch_bytes_max,
        )
        self._send(
            AppendRequest(
                self.id, peer, self.term, prev_index, prev_term, tuple(entries), self.log.commit
            )
        )
        last_sent = entries[-1].index if entries else prev_index
        pr.on_sent(last_sent)
        if last_sent >= self.log.commit:
            # Only an append that reaches the commit index can end a recovering follower's
            # catch-up (it must hold the leader's log up to it); one that stops short, e.g. a
            # resent older batch, does not count as having told it the commit index.
            pr.commit_sent = max(pr.commit_sent, self.log.commit)
        return pr.state is ProgressState.REPLICATE

    def _leader_snapshot(self) -> Snapshot:
        """The storage's checkpoint as a snapshot (reused while the checkpoint is the same)."""
        cached = self._snapshot_cache
        if cached is not None and cached.index == self._storage.snapshot_index_available():
            return cached
        index, term, data = self._storage.snapshot()
        if index < self.log.snapshot_index or self.log.term_at(index) != term:
            raise RaftInvariantError(
                f"storage snapshot at {index} (term {term}) does not continue the log "
                f"compacted to {self.log.snapshot_index} (term there {self.log.term_at(index)})"
            )
        members = self._configs.at(index).members()
        self._snapshot_cache = Snapshot(index, term, members, data)
        return self._snapshot_cache

    def _send_snapshot_chunk(self, peer: str, pr: Progress) -> None:
        snapshot = pr.snapshot
        if snapshot is None or pr.snapshot_sent:
            return
        start = pr.snapshot_offset
        chunk_bytes = min(self.config.snapshot_chunk_bytes, self.config.batch_bytes_max)
        data = snapshot.data[start : start + chunk_bytes]
        self._send(
            SnapshotChunk(
                self.id,
                peer,
                self.term,
                snapshot.index,
                snapshot.term,
                snapshot.voters,
                len(snapshot.data),
                snapshot.checksum,
                start,
                data,
            )
        )
        pr.snapshot_sent = True

    def _broadcast_heartbeat(self) -> None:
        for peer, pr in self._progress.items():
            self._send(
                Heartbeat(self.id, peer, self.term, min(pr.match, self.log.commit), self._read_seq)
            )

    def _maybe_commit(self) -> None:
        if self.role is not Role.LEADER:
            return
        voters = self.membership.voters
        # A leader outside the configuration it is moving to does not count itself (§4.2.2).
        matches = [self.log.stable_last] if self.id in voters else []
        matches += [pr.match for p, pr in self._progress.items() if p in voters]
        index = quorum.committed_index(matches)
        # Figure 3.7: only an entry of the current term is committed by counting replicas.
        if index > self.log.commit and self.log.term_at(index) == self.term:
            self.log.commit_to(index)
            if self._reads_waiting_barrier and self.log.commit >= self._term_start_index:
                waiting, self._reads_waiting_barrier = self._reads_waiting_barrier, []
                self._start_reads(waiting)
        if not self.config_change_pending:
            # The change committed: forget members it removed, hand over if it removed us.
            peers = self.peers
            for peer in [p for p in self._progress if p not in peers]:
                del self._progress[peer]
            if self._removing_self_done():
                self._hand_over()

    def _removing_self_done(self) -> bool:
        return not self.is_voter and not self.config_change_pending

    def _hand_over(self) -> None:
        """A committed configuration removed this leader: TimeoutNow to the most up-to-date
        voter left (thesis §3.10), then step down. The new voters elect a leader either way;
        the transfer only saves them an election timeout."""
        voters = [p for p in self.membership.voters if p in self._progress]
        if voters and not self._transfer_sent:
            target = max(voters, key=lambda p: (self._progress[p].match, p))
            # Only a voter holding our whole log may be told to campaign at once (it would win
            # over the voters still in our lease). Otherwise entries proposed after the removal
            # are still on their way: the voters elect a leader after their timeout instead.
            if self._progress[target].match >= self.log.last_index():
                self._send(TimeoutNow(self.id, target, self.term))
                self._transfer_sent = True
        self._become_follower(self.term, None)

    # -- ReadIndex (thesis §6.4) ----------------------------------------------------------------

    def _start_reads(self, request_ids: list[int]) -> None:
        if self.membership.voters == (self.id,):
            self._reads_ready.extend(ReadState(r, self.log.commit) for r in request_ids)
            return
        self._read_seq += 1
        self._reads_pending.extend((self._read_seq, r, self.log.commit) for r in request_ids)
        self._broadcast_heartbeat()

    def _release_reads(self) -> None:
        while self._reads_pending:
            seq, request_id, index = self._reads_pending[0]
            acked = [self.id] + [p for p, pr in self._progress.items() if pr.read_seq_acked >= seq]
            if not quorum.has_quorum(acked, self.membership.voters):
                return
            self._reads_pending.pop(0)
            self._reads_ready.append(ReadState(request_id, index))

    def _fail_reads(self) -> None:
        self._reads_failed.extend(self._reads_waiting_barrier)
        self._reads_failed.extend(r for _, r, _ in self._reads_pending)
        self._reads_waiting_barrier = []
        self._reads_pending = []

    # -- plumbing ------------------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        self._messages.append(message)

    def _check_no_outstanding_ready(self) -> None:
        if self._outstanding is not None:
            raise RaftUsageError("call advance() with the outstanding Ready before new input")
