"""The driver: runs a RaftNode and does its I/O, one thread at a time (thesis §10.2).

Theory of operation. Every input — a message from the transport, a proposal, a read barrier, a tick
of the monotonic clock — is handled by whichever thread holds the node's *turn* (a lock): only that
thread touches the node. A message, a proposal or a read barrier is handled on the thread that
brings it whenever the turn is free: a follower's append goes from the HTTP worker that read it
through its fsync and back into the response, an answer from the peer thread that read it to the
commit, a proposal from the proposer's thread onto the wire, none of them waking another thread
(each wake-up costs 0.05 to 0.3 ms, several times the work of a step). When the turn is taken, the
input waits in one bounded inbox; the driver thread takes inputs from it and wakes for ticks of a
monotonic clock (whichever thread holds the turn ticks the node when a tick is due, so time passes
for the node even while callers keep the turn busy). Group commit is kept: what queues while one
thread holds the turn is handled together by the next. Whoever holds the turn first drains what is
queued (up to ``drain_max`` inputs, so what came first is handled first), then handles its own
input, then runs the Ready cycle: persist everything in the Ready with ONE ``storage.persist`` call
(group commit: all proposals and acknowledgements gathered since the last cycle share one fsync),
then (when the Ready says the node finished recovering a lost store) clear the storage's recovering
flag in one more durable step, then hand messages to the transport, then apply committed entries in
index order through the apply hook, then ``advance``. Callers on other threads get
``concurrent.futures.Future`` objects.

One exception to "persist, then send" (thesis §10.2.1, the rule in ``send_order.py``, shared with
the simulator): a leader's Ready whose messages are all its own appends and heartbeats, with no
hard-state change and no truncation to persist, is sent BEFORE the persist, so the followers'
fsyncs overlap the leader's own. The leader counts its own copy towards a commit only from
``advance`` on (``RaftNode._maybe_commit`` counts ``stable_last``). Votes, append
acknowledgements and anything in a Ready that changes the hard state still leave only after the
fsync.

Answers can ride back on the request that caused them (``reply_slot.py``): a message delivered
with a ``ReplySlot`` registers it for its sender; the first answer (vote, append or heartbeat
response) to that sender that this driver would send — at the usual point, after the fsync — is
offered to the slot instead; every slot still open at the end of the cycle is closed.

A proposal's future resolves with the apply hook's result when an entry with the proposal's
``(term, index)`` is applied, or fails with ``ProposalLost`` when that index is applied with
another term (the leader was deposed before it committed). A read barrier's future resolves with
the read index once ``applied >= read index``, or fails with ``NotLeader``.

Log compaction (``compaction``, a ``CompactionPolicy``): whoever holds the turn checks the
policy once per tick; when it says so, the node forgets the entries up to the chosen index and
``storage.compact`` records that in one small durable commit; the rows are deleted afterwards by
the ``Reclaimer`` thread in small chunks, so no commit waits behind a large deletion. A Ready that
carries a leader's snapshot is installed before anything else of it is persisted: ``restore``
(the application's hook) is called with the snapshot and a function that installs it in the
storage (checkpoint and whole log replaced in one transaction); the hook finishes whatever it
still writes for older indexes, calls that function, and reloads its state from the snapshot.

Anything unexpected on the driver thread (a ``RaftInvariantError``, a storage failure, an apply
hook that raises) is fatal: the driver stops, fails every waiting future with ``DriverStopped``,
records the cause in ``fatal`` and calls ``on_fatal`` — the process should exit, not limp on. The
same holds when it happens on a thread that was handling a message inline.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from appliance.raft.compaction import CompactionPolicy
from appliance.raft.errors import NotLeader, ProposalRefused, RaftError, ReadRefused
from appliance.raft.inbox import Inbox
from appliance.raft.membership import Membership
from appliance.raft.messages import EntryKind, Message
from appliance.raft.node import RaftNode, Ready, Role, SoftState
from appliance.raft.reclaimer import Reclaimer
from appliance.raft.reply_slot import ANSWER_KINDS, ReplySlot
from appliance.raft.send_order import may_send_before_persist
from appliance.raft.snapshot import Snapshot
from appliance.raft.storage import LogStorage

log = logging.getLogger(__name__)

# How many more drain-and-cycle rounds a thread holding the turn runs for inputs that queued
# while it worked, before it hands them to the driver thread.
REDRAIN_ROUNDS_MAX = 4

ApplyHook = Callable[[int, bytes], Any]  # (index, command) -> result for the proposer
# (snapshot, install): finish older writes, call install(), reload the state from the snapshot
RestoreHook = Callable[[Snapshot, Callable[[], None]], None]


class Transport(Protocol):
    def send(self, message: Message) -> None:
        """Queue ``message`` for its recipient; never blocks, may drop (Raft tolerates loss)."""


class ProposalLost(RaftError):
    """The proposal's index was committed with another entry: it will never apply."""


