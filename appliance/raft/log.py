"""The node's view of its log: a durable prefix in storage plus an unstable tail in memory.

Theory of operation (after etcd-io/raft's raftLog/unstable split, thesis §3.5 and §10.2.1):
entries the node appends (a leader's proposals, a follower's accepted replication) first live in
``_unstable``. ``ready()`` hands the tail, and the point from which storage must drop a divergent
suffix, to the driver; once the driver has persisted them it calls ``stable_to``. A crash before
that loses exactly the unstable tail, which no acknowledgement has yet depended on.

Invariants (checked, never assumed): ``snapshot_index <= applied <= commit <= last_index()``; a
committed entry is never truncated; ``_unstable_offset <= stable_last + 1``.

Compaction (thesis §5): entries up to ``snapshot_index`` are gone; only the term at that index is
known. A snapshot received from the leader is first held as the *unstable snapshot*
(``pending_snapshot``): from that moment the log reads as if it held nothing but the snapshot and
the unstable entries after it, and ``ready()`` hands the snapshot to the driver, which installs it
(replacing storage's log and checkpoint atomically) before persisting anything else.
"""

from __future__ import annotations

from appliance.raft.errors import RaftInvariantError
from appliance.raft.messages import Entry
from appliance.raft.snapshot import Snapshot
from appliance.raft.storage import LogStorage


