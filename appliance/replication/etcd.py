"""Replication through etcd: the runner's log and leadership kept in an etcd cluster.

Theory of operation
-------------------
etcd already is a replicated, linearizable key-value store; we use it as the log and as the
election, and keep everything else (apply, checkpoint, ownership epoch) exactly as with the
built-in Raft. Under a ``prefix``:

- ``<prefix>/log/<20-digit index>`` holds command N (index from 1, dense). The value is an
  envelope ``<proposal id>\\n<command bytes>``; only the command reaches the apply hook, the
  proposal id lets the proposer recognise its own entry without trusting the index it guessed.
- ``<prefix>/leader`` holds the leader's node id, attached to its lease. Campaign: grant a lease,
  then a txn "if ``leader`` does not exist (create_revision == 0), put it with my lease". The key's
  ``create_revision`` is unique to one tenure and serves as the Raft-like *term*.

Appending (only while leading). One appender thread takes waiting proposals in batches and
writes them in ONE txn whose guard is: ``leader``'s create_revision is still mine, ``log/N`` does
not exist, and ``log/N-1`` does exist. So the log has no gap, no duplicate index, and a deposed
leader's append fails — once another tenure's key exists the comparison can never hold again,
even for a process that was paused for an hour and wakes up with a txn half-built.

Leadership ends IMMEDIATELY for the local process when its lease may have expired: the leader
tracks a deadline on the monotonic clock, ``send time of the last successful keepalive + TTL``
(taken before sending, so it is never later than etcd's own expiry). ``is_leader()`` compares
with it on every call and the appender checks it before every txn, so a process paused past its
lease refuses work on waking even before its elector thread runs. The elector steps down (and
notifies subscribers) when the deadline passes, when a keepalive says the lease is gone, or when
the ``leader`` key no longer carries its tenure.

Delivery. A follower thread applies the log in index order on every member: a linearizable range
from ``applied_index + 1`` to the end (paged), then a watch from the range's revision + 1. A
broken, idle or compacted watch is never trusted to resume by itself: the follower re-reads by
range from its applied index (keys, unlike history, are never compacted) and re-watches. Any
gap between the applied index and an event makes it re-read too.

``propose`` returns the apply hook's result once the entry is applied locally; ``read_barrier``
is a linearizable txn reading ``leader`` and the last log key, then waits for the local apply to
reach that index and re-checks the lease deadline. Neither sees the ownership epoch: that still
comes from the runner's committed AcquireOwnership command in this log.

Compaction (``etcd_snapshot``; docs/etcd.md). The leader's own thread snapshots its durable
checkpoint into etcd when ``snapshot_entries`` are due and, in the same txn that publishes it,
deletes the log keys below ``index - trailing_entries + 1``, then asks etcd to compact its
history. A member whose applied index + 1 is below the first kept key installs that snapshot
into its store (through the machine's ``restore``) before it reads the log by range again.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol

from appliance.replication.base import ApplyHook, Leadership
from appliance.replication.errors import (
    NotLeader,
    Overloaded,
    ProposalRefused,
    ReplicationStopped,
)
from appliance.replication.etcd_gateway import (
    Compare,
    EtcdAmbiguous,
    EtcdError,
    EtcdGateway,
    KeyValue,
    prefix_end,
    put_op,
    range_op,
)
from appliance.replication.etcd_snapshot import (
    CHUNK_BYTES,
    EtcdSnapshot,
    SnapshotInvalid,
    SnapshotKeys,
    SnapshotMeta,
    SnapshotMoved,
    compact_history,
    read_meta,
    read_snapshot,
    write_snapshot,
)
from appliance.replication.etcd_watch import WatchBroken, WatchStream
from appliance.store.snapshot_format import encode_parts

log = logging.getLogger("appliance.replication.etcd")

INDEX_DIGITS = 20
PROPOSALS_WAITING_MAX = 1024
BATCH_ENTRIES_MAX = 64  # etcd's default --max-txn-ops is 128 (puts + compares)
BATCH_BYTES_MAX = 1024 * 1024  # base64 grows it by 4/3: stays under etcd's 1.5 MiB request cap
COMMAND_BYTES_MAX = 1024 * 1024
CATCH_UP_PAGE_ENTRIES = 256
RETRY_PAUSE_S = 0.1


class EtcdFatal(RuntimeError):
    """The log in etcd breaks an invariant (a gap, a malformed key): stop, do not limp on."""


class _Behind(Exception):
    """The next log key is gone: the log was compacted past the applied index."""


class SnapshotStore(Protocol):
    """What the etcd backend needs of the runner store (``RunnerStore`` has all three)."""

    def applied_index(self) -> int: ...

    def load_checkpoint(self) -> tuple[int, dict[str, bytes]]: ...

    def install_snapshot(self, snapshot: Any) -> None: ...


RestoreHook = Callable[[EtcdSnapshot, Callable[[], None]], None]


@dataclass(frozen=True)
class EtcdSettings:
    endpoints: tuple[str, ...]
    prefix: str
    lease_ttl_seconds: int = 5
    auth: tuple[str, str] | None = None
    request_timeout_ms: int = 2_000
    observe_interval_ms: int = 200  # how often a non-leader looks at the leader key
    watch_idle_timeout_s: float = 5.0
    # Compaction (docs/etcd.md, "Snapshots and compaction"); snapshot_entries 0 turns it off.
    snapshot_entries: int = 0
    trailing_entries: int = 5_000
    snapshot_bytes: int = 64 * 1024 * 1024  # also due when the kept log holds this many bytes
    compaction_check_interval_s: float = 1.0
    contract_digest: str = ""


@dataclass
class _Tenure:
    lease_id: int
    create_revision: int
    deadline_s: float  # monotonic: after it, the lease may have expired in etcd


@dataclass
class _Proposal:
    proposal_id: bytes
    command: bytes
    future: Future[Any]


def index_key(prefix: bytes, index: int) -> bytes:
    return prefix + b"/log/" + str(index).zfill(INDEX_DIGITS).encode()


class EtcdReplication:
    def __init__(
        self,
        *,
        node_id: str,
        settings: EtcdSettings,
        apply: ApplyHook,
        applied_index: int = 0,
        on_fatal: Callable[[BaseException], None] | None = None,
        gateway: EtcdGateway | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        store: SnapshotStore | None = None,
        restore: RestoreHook | None = None,
    ) -> None:
        self.node_id = node_id
        self.settings = settings
        self.gateway = gateway or EtcdGateway(
            settings.endpoints, auth=settings.auth, request_timeout_ms=settings.request_timeout_ms
        )
        self._apply = apply
        self._on_fatal = on_fatal
        self._monotonic = monotonic
        prefix = settings.prefix.encode()
        self._log_prefix = prefix + b"/log/"
        self._leader_key = prefix + b"/leader"
        self._prefix = prefix
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._started = False
        self._applied_index = applied_index
        self._last_index_seen = applied_index
        self._tenure: _Tenure | None = None
        self._next_index = 0
        self._leadership = Leadership(False, 0, None)
        self._subscribers: list[Callable[[Leadership], None]] = []
        self._pending: deque[_Proposal] = deque()
        self._waiters: dict[bytes, _Proposal] = {}
        self._ids = itertools.count(1)
        self._incarnation = secrets.token_hex(6)  # proposal ids never repeat across restarts
        self._watch: WatchStream | None = None
        self._store = store
        self._restore = restore
        self._snap_keys = SnapshotKeys(prefix)
        self._snapshot: SnapshotMeta | None = None  # the last one read or written
        self._snapshots_written = 0
        self._snapshots_installed = 0
        self._compact_revision = 0
        # (index, bytes) of the entries this member applied at or above the first kept key: the
        # byte trigger (counted from this process's start; a restarted leader under-counts).
        self._sizes: deque[tuple[int, int]] = deque()
        self._sizes_bytes = 0
        self._threads = [
            threading.Thread(target=self._guard(self._follow), name=f"etcd-follow-{node_id}"),
            threading.Thread(target=self._guard(self._campaign), name=f"etcd-elect-{node_id}"),
            threading.Thread(target=self._guard(self._append), name=f"etcd-append-{node_id}"),
        ]
        if store is not None and settings.snapshot_entries > 0:
            self._threads.append(
                threading.Thread(target=self._guard(self._compact), name=f"etcd-compact-{node_id}")
            )
        for thread in self._threads:
            thread.daemon = True

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._started = True
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        watch = self._watch
        if watch is not None:
            watch.close()
        with self._cond:
            tenure, self._tenure = self._tenure, None
            doomed = list(self._pending) + list(self._waiters.values())
            self._pending.clear()
            self._waiters.clear()
            self._cond.notify_all()
        for proposal in doomed:
            _fail(proposal.future, ReplicationStopped("the etcd replication stopped"))
        if tenure is not None:
            self._revoke(tenure)  # hand over at once instead of after the TTL
        if self._started:
            for thread in self._threads:
                # A fatal error can stop it before start() has started every thread.
                if thread is not threading.current_thread() and thread.ident is not None:
                    thread.join(timeout=self.settings.request_timeout_ms / 1000 * 3)
        self.gateway.close()

    def _guard(self, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as exc:
                if self._stopped.is_set():
                    return
                log.exception("etcd replication thread failed")
                if self._on_fatal is not None:
                    self._on_fatal(exc)
                threading.Thread(target=self.stop, daemon=True).start()

        return run

    # ---- the Replication interface -------------------------------------------------------------

    def is_leader(self) -> bool:
        tenure = self._tenure
        return tenure is not None and self._monotonic() < tenure.deadline_s

    def propose(self, command: bytes, *, timeout_s: float) -> Any:
        if self._stopped.is_set():
            raise ReplicationStopped("the etcd replication is stopped")
        if not self.is_leader():
            raise NotLeader(self._leadership.leader_id)
        if len(command) > COMMAND_BYTES_MAX:
            raise ProposalRefused(f"command of {len(command)} bytes exceeds {COMMAND_BYTES_MAX}")
        proposal_id = f"{self.node_id}/{self._incarnation}/{next(self._ids)}".encode()
        proposal = _Proposal(proposal_id, command, Future())
        with self._cond:
            if len(self._pending) >= PROPOSALS_WAITING_MAX:
                raise Overloaded("too many proposals waiting for etcd")
            self._pending.append(proposal)
            self._cond.notify_all()
        try:
            return proposal.future.result(timeout=timeout_s)
        except FutureTimeout:
            with self._cond:
                with contextlib.suppress(ValueError):
                    self._pending.remove(proposal)
                self._waiters.pop(proposal_id, None)
            raise TimeoutError(f"proposal outcome unknown after {timeout_s} s") from None

    def read_barrier(self, *, timeout_s: float) -> int:
        deadline_s = self._monotonic() + timeout_s
        tenure = self._tenure
        if tenure is None or not self.is_leader():
            raise NotLeader(self._leadership.leader_id)
        try:
            result = self.gateway.txn(
                [],
                [
                    {"request_range": range_op(self._leader_key)},
                    {"request_range": self._last_log_range()},
                ],
                idempotent=True,
            )
        except EtcdError as exc:
            raise TimeoutError(f"read barrier: etcd did not confirm ({exc})") from None
        leader_kvs, last_kvs = result.ranges()
        if not leader_kvs or leader_kvs[0].create_revision != tenure.create_revision:
            self._step_down(tenure, "the leader key is no longer ours")
            raise NotLeader(self._leadership.leader_id)
        last = self._index_of(last_kvs[0].key) if last_kvs else 0
        with self._cond:
            self._last_index_seen = max(self._last_index_seen, last)
            while self._applied_index < last:
                left_s = deadline_s - self._monotonic()
                if left_s <= 0 or self._stopped.is_set():
                    raise TimeoutError(f"read barrier: apply did not reach {last} in time")
                self._cond.wait(min(left_s, 0.5))
        if not self.is_leader() or self._tenure is not tenure:
            raise NotLeader(self._leadership.leader_id)
        return last

    def subscribe(self, callback: Callable[[Leadership], None]) -> None:
        with self._cond:
            self._subscribers.append(callback)
            current = self._leadership
        callback(current)

    def status(self) -> dict[str, Any]:
        with self._cond:
            leadership = self._leadership
            return {
                "backend": "etcd",
                "node_id": self.node_id,
                "role": "leader" if self.is_leader() else "follower",
                "term": leadership.term,
                "leader_id": leadership.leader_id,
                "commit_index": self._last_index_seen,
                "applied_index": self._applied_index,
                "prefix": self.settings.prefix,
                "lease_ttl_seconds": self.settings.lease_ttl_seconds,
                "endpoint": self.gateway.endpoint(),
                "snapshot_index": self._snapshot.index if self._snapshot else 0,
                "first_log_index": self._snapshot.first_index if self._snapshot else 1,
                "snapshots_written": self._snapshots_written,
                "snapshots_installed": self._snapshots_installed,
                "compact_revision": self._compact_revision,
            }

    # ---- leadership ----------------------------------------------------------------------------

    def _publish(self, leadership: Leadership) -> None:
        with self._cond:
            if leadership == self._leadership:
                return
            self._leadership = leadership
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(leadership)
            except Exception:
                log.exception("a leadership subscriber failed")

    def _campaign(self) -> None:
        observe_s = self.settings.observe_interval_ms / 1000
        while not self._stopped.is_set():
            tenure = self._tenure
            if tenure is None:
                try:
                    _, holders = self.gateway.range(self._leader_key)
                    if holders:
                        self._observed(holders[0])
                        won = False
                    else:
                        won = self._try_to_lead()
                except EtcdError as exc:
                    log.info("campaign on etcd failed: %s", exc)
                    won = False
                if not won:
                    self._stopped.wait(observe_s)
                continue
            self._keep(tenure)

    def _try_to_lead(self) -> bool:
        """One campaign round: lead, or learn who leads. True when this member now leads."""
        sent_s = self._monotonic()
        lease_id, ttl_s = self.gateway.lease_grant(self.settings.lease_ttl_seconds)
        try:
            result = self.gateway.txn(
                [Compare(self._leader_key, "CREATE", "EQUAL", 0)],
                [
                    put_op(self._leader_key, self.node_id.encode(), lease=lease_id),
                    {"request_range": range_op(self._leader_key)},
                ],
                [{"request_range": range_op(self._leader_key)}],
            )
            holders = result.ranges()[0]
        except EtcdAmbiguous:
            _, holders = self.gateway.range(self._leader_key)  # did our put land?
        holder = holders[0] if holders else None
        if holder is None or holder.lease != lease_id:
            self._revoke_lease(lease_id)
            self._observed(holder)
            return False
        tenure = _Tenure(lease_id, holder.create_revision, sent_s + ttl_s)
        try:
            _, last = self.gateway.range(
                self._log_prefix, prefix_end(self._log_prefix), limit=1, descending=True
            )
        except EtcdError:
            self._revoke_lease(lease_id)  # won but cannot start: let someone else lead now
            raise
        with self._cond:
            self._next_index = (self._index_of(last[0].key) if last else 0) + 1
            self._last_index_seen = max(self._last_index_seen, self._next_index - 1)
            self._tenure = tenure
            self._cond.notify_all()
        log.info("%s leads on etcd (tenure %d)", self.node_id, tenure.create_revision)
        self._publish(Leadership(True, tenure.create_revision, self.node_id))
        return True

    def _observed(self, holder: KeyValue | None) -> None:
        if holder is None:
            self._publish(Leadership(False, self._leadership.term, None))
        else:
            self._publish(Leadership(False, holder.create_revision, holder.value.decode()))

    def _keep(self, tenure: _Tenure) -> None:
        """While leading: keepalive every TTL/3; step down when the lease may be gone."""
        ttl_s = self.settings.lease_ttl_seconds
        wake_s = min(self._monotonic() + ttl_s / 3, tenure.deadline_s)
        while not self._stopped.is_set() and self._tenure is tenure:
            left_s = wake_s - self._monotonic()
            if left_s <= 0:
                break
            self._stopped.wait(min(left_s, 0.05))
        if self._stopped.is_set() or self._tenure is not tenure:
            return
        if self._monotonic() >= tenure.deadline_s:
            self._step_down(tenure, "no keepalive succeeded within the lease TTL")
            return
        sent_s = self._monotonic()
        try:
            # Bounded by the deadline, so the step-down below is never late by a slow etcd.
            granted_s = self.gateway.lease_keepalive(tenure.lease_id, deadline_s=tenure.deadline_s)
            _, holders = self.gateway.range(self._leader_key, deadline_s=tenure.deadline_s)
        except EtcdError as exc:
            log.info(
                "keepalive failed (lease deadline in %.2f s): %s",
                tenure.deadline_s - self._monotonic(),
                exc,
            )
            return
        if granted_s <= 0:
            self._step_down(tenure, "the lease expired in etcd")
        elif not holders or holders[0].create_revision != tenure.create_revision:
            self._step_down(tenure, "the leader key is gone")
        else:
            tenure.deadline_s = max(tenure.deadline_s, sent_s + granted_s)

    def _step_down(self, tenure: _Tenure, reason: str) -> None:
        with self._cond:
            if self._tenure is not tenure:
                return
            self._tenure = None
            unsent = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        log.warning("%s stops leading: %s", self.node_id, reason)
        for proposal in unsent:
            _fail(proposal.future, NotLeader(None))
        self._publish(Leadership(False, self._leadership.term, None))
        self._revoke(tenure)

    def _revoke(self, tenure: _Tenure) -> None:
        if self._monotonic() < tenure.deadline_s:
            self._revoke_lease(tenure.lease_id)

    def _revoke_lease(self, lease_id: int) -> None:
        with contextlib.suppress(EtcdError):
            self.gateway.lease_revoke(lease_id)

    # ---- appending -----------------------------------------------------------------------------

    def _append(self) -> None:
        while not self._stopped.is_set():
            with self._cond:
                while not self._pending and not self._stopped.is_set():
                    self._cond.wait(0.5)
                if self._stopped.is_set():
                    return
                batch = _take_batch(self._pending)
                tenure = self._tenure
            if tenure is None or not self.is_leader():
                for proposal in batch:
                    _fail(proposal.future, NotLeader(self._leadership.leader_id))
                continue
            self._append_batch(tenure, batch)

    def _append_batch(self, tenure: _Tenure, batch: list[_Proposal]) -> None:
        """Append ``batch`` at the next index. An ambiguous send is resolved by resending the
        SAME guarded txn: if the first one committed, the resend's guard fails and the entry
        at ``first`` shows our proposal id; if not, the resend commits it and a late first one
        can only fail its guard. So an entry is never written twice."""
        with self._cond:
            first = self._next_index
            for proposal in batch:
                self._waiters[proposal.proposal_id] = proposal
        values = [p.proposal_id + b"\n" + p.command for p in batch]
        maybe_written = False
        while not self._stopped.is_set() and self._tenure is tenure and self.is_leader():
            try:
                result = self.append_txn(tenure, first, values)
            except EtcdError as exc:
                maybe_written = maybe_written or isinstance(exc, EtcdAmbiguous)
                log.info("append at %d: %s; resending the same guarded txn", first, exc)
                self._stopped.wait(RETRY_PAUSE_S)
                continue
            leader_kvs, last_kvs, at_first = result.ranges() if not result.succeeded else [[]] * 3
            ours = bool(at_first) and at_first[0].value.startswith(batch[0].proposal_id + b"\n")
            if result.succeeded or ours:
                with self._cond:
                    self._next_index = max(self._next_index, first + len(batch))
                    self._last_index_seen = max(self._last_index_seen, self._next_index - 1)
                return
            if not leader_kvs or leader_kvs[0].create_revision != tenure.create_revision:
                hint = leader_kvs[0].value.decode() if leader_kvs else None
                self._unwait(batch, NotLeader(hint))
                self._step_down(tenure, "an append found another tenure's leader key")
                return
            # Our view of the last index was stale and nothing of ours is there: queue again.
            with self._cond:
                self._next_index = (self._index_of(last_kvs[0].key) if last_kvs else 0) + 1
                for proposal in batch:
                    self._waiters.pop(proposal.proposal_id, None)
                self._pending.extendleft(reversed(batch))
            return
        if maybe_written:
            # Leadership ended while the outcome was unknown: the follower resolves the waiters
            # if it committed; otherwise their callers time out ("outcome unknown").
            self._resync_next_index()
            return
        self._unwait(batch, NotLeader(self._leadership.leader_id))

    def append_txn(self, tenure: _Tenure, first: int, values: Sequence[bytes]) -> Any:
        """The guarded append of ``values`` at ``first``…; public so fault tests can replay a
        deposed leader's append after it wakes."""
        guard = [
            Compare(self._leader_key, "CREATE", "EQUAL", tenure.create_revision),
            Compare(index_key(self._prefix, first), "CREATE", "EQUAL", 0),
        ]
        if first > 1:
            guard.append(Compare(index_key(self._prefix, first - 1), "CREATE", "GREATER", 0))
        puts = [put_op(index_key(self._prefix, first + i), v) for i, v in enumerate(values)]
        failure = [
            {"request_range": range_op(self._leader_key)},
            {"request_range": self._last_log_range()},
            {"request_range": range_op(index_key(self._prefix, first))},
        ]
        return self.gateway.txn(guard, puts, failure)

    def _unwait(self, batch: list[_Proposal], error: BaseException) -> None:
        with self._cond:
            for proposal in batch:
                self._waiters.pop(proposal.proposal_id, None)
        for proposal in batch:
            _fail(proposal.future, error)

    def _resync_next_index(self) -> None:
        try:
            _, last = self.gateway.range(
                self._log_prefix, prefix_end(self._log_prefix), limit=1, descending=True
            )
        except EtcdError:
            return  # a stale guess is safe: the next append's guard fails and re-reads it
        with self._cond:
            self._next_index = (self._index_of(last[0].key) if last else 0) + 1

    def _last_log_range(self) -> dict[str, Any]:
        return range_op(self._log_prefix, prefix_end(self._log_prefix), limit=1, descending=True)

    # ---- delivery ------------------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stopped.is_set():
            try:
                revision = self._catch_up()
                self._watch_from(revision + 1)
            except (EtcdError, WatchBroken) as exc:
                if not self._stopped.is_set():
                    log.debug("log delivery resumes by range: %s", exc)
                    self._stopped.wait(RETRY_PAUSE_S)

    def _catch_up(self) -> int:
        """Apply every entry after the applied index by range (installing the snapshot first
        when the log was compacted past the applied index); the revision read at."""
        self._install_if_behind()
        end = prefix_end(self._log_prefix)
        while True:
            start = index_key(self._prefix, self._applied_index + 1)
            revision, kvs = self.gateway.range(start, end, limit=CATCH_UP_PAGE_ENTRIES)
            try:
                for kv in kvs:
                    self._deliver(kv, behind_ok=True)
            except _Behind:
                # Compacted between the metadata read and this range: install, then go on.
                if not self._install_if_behind():
                    first = self._index_of(kvs[0].key)
                    raise EtcdFatal(
                        f"log gap in etcd: found {first} after {self._applied_index} "
                        "and no snapshot covers it"
                    ) from None
                continue
            if len(kvs) < CATCH_UP_PAGE_ENTRIES:
                return revision

    def _install_if_behind(self) -> bool:
        """Install etcd's snapshot when the applied index + 1 is below the first kept log key.
        True when one was installed."""
        while True:
            try:
                meta, _ = read_meta(self.gateway, self._snap_keys)
            except SnapshotInvalid as exc:
                raise EtcdFatal(f"{self.settings.prefix}: {exc}") from None
            self._snapshot = meta
            if meta is None or self._applied_index + 1 >= meta.first_index:
                return False
            if meta.contract_digest != self.settings.contract_digest:
                raise EtcdFatal(
                    f"the snapshot at {meta.index} was written under contract digest "
                    f"{meta.contract_digest!r}, this runner has {self.settings.contract_digest!r}"
                )
            if self._store is None:
                raise EtcdFatal(
                    f"the log is compacted to {meta.first_index} past the applied index "
                    f"{self._applied_index} and there is no store to install the snapshot into"
                )
            try:
                snapshot = read_snapshot(self.gateway, self._snap_keys, meta)
            except SnapshotMoved as exc:
                log.info("snapshot replaced while reading it (%s): reading the new one", exc)
                continue
            self._install(snapshot)
            return True

    def _install(self, snapshot: EtcdSnapshot) -> None:
        store = self._store
        assert store is not None
        log.warning(
            "%s is behind etcd's compacted log (applied %d): installing the snapshot at %d",
            self.node_id,
            self._applied_index,
            snapshot.index,
        )
        if self._restore is not None:
            self._restore(snapshot, lambda: store.install_snapshot(snapshot))
        else:
            store.install_snapshot(snapshot)
        with self._cond:
            self._applied_index = snapshot.index
            self._last_index_seen = max(self._last_index_seen, snapshot.index)
            self._snapshots_installed += 1
            self._forget_sizes_below(snapshot.index + 1)
            self._cond.notify_all()

    # ---- compaction (only the leader writes snapshots) ----------------------------------------

    def _compact(self) -> None:
        while not self._stopped.wait(self.settings.compaction_check_interval_s):
            tenure = self._tenure
            if tenure is None or not self.is_leader():
                continue
            try:
                self.compact_once(tenure)
            except (EtcdError, SnapshotInvalid) as exc:
                log.info("etcd compaction skipped this round: %s", exc)

    def compact_once(self, tenure: _Tenure) -> bool:
        """Write a snapshot of the durable checkpoint and delete the log below it when due;
        True when one was written. Public for tests."""
        store = self._store
        assert store is not None
        trailing = max(self.settings.trailing_entries, 1)  # keep the snapshot's own key
        durable = store.applied_index()

        def due(known: SnapshotMeta | None) -> bool:
            kept_from = known.first_index if known else 1
            gain = durable - trailing + 1 - kept_from
            with self._cond:
                self._forget_sizes_below(kept_from)
                heavy = self._sizes_bytes >= self.settings.snapshot_bytes
            return gain >= self.settings.snapshot_entries or (heavy and gain > 0)

        if not due(self._snapshot):  # the cached point: no etcd request while nothing is due
            return False
        current, meta_revision = read_meta(self.gateway, self._snap_keys)
        self._snapshot = current
        if not due(current):
            return False
        applied, parts = store.load_checkpoint()
        first_index = applied - trailing + 1
        data = encode_parts(parts)
        meta = SnapshotMeta(
            index=applied,
            term=tenure.create_revision,
            first_index=first_index,
            contract_digest=self.settings.contract_digest,
            size_bytes=len(data),
            chunks=-(-len(data) // CHUNK_BYTES),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        revision = write_snapshot(
            self.gateway,
            self._snap_keys,
            leader_key=self._leader_key,
            tenure_revision=tenure.create_revision,
            meta_revision=meta_revision,
            meta=meta,
            data=data,
        )
        if revision is None:
            return False
        self._snapshot = meta
        with self._cond:
            self._snapshots_written += 1
            self._forget_sizes_below(first_index)
        log.info("snapshot at %d written; log keys below %d deleted", applied, first_index)
        try:
            compact_history(self.gateway, revision)
        except EtcdError as exc:
            # The log is bounded already; only etcd's history keeps the old revisions.
            log.warning("etcd refused to compact its history at %d: %s", revision, exc)
            return True
        self._compact_revision = revision
        return True

    def _watch_from(self, revision: int) -> None:
        stream = WatchStream(
            self.gateway.endpoint(),
            self._log_prefix,
            prefix_end(self._log_prefix),
            revision,
            token=self.gateway.token(),
            idle_timeout_s=self.settings.watch_idle_timeout_s,
        )
        self._watch = stream
        if self._stopped.is_set():
            stream.close()
        for batch in stream.batches():
            for kv in batch.puts:
                index = self._index_of(kv.key)
                if index <= self._applied_index:
                    continue
                if index != self._applied_index + 1:
                    raise WatchBroken(f"gap: event for {index} after {self._applied_index}")
                self._deliver(kv)
            # Deletes are the owner's compaction: only keys a snapshot covers, nothing to do.

    def _forget_sizes_below(self, first_index: int) -> None:
        while self._sizes and self._sizes[0][0] < first_index:
            self._sizes_bytes -= self._sizes.popleft()[1]

    def _deliver(self, kv: KeyValue, *, behind_ok: bool = False) -> None:
        index = self._index_of(kv.key)
        if index > self._applied_index + 1 and behind_ok:
            raise _Behind
        if index != self._applied_index + 1:
            raise EtcdFatal(f"log gap in etcd: found {index} after {self._applied_index}")
        proposal_id, newline, command = kv.value.partition(b"\n")
        if not newline:
            raise EtcdFatal(f"log entry {index} has no proposal id")
        result = self._apply(index, command)
        with self._cond:
            self._applied_index = index
            self._last_index_seen = max(self._last_index_seen, index)
            waiter = self._waiters.pop(proposal_id, None)
            if self._store is not None and self.settings.snapshot_entries > 0:
                self._sizes.append((index, len(kv.value)))
                self._sizes_bytes += len(kv.value)
            self._cond.notify_all()
        if waiter is not None and waiter.command == command:
            with contextlib.suppress(Exception):
                waiter.future.set_result(result)

    def _index_of(self, key: bytes) -> int:
        digits = key[len(self._log_prefix) :]
        if not key.startswith(self._log_prefix) or len(digits) != INDEX_DIGITS:
            raise EtcdFatal(f"unexpected key under the log prefix: {key!r}")
        if not digits.isdigit():
            raise EtcdFatal(f"unexpected key under the log prefix: {key!r}")
        return int(digits)


def _take_batch(pending: deque[_Proposal]) -> list[_Proposal]:
    batch: list[_Proposal] = []
    size = 0
    while pending and len(batch) < BATCH_ENTRIES_MAX:
        nxt = len(pending[0].command) + len(pending[0].proposal_id) + 1
        if batch and size + nxt > BATCH_BYTES_MAX:
            break
        batch.append(pending.popleft())
        size += nxt
    return batch


def _fail(future: Future[Any], error: BaseException) -> None:
    with contextlib.suppress(Exception):
        future.set_exception(error)