class DriverStopped(RaftError):
    """The driver is not running (stopped, or stopped by a fatal error)."""


class Overloaded(RaftError):
    """The driver's inbox is full; try again later."""


@dataclass(frozen=True)
class NodeStatus:
    node_id: str
    role: str
    term: int
    leader_id: str | None
    commit_index: int
    applied_index: int
    last_log_index: int
    recovering: bool = False  # a recovered store still catching up: no votes, no campaigns
    snapshot_index: int = 0  # the log holds entries from snapshot_index + 1 on
    snapshot_term: int = 0
    compactions: int = 0  # since start
    snapshots_installed: int = 0  # since start
    snapshot_at_s: float | None = None  # monotonic time of the last compaction or install
    # The configuration in force (membership.py): voters, learners, run-time addresses; the
    # index of its CONFIG entry (0: genesis), whether that entry is still uncommitted, and
    # this node's place in it in words (why a learner or a removed node does not vote).
    configuration: dict[str, Any] | None = None
    config_index: int = 0
    config_change_pending: bool = False
    member_status: str = ""

    def as_dict(self) -> dict[str, Any]:
        configuration = self.configuration
        return {
            # a copy: the driver shares one configuration dict between its snapshots
            "configuration": None
            if configuration is None
            else {
                k: v.copy() if isinstance(v, list | dict) else v for k, v in configuration.items()
            },
            "config_index": self.config_index,
            "config_change_pending": self.config_change_pending,
            "member_status": self.member_status,
            "node_id": self.node_id,
            "role": self.role,
            "term": self.term,
            "leader_id": self.leader_id,
            "commit_index": self.commit_index,
            "applied_index": self.applied_index,
            "last_log_index": self.last_log_index,
            "recovering": self.recovering,
            "snapshot_index": self.snapshot_index,
            "snapshot_term": self.snapshot_term,
            "log_first_index": self.snapshot_index + 1 if self.snapshot_index else None,
            "compactions": self.compactions,
            "snapshots_installed": self.snapshots_installed,
            "snapshot_age_s": (
                None if self.snapshot_at_s is None else time.monotonic() - self.snapshot_at_s
            ),
        }


# Where ``configuration_and_term`` finds its two fields in the status tuple (``NodeStatus``'s
# order, built by ``RaftDriver._snapshot``).
_FIELDS = [f.name for f in dataclasses.fields(NodeStatus)]
_TERM_FIELD = _FIELDS.index("term")
_CONFIGURATION_FIELD = _FIELDS.index("configuration")