class RaftLog:
    def __init__(self, storage: LogStorage, *, applied_index: int = 0) -> None:
        self._storage = storage
        self.stable_last = storage.last_index()
        self.snapshot_index, self.snapshot_term = storage.snapshot_meta()
        self.pending_snapshot: Snapshot | None = None
        self._unstable: list[Entry] = []
        self._unstable_offset = self.stable_last + 1
        if not self.snapshot_index <= applied_index <= self.stable_last:
            raise RaftInvariantError(
                f"applied index {applied_index} outside the stored log "
                f"[{self.snapshot_index}, {self.stable_last}] (entries up to "
                f"{self.snapshot_index} were compacted away)"
            )
        # Whatever the application already applied was committed before it was applied.
        self.commit = applied_index
        self.applied = applied_index

    # -- reading -----------------------------------------------------------------------------

    def last_index(self) -> int:
        return self._unstable_offset + len(self._unstable) - 1

    def last_term(self) -> int:
        return self.term_at(self.last_index()) or 0

    def first_index(self) -> int:
        """The first index the log still holds an entry for (``snapshot_index + 1``)."""
        return self.snapshot_index + 1

    def term_at(self, index: int) -> int | None:
        if index == 0:
            return 0
        if index <= self.snapshot_index:
            return self.snapshot_term if index == self.snapshot_index else None
        if index >= self._unstable_offset:
            offset = index - self._unstable_offset
            return self._unstable[offset].term if offset < len(self._unstable) else None
        if index <= self.stable_last:
            return self._storage.term_at(index)
        return None

    def entries(self, lo: int, hi: int, *, entries_max: int, bytes_max: int) -> list[Entry]:
        """Entries ``lo <= index < hi``: at most ``entries_max``, and at most ``bytes_max`` of
        payload unless the first entry alone is larger (one entry always goes)."""
        if lo <= self.snapshot_index:
            raise RaftInvariantError(
                f"entries from {lo} asked for, but the log is compacted up to {self.snapshot_index}"
            )
        hi = min(hi, lo + entries_max, self.last_index() + 1)
        out: list[Entry] = []
        total_bytes = 0
        stable_hi = min(hi, self._unstable_offset, self.stable_last + 1)
        if lo < stable_hi:
            for index, term, payload in self._storage.entries(lo, stable_hi, bytes_max):
                total_bytes += len(payload)
                if out and total_bytes > bytes_max:
                    return out
                out.append(Entry.from_stored(index, term, payload))
            if out and out[-1].index != stable_hi - 1:
                return out  # the store stopped early at its byte budget
        for index in range(max(lo, self._unstable_offset), hi):
            entry = self._unstable[index - self._unstable_offset]
            total_bytes += entry.payload_bytes
            if out and total_bytes > bytes_max:
                break
            out.append(entry)
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Election restriction (thesis §3.6.1): is a candidate's log at least as complete?"""
        my_term = self.last_term()
        return last_term > my_term or (last_term == my_term and last_index >= self.last_index())

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """Highest index ``<= index`` whose term is ``<= term`` (0 if none)."""
        index = min(index, self.last_index())
        while index > self.snapshot_index:
            entry_term = self.term_at(index)
            if entry_term is not None and entry_term <= term:
                return index
            index -= 1
        # Everything up to the snapshot is committed, so it matches every leader's log.
        return self.snapshot_index if self.snapshot_term <= term else 0

    # -- writing -----------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Append entries (the first may overwrite a divergent suffix above ``commit``)."""
        if not entries:
            return
        first = entries[0].index
        if first <= self.commit:
            raise RaftInvariantError(
                f"refusing to overwrite committed entry {first} (commit is {self.commit})"
            )
        if first > self.last_index() + 1:
            raise RaftInvariantError(f"gap: appending {first} after {self.last_index()}")
        if first >= self._unstable_offset:
            del self._unstable[first - self._unstable_offset :]
        else:
            self._unstable = []
            self._unstable_offset = first
        self._unstable.extend(entries)

    def maybe_append(
        self, prev_index: int, prev_term: int, entries: tuple[Entry, ...], leader_commit: int
    ) -> int | None:
        """Follower side of AppendEntries (thesis §3.5): the last index now known to match the
        leader, or ``None`` when the log does not contain ``(prev_index, prev_term)``."""
        if self.term_at(prev_index) != prev_term:
            return None
        last_new = prev_index + len(entries)
        for position, entry in enumerate(entries):
            if entry.index != prev_index + 1 + position:
                raise RaftInvariantError(f"non-contiguous entries in append after {prev_index}")
            if self.term_at(entry.index) != entry.term:
                # Only the first conflicting entry and what follows replace our suffix; entries
                # we already hold stay, so a stale or duplicated append never truncates.
                self.append(list(entries[position:]))
                break
        self.commit_to(min(leader_commit, last_new))
        return last_new

    def commit_to(self, index: int) -> None:
        if index <= self.commit:
            return
        if index > self.last_index():
            raise RaftInvariantError(f"commit {index} beyond last index {self.last_index()}")
        self.commit = index

    # -- the ready/advance handshake -----------------------------------------------------------

    def has_unstable(self) -> bool:
        return bool(self._unstable)

    def unstable_entries(self) -> tuple[Entry, ...]:
        return tuple(self._unstable)

    def truncate_from(self) -> int | None:
        """Index from which storage must drop its suffix before appending, if any."""
        if self.pending_snapshot is not None:
            return None  # installing the snapshot replaces the whole stored log
        return self._unstable_offset if self._unstable_offset <= self.stable_last else None

    # -- compaction and snapshots ------------------------------------------------------------

    def compact(self, index: int) -> int:
        """Forget entries up to ``index`` (applied ones only); returns the term at ``index``."""
        if self.pending_snapshot is not None:
            raise RaftInvariantError("cannot compact while a snapshot waits to be installed")
        if not self.snapshot_index < index <= min(self.applied, self.stable_last):
            raise RaftInvariantError(
                f"compaction to {index} outside ({self.snapshot_index}, "
                f"{min(self.applied, self.stable_last)}]: only applied, durable entries go"
            )
        term = self.term_at(index)
        if term is None:
            raise RaftInvariantError(f"no term for compaction index {index}")
        self.snapshot_index, self.snapshot_term = index, term
        return term

    def restore(self, snapshot: Snapshot) -> None:
        """Take a leader's snapshot: the log becomes that snapshot and nothing after it."""
        if snapshot.index <= self.commit:
            raise RaftInvariantError(
                f"restoring snapshot {snapshot.index} at or below commit {self.commit}"
            )
        self.pending_snapshot = snapshot
        self.snapshot_index, self.snapshot_term = snapshot.index, snapshot.term
        self._unstable = []
        self._unstable_offset = snapshot.index + 1
        self.commit = snapshot.index
        self.applied = snapshot.index

    def snapshot_installed(self) -> None:
        """The driver installed ``pending_snapshot``: storage holds it and nothing after it."""
        snapshot = self.pending_snapshot
        if snapshot is None:
            raise RaftInvariantError("no snapshot was waiting to be installed")
        if self._storage.snapshot_meta() != (snapshot.index, snapshot.term):
            raise RaftInvariantError(
                f"storage reports snapshot {self._storage.snapshot_meta()} after installing "
                f"{(snapshot.index, snapshot.term)}"
            )
        self.pending_snapshot = None
        self.stable_last = snapshot.index

    def stable_to(self, last_persisted: int) -> None:
        stored_last = self._storage.last_index()
        if stored_last != last_persisted or last_persisted != self.last_index():
            raise RaftInvariantError(
                f"storage holds up to {stored_last}, expected {last_persisted} "
                f"(log last {self.last_index()}): the driver must persist the whole ready"
            )
        if self.pending_snapshot is not None:
            raise RaftInvariantError("entries persisted before the snapshot was installed")
        self.stable_last = last_persisted
        self._unstable = []
        self._unstable_offset = last_persisted + 1

    def next_committed(self, *, entries_max: int, bytes_max: int) -> list[Entry]:
        """Committed, durable entries not yet applied, in index order."""
        if self.pending_snapshot is not None:
            return []  # nothing after the snapshot is durable until it is installed
        hi = min(self.commit, self.stable_last) + 1
        if self.applied + 1 >= hi:
            return []
        return self.entries(self.applied + 1, hi, entries_max=entries_max, bytes_max=bytes_max)

    def applied_to(self, index: int) -> None:
        if index != self.applied and not self.applied < index <= self.commit:
            raise RaftInvariantError(
                f"applied would move from {self.applied} to {index} (commit {self.commit})"
            )
        self.applied = index
