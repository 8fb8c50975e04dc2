"""What a leader knows about one follower's log (thesis §3.5, §10.2; etcd-io/raft "progress").

Two states. PROBE: the leader does not know where the follower's log matches; it sends one
append at ``next`` and waits for the answer (or the next heartbeat answer) before sending again.
REPLICATE: the match point is known; the leader streams batches optimistically, at most
``inflight_max`` unacknowledged ones, advancing ``next`` as it sends. A rejection, or a heartbeat
round in which ``match`` did not move while entries are outstanding (a lost batch), drops back to
PROBE at ``match + 1``. SNAPSHOT: the follower needs entries the leader has compacted away
(thesis §5.3); the leader sends its snapshot one chunk at a time (``snapshot_offset`` bytes
acknowledged, one chunk in flight) until the follower answers that it installed it, then
replicates from the snapshot's index.

Invariant: ``0 <= match < next``.
"""

from __future__ import annotations

import enum
from collections import deque

from appliance.raft.errors import RaftInvariantError
from appliance.raft.snapshot import Snapshot


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    def __init__(self, next_index: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight: deque[int] = deque()  # last index of each unacknowledged batch
        self.recent_active = False  # heard from in the current check-quorum window
        self.read_seq_acked = 0
        self.match_at_last_heartbeat = -1
        self.commit_sent = 0  # highest commit index an append reaching it carried to this follower
        self.snapshot: Snapshot | None = None  # SNAPSHOT: the image being sent
        self.snapshot_offset = 0  # bytes of it the follower holds
        self.snapshot_sent = False  # a chunk is in flight

    def become_snapshot(self, snapshot: Snapshot) -> None:
        self.state = ProgressState.SNAPSHOT
        self.snapshot = snapshot
        self.snapshot_offset = 0
        self.snapshot_sent = False
        self.inflight.clear()

    def become_probe(self) -> None:
        self.snapshot = None
        self.state = ProgressState.PROBE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.snapshot = None
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.inflight.clear()

    def on_sent(self, last_index: int) -> None:
        if self.state is ProgressState.REPLICATE:
            self.next = last_index + 1
            self.inflight.append(last_index)
        else:
            self.probe_sent = True

    def maybe_update(self, index: int) -> bool:
        """A success answer up to ``index``; True when it taught us something new."""
        if index <= self.match:
            return False
        self.match = index
        self.next = max(self.next, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        self._check()
        return True

    def maybe_decrease(self, rejected_index: int, probe_at: int) -> bool:
        """A rejection of ``prev_index == rejected_index``; False when it is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected_index <= self.match:
                return False
            self.become_probe()
            return True
        if rejected_index != self.next - 1:
            return False
        self.next = max(min(rejected_index, probe_at + 1), self.match + 1)
        self.probe_sent = False
        self._check()
        return True

    def forget_match(self, next_index: int) -> None:
        """The follower lost entries it had acknowledged (a recovered store): match back to 0
        and PROBE at ``next_index``. Lowering match only delays commits, never hastens one."""
        self.match = 0
        self.match_at_last_heartbeat = -1
        self.become_probe()
        self.next = max(1, next_index)
        self._check()

    def _check(self) -> None:
        if not 0 <= self.match < self.next:
            raise RaftInvariantError(f"progress broken: match {self.match}, next {self.next}")
