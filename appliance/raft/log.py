"""The node's view of its log: a durable prefix in storage plus an unstable tail in memory.

Theory of operation (after etcd-io/raft's raftLog/unstable split, thesis §3.5 and §10.2.1):
entries the node appends (a leader's proposals, a follower's accepted replication) first live in
``_unstable``. ``ready()`` hands the tail, and the point from which storage must drop a divergent
suffix, to the driver; once the driver has persisted them it calls ``stable_to``. A crash before
that loses exactly the unstable tail, which no acknowledgement has yet depended on.

Invariants (checked, never assumed): ``applied <= commit <= last_index()``; a committed entry is
never truncated; ``_unstable_offset <= stable_last + 1``.
"""

from __future__ import annotations

from appliance.raft.errors import RaftInvariantError
from appliance.raft.messages import Entry
from appliance.raft.storage import LogStorage


class RaftLog:
    def __init__(self, storage: LogStorage, *, applied_index: int = 0) -> None:
        self._storage = storage
        self.stable_last = storage.last_index()
        self._unstable: list[Entry] = []
        self._unstable_offset = self.stable_last + 1
        if not 0 <= applied_index <= self.stable_last:
            raise RaftInvariantError(
                f"applied index {applied_index} outside the stored log [0, {self.stable_last}]"
            )
        # Whatever the application already applied was committed before it was applied.
        self.commit = applied_index
        self.applied = applied_index

    # -- reading -----------------------------------------------------------------------------

    def last_index(self) -> int:
        return self._unstable_offset + len(self._unstable) - 1

    def last_term(self) -> int:
        return self.term_at(self.last_index()) or 0

    def term_at(self, index: int) -> int | None:
        if index == 0:
            return 0
        if index >= self._unstable_offset:
            offset = index - self._unstable_offset
            return self._unstable[offset].term if offset < len(self._unstable) else None
        if index <= self.stable_last:
            return self._storage.term_at(index)
        return None

    def entries(self, lo: int, hi: int, *, entries_max: int, bytes_max: int) -> list[Entry]:
        """Entries ``lo <= index < hi``: at most ``entries_max``, and at most ``bytes_max`` of
        payload unless the first entry alone is larger (one entry always goes)."""
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
        while index > 0:
            entry_term = self.term_at(index)
            if entry_term is not None and entry_term <= term:
                return index
            index -= 1
        return 0

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

    def unstable_entries(self) -> tuple[Entry, ...]:
        return tuple(self._unstable)

    def truncate_from(self) -> int | None:
        """Index from which storage must drop its suffix before appending, if any."""
        return self._unstable_offset if self._unstable_offset <= self.stable_last else None

    def stable_to(self, last_persisted: int) -> None:
        stored_last = self._storage.last_index()
        if stored_last != last_persisted or last_persisted != self.last_index():
            raise RaftInvariantError(
                f"storage holds up to {stored_last}, expected {last_persisted} "
                f"(log last {self.last_index()}): the driver must persist the whole ready"
            )
        self.stable_last = last_persisted
        self._unstable = []
        self._unstable_offset = last_persisted + 1

    def next_committed(self, *, entries_max: int, bytes_max: int) -> list[Entry]:
        """Committed, durable entries not yet applied, in index order."""
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