class RaftDriver:
    def __init__(
        self,
        node: RaftNode,
        storage: LogStorage,
        transport: Transport,
        apply: ApplyHook,
        *,
        tick_ms: int = 100,
        inbox_max: int = 8192,
        drain_max: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        on_fatal: Callable[[BaseException], None] | None = None,
        campaign_at_start: bool = False,
        peer_gone: Callable[[str], bool] | None = None,
        compaction: CompactionPolicy | None = None,
        restore: RestoreHook | None = None,
    ) -> None:
        if tick_ms < 1:
            raise ValueError("tick_ms must be positive")
        self._node = node
        self._storage = storage
        self._transport = transport
        self._apply = apply
        self._tick_s = tick_ms / 1000
        self._drain_max = drain_max
        self._clock = clock
        self._on_fatal = on_fatal
        self._campaign_at_start = campaign_at_start
        self._peer_gone = peer_gone  # a follower asks it about its leader once per tick
        self._compaction = compaction
        self._restore = restore
        self.compactions = 0
        self.snapshots_installed = 0
        self._snapshot_at_s: float | None = None
        reclaim = getattr(storage, "reclaim", None)
        self.reclaimer = (
            Reclaimer(storage, name=f"raft-reclaim-{node.id}")  # type: ignore[arg-type]
            if compaction is not None and reclaim is not None
            else None
        )
        self._inbox = Inbox(inbox_max)
        self._proposals: dict[int, tuple[int, Future[Any]]] = {}  # index -> (term, future)
        self._reads: dict[int, Future[int]] = {}  # request id -> future
        self._reads_ready: list[tuple[int, Future[int]]] = []  # (read index, future)
        self._next_read_id = 0
        self._subscribers: list[Callable[[SoftState], None]] = []
        self._reply_slots: dict[str, list[ReplySlot]] = {}  # peer -> slots open this cycle
        self._turn = threading.Lock()  # held by the one thread that is running the node
        self._next_tick = float("inf")  # when the next tick is due; set by start()
        self._lock = threading.Lock()  # guards _status and the first fatal
        self._synced_membership: Membership | None = None
        self._member_status = ""
        self._membership_cache: tuple[Any, ...] | None = None  # see _membership_view
        self._status = self._snapshot()
        self._soft = SoftState(node.role, node.term, node.leader_id)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fatal: BaseException | None = None
        self.dropped_inbound = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("driver already started")
        self._next_tick = self._clock() + self._tick_s
        if self.reclaimer is not None:
            self.reclaimer.start()
        self._thread = threading.Thread(target=self._run, name=f"raft-{self._node.id}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._inbox_put(("wake",), force=True)
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.reclaimer is not None:
            self.reclaimer.stop(timeout_s)  # before the caller closes the store

    # -- thread-safe API ---------------------------------------------------------------------

    def deliver(self, message: Message, reply: ReplySlot | None = None) -> None:
        """Hand an inbound message to the node (dropped, and counted, if the inbox is full).

        With ``reply``, the node's answer to the sender may come back through that slot. When no
        other thread is running the node, the message is handled — and the Ready cycle run, fsync
        included — on the caller's thread before this returns."""
        item = ("message", message, reply)
        if self._handle_inline(item):
            return
        if not self._inbox_put(item):
            self.dropped_inbound += 1
            if reply is not None:
                reply.close()

    def propose(self, command: bytes) -> Future[Any]:
        """Resolves with the apply hook's result once ``command`` is committed and applied.

        When no other thread is running the node, the entry is appended, sent and made durable
        on the caller's thread before this returns."""
        future: Future[Any] = Future()
        item = ("propose", bytes(command), future)
        if not self._handle_inline(item) and not self._inbox_put(item):
            future.set_exception(Overloaded("raft inbox full"))
        return future

    def read_barrier(self) -> Future[int]:
        """Resolves with an index once this node, still leader, has applied up to it."""
        future: Future[int] = Future()
        item = ("read", future)
        if not self._handle_inline(item) and not self._inbox_put(item):
            future.set_exception(Overloaded("raft inbox full"))
        return future

    # -- membership change (node.py, membership.py; docs/raft.md "Membership change") ----------

    def add_learner(self, node_id: str, address: str) -> Future[Any]:
        """Leader only: add ``node_id`` (its cluster listener at ``address``, host:port) as a
        learner. Resolves once the CONFIG entry is committed; fails with ``NotLeader`` or
        ``ProposalRefused`` (a change in flight, already a member, a bad address)."""
        return self._config_item("add_learner", node_id, address)

    def promote(self, node_id: str) -> Future[Any]:
        """Leader only: make the learner ``node_id`` a voter; refused until it caught up."""
        return self._config_item("promote", node_id, None)

    def remove(self, node_id: str) -> Future[Any]:
        """Leader only: remove a voter (this leader included: it hands over once the entry is
        committed) or a learner."""
        return self._config_item("remove", node_id, None)

    def _config_item(self, op: str, node_id: str, address: str | None) -> Future[Any]:
        future: Future[Any] = Future()
        item = ("config", op, node_id, address, future)
        if not self._handle_inline(item) and not self._inbox_put(item):
            future.set_exception(Overloaded("raft inbox full"))
        return future

    def subscribe(self, callback: Callable[[SoftState], None]) -> None:
        """Call ``callback(soft_state)`` at every role/term/leader change, on the thread that is
        running the node then (one at a time, in order).

        The callback must not block; it receives the current state once at registration."""
        self._inbox_put(("subscribe", callback), force=True)

    def status(self) -> NodeStatus:
        with self._lock:
            fields = self._status
        return NodeStatus(*fields)

    def configuration_and_term(self) -> tuple[dict[str, Any] | None, int]:
        """The configuration in force (one dict per configuration, shared, never changed) and
        the current term, as of the last cycle, without building a ``NodeStatus``: the cluster
        listener asks on every message it takes (who may speak, issue 36)."""
        with self._lock:
            fields = self._status
        return fields[_CONFIGURATION_FIELD], fields[_TERM_FIELD]

    # -- the driver thread ---------------------------------------------------------------------

    def _inbox_put(self, item: tuple[Any, ...], *, force: bool = False) -> bool:
        """Queue ``item`` for the turn's holder; False when the inbox is full.

        The driver thread is woken only when nobody holds the turn: a holder looks at the inbox
        after its cycle (``_cycle_until_quiet``) and again after releasing the turn
        (``_release_turn``), so an input queued behind it — the second follower's answer during
        the first one's commit, typically — is handled without a thread wake-up. (Queued, then
        the turn seen held: the holder's look after its release comes later and finds it.
        Seen free: we wake the driver thread ourselves.)"""
        if self._stop.is_set() and item[0] != "wake":
            self._refuse(item)
            return True
        if not self._inbox.put(item, force=force, wake=False):
            return False
        if force or not self._turn.locked():
            self._inbox.wake()
        return True

    def _release_turn(self) -> None:
        """Release the turn; wake the driver thread for what queued after the holder's last
        look (see ``_inbox_put``)."""
        self._turn.release()
        if self._inbox:
            self._inbox.wake()

    def _refuse(self, item: tuple[Any, ...]) -> None:
        """Fail the future (or release the reply slot) of an input the stopped driver won't run."""
        for x in item:
            if isinstance(x, Future) and not x.done():
                x.set_exception(DriverStopped(str(self.fatal or "driver stopped")))
            elif isinstance(x, ReplySlot):
                x.close()

    def _handle_inline(self, item: tuple[Any, ...]) -> bool:
        """Handle ``item`` and run the cycle on this thread if the turn is free; False if not."""
        if self._thread is None or self._stop.is_set() or not self._turn.acquire(blocking=False):
            return False
        failure: BaseException | None = None
        try:
            if self._stop.is_set():  # stopped between the check and the acquire
                return False
            self._drain(self._drain_max - 1)  # what was queued first is handled first
            self._handle(item)
            self._tick_when_due()
            self._cycle_until_quiet()
        except BaseException as exc:  # same rule as on the driver thread
            failure = exc
        finally:
            self._release_turn()
        if failure is not None:
            self._die(failure)  # outside the turn: on_fatal may stop and join the driver thread
        return True

    def _drain(self, limit: int) -> None:
        for item in self._inbox.take(limit):
            self._handle(item)

    def _cycle_until_quiet(self) -> None:
        """Run the cycle, then again for what queued during it (an answer that arrived during
        the fsync commits now, not after another thread's wake-up), a bounded number of times
        so an inline caller gets back to its own work."""
        self._cycle()
        for _ in range(REDRAIN_ROUNDS_MAX):
            if not self._inbox:
                return
            self._drain(self._drain_max)
            self._cycle()

    def _run(self) -> None:
        try:
            with self._turn:
                if self._campaign_at_start:
                    self._node.campaign()
            while not self._stop.is_set():
                # Read without the turn: a stale deadline only makes this wait end early.
                self._inbox.wait(max(0.0, self._next_tick - self._clock()))
                with self._turn:
                    if self._stop.is_set():  # stopped (or failed inline) while we waited
                        break
                    self._drain(self._drain_max)
                    self._tick_when_due()
                    self._cycle_until_quiet()
        except BaseException as exc:  # anything escaping the loop must stop the node
            self._die(exc)
        else:
            if self.fatal is None:
                with self._turn:
                    self._fail_all(DriverStopped("driver stopped"))

    def _tick_when_due(self) -> None:
        """Tick for the time that has passed, whichever thread holds the turn: time passes for
        the node even while inline callers keep the driver thread from getting the turn."""
        self._next_tick = self._tick_if_due(self._next_tick)

    def _tick_if_due(self, next_tick: float) -> float:
        """Tick the node for the time that has passed; returns when the next tick is due."""
        now = self._clock()
        if now >= next_tick:
            self._check_leader_alive()
        ticks = 0
        # A stall is real elapsed time: tick for it, but never more than an election's worth
        # at once, and do not try to "catch up" beyond that.
        while now >= next_tick and ticks <= self._node.config.election_ticks_max:
            self._node.tick()
            next_tick += self._tick_s
            ticks += 1
        if now >= next_tick:
            next_tick = now + self._tick_s
        if ticks:
            self._maybe_compact()
        return next_tick

    def _maybe_compact(self) -> None:
        policy, node, storage = self._compaction, self._node, self._storage
        if policy is None or node.log.pending_snapshot is not None:
            return
        checkpoint = min(storage.snapshot_index_available(), node.applied_index)
        target = policy.compact_to(
            snapshot_index=node.log.snapshot_index,
            checkpoint_index=checkpoint,
            log_bytes=storage.log_bytes(),
        )
        if not target:
            return
        term = node.compact(target)
        storage.compact(target, term, node.membership_at(target).members())
        self.compactions += 1
        self._snapshot_at_s = time.monotonic()
        if self.reclaimer is not None:
            self.reclaimer.poke()
        log.info(
            "raft %s compacted its log up to %d (term %d; checkpoint at %d)",
            node.id,
            target,
            term,
            checkpoint,
        )

    def _check_leader_alive(self) -> None:
        node = self._node
        leader = node.leader_id
        if self._peer_gone is None or node.role is not Role.FOLLOWER or leader is None:
            return
        if self._peer_gone(leader):
            log.warning(
                "raft %s: leader %s's cluster port refuses connections (its process is gone): "
                "campaigning early (term %d)",
                node.id,
                leader,
                node.term,
            )
            node.leader_gone(leader)

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "message":
            self._node.step(item[1])
            if item[2] is not None:
                self._reply_slots.setdefault(item[1].sender, []).append(item[2])
        elif kind == "propose":
            self._propose(item[1], item[2])
        elif kind == "read":
            self._read(item[1])
        elif kind == "config":
            self._change_config(item[1], item[2], item[3], item[4])
        elif kind == "subscribe":
            self._subscribers.append(item[1])
            item[1](self._soft)

    def _propose(self, command: bytes, future: Future[Any]) -> None:
        try:
            term, index = self._node.propose(command)
        except (NotLeader, ProposalRefused) as exc:
            future.set_exception(exc)
            return
        previous = self._proposals.pop(index, None)
        if previous is not None:
            previous[1].set_exception(ProposalLost(f"index {index} was overwritten"))
        self._proposals[index] = (term, future)

    def _change_config(
        self, op: str, node_id: str, address: str | None, future: Future[Any]
    ) -> None:
        node = self._node
        try:
            if op == "add_learner":
                term, index = node.add_learner(node_id, address)
            elif op == "promote":
                term, index = node.promote(node_id)
            else:
                term, index = node.remove(node_id)
        except (NotLeader, ProposalRefused) as exc:
            future.set_exception(exc)
            return
        log.warning(
            "raft %s proposed configuration %s at index %d (%s %s)",
            node.id,
            node.membership.as_dict(),
            index,
            op,
            node_id,
        )
        self._proposals[index] = (term, future)

    def _sync_peers(self) -> None:
        """Give the transport the address of every member the configuration in force names,
        and stop the pipelines to members a committed change removed; log this node's own
        place when it changes (a removed voter says why it stopped voting)."""
        node = self._node
        membership = node.membership
        if membership == self._synced_membership and not node.config_change_pending:
            return
        add_peer = getattr(self._transport, "add_peer", None)
        remove_peer = getattr(self._transport, "remove_peer", None)
        if add_peer is not None:
            for peer, address in membership.addresses:
                if peer != node.id:
                    add_peer(peer, address)
        if remove_peer is not None and not node.config_change_pending:
            previous = self._synced_membership
            gone = (
                []
                if previous is None
                else [
                    p for p in previous.everyone() if not membership.is_member(p) and p != node.id
                ]
            )
            for peer in gone:
                remove_peer(peer)
        if node.member_status() != self._member_status:
            self._member_status = node.member_status()
            level = logging.INFO if node.is_voter else logging.WARNING
            log.log(level, "raft %s is a %s", node.id, self._member_status)
        if not node.config_change_pending:
            self._synced_membership = membership

    def _read(self, future: Future[int]) -> None:
        self._next_read_id += 1
        try:
            self._node.read_index(self._next_read_id)
        except (NotLeader, ReadRefused) as exc:
            future.set_exception(exc)
            return
        self._reads[self._next_read_id] = future

    def _cycle(self) -> None:
        node = self._node
        while node.has_ready():
            ready = node.ready()
            send_first = may_send_before_persist(ready)
            if send_first:
                for message in ready.messages:
                    self._send(message)
            if ready.snapshot is not None:
                self._install(ready.snapshot)
            if ready.must_persist:
                self._storage.persist(
                    term=ready.hard_state.term,
                    voted_for=ready.hard_state.voted_for,
                    truncate_from=ready.truncate_from,
                    entries=ready.stored_entries(),
                )
            if ready.recovered:
                # Durable before any message of this Ready (a vote among them) leaves.
                self._storage.clear_recovering()
                log.warning(
                    "raft %s caught up after recovering a lost store: a full voter again "
                    "(term %d, commit %d)",
                    node.id,
                    node.term,
                    node.commit_index,
                )
            if not send_first:
                for message in ready.messages:
                    self._send(message)
            self._apply_committed(ready)
            for read in ready.reads:
                future = self._reads.pop(read.request_id, None)
                if future is not None:
                    self._reads_ready.append((read.index, future))
            for request_id in ready.reads_failed:
                future = self._reads.pop(request_id, None)
                if future is not None:
                    future.set_exception(NotLeader(node.leader_id))
            node.advance(ready)
            self._publish(ready.soft_state)
        self._release_reads()
        self._close_reply_slots()
        self._sync_peers()
        with self._lock:
            self._status = self._snapshot()

    def _install(self, snapshot: Snapshot) -> None:
        """Install a leader's snapshot (checkpoint and log replaced at once), then let the
        application reload its state from it."""

        def install() -> None:
            self._storage.install_snapshot(snapshot)

        if self._restore is None:
            install()
        else:
            self._restore(snapshot, install)
        self.snapshots_installed += 1
        self._snapshot_at_s = time.monotonic()
        log.warning(
            "raft %s installed a snapshot from its leader at index %d (term %d, %d bytes): it "
            "was behind the leader's compacted log",
            self._node.id,
            snapshot.index,
            snapshot.term,
            len(snapshot.data),
        )

    def _send(self, message: Message) -> None:
        if isinstance(message, ANSWER_KINDS):
            slots = self._reply_slots.get(message.to)
            while slots:
                if slots.pop(0).offer(message):
                    return
        self._transport.send(message)

    def _close_reply_slots(self) -> None:
        for slots in self._reply_slots.values():
            for slot in slots:
                slot.close()
        self._reply_slots.clear()

    def _apply_committed(self, ready: Ready) -> None:
        for entry in ready.committed:
            result = None
            if entry.kind is EntryKind.NORMAL:
                result = self._apply(entry.index, entry.data)
            waiting = self._proposals.pop(entry.index, None)
            if waiting is None:
                continue
            term, future = waiting
            if term == entry.term:
                future.set_result(result)
            else:
                future.set_exception(ProposalLost(f"index {entry.index} committed another entry"))

    def _release_reads(self) -> None:
        applied = self._node.applied_index
        still = []
        for index, future in self._reads_ready:
            if index <= applied:
                future.set_result(index)
            else:
                still.append((index, future))
        self._reads_ready = still

    def _publish(self, soft: SoftState) -> None:
        if soft == self._soft:
            return
        self._soft = soft
        for callback in self._subscribers:
            callback(soft)

    def _membership_view(self) -> tuple[dict[str, Any], str]:
        """The configuration as a dict and this node's place in it, rebuilt only when the
        configuration in force, its index or the committed one changes (not once per cycle)."""
        node = self._node
        latest, index = node.membership, node.config_index
        committed = node.membership_at(node.commit_index)
        cached = self._membership_cache
        if (
            cached is None
            or cached[0] is not latest
            or cached[1] != index
            or cached[2] is not committed
        ):
            cached = self._membership_cache = (
                latest,
                index,
                committed,
                (latest.as_dict(), node.member_status()),
            )
        return cached[3]

    def _snapshot(self) -> tuple[Any, ...]:
        """The status fields as of now, as a plain tuple (``NodeStatus``'s order): taken after
        every cycle, so it stays cheap; ``status()`` builds the ``NodeStatus`` when asked."""
        node = self._node
        log_ = node.log
        configuration, member_status = self._membership_view()
        return (
            node.id,
            node.role.value,
            node.term,
            node.leader_id,
            log_.commit,
            log_.applied,
            log_.last_index(),
            node.recovering,
            log_.snapshot_index,
            log_.snapshot_term,
            self.compactions,
            self.snapshots_installed,
            self._snapshot_at_s,
            configuration,
            node.config_index,
            node.config_change_pending,
            member_status,
        )

    def _die(self, exc: BaseException) -> None:
        with self._lock:  # two threads may fail at once; the first failure is the cause
            if self.fatal is not None:
                log.error(
                    "raft driver of %s: another failure after stopping: %r", self._node.id, exc
                )
                return
            self.fatal = exc
        self._stop.set()
        log.critical("raft driver of %s stopped: %r", self._node.id, exc)
        with self._turn:  # a thread still inside a cycle finishes it first
            self._fail_all(DriverStopped(f"raft driver stopped: {exc!r}"))
        if self._on_fatal is not None:
            self._on_fatal(exc)

    def _fail_all(self, exc: RaftError) -> None:
        for _, future in self._proposals.values():
            if not future.done():
                future.set_exception(exc)
        for future in self._reads.values():
            if not future.done():
                future.set_exception(exc)
        for _, future in self._reads_ready:
            if not future.done():
                future.set_exception(exc)
        self._proposals.clear()
        self._reads.clear()
        self._reads_ready.clear()
        self._close_reply_slots()
        while items := self._inbox.take(self._drain_max):
            for item in items:
                for x in item:
                    if isinstance(x, Future) and not x.done():
                        x.set_exception(exc)
                    elif isinstance(x, ReplySlot):
                        x.close()
