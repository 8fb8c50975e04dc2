"""When to compact the log: a pure policy over counts the driver already has (thesis §5.1).

The snapshot is the application's durable checkpoint (``LogStorage.snapshot_index_available``):
entries at or below it can be dropped without losing state. A slow follower is better served
by the log than by a snapshot, so ``trailing_entries`` below the checkpoint stay. The policy
compacts to ``checkpoint - trailing_entries`` once that point is ``snapshot_entries`` past the
last compaction, or once the log's payload reaches ``snapshot_bytes`` (a few large entries
weigh as much as many small ones); never below or at the last compaction point.

Defaults (etcd: snapshot every 10,000 applied entries, keep 5,000; hashicorp/raft: 8,192 and
10,240; rqlite: 8,192 entries or a 4 MiB WAL): we take etcd's counts, because our entries are
etcd-sized (about 1.5 KB per occurrence, docs/raft.md) and the steady log stays below 15,000
entries, about 20 MB, while a snapshot (the checkpoint, capped at 4 MiB) costs less to send than
the 5,000 entries a follower may still fetch from the log. The byte trigger (64 MiB) only bounds
logs of unusually large entries.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class CompactionPolicy:
    snapshot_entries: int = 10_000
    trailing_entries: int = 5_000
    snapshot_bytes: int = 64 * MiB

    def __post_init__(self) -> None:
        if self.snapshot_entries < 1:
            raise ValueError(f"snapshot_entries must be >= 1, got {self.snapshot_entries}")
        if self.trailing_entries < 0:
            raise ValueError(f"trailing_entries must be >= 0, got {self.trailing_entries}")
        if self.snapshot_bytes < 1:
            raise ValueError(f"snapshot_bytes must be >= 1, got {self.snapshot_bytes}")

    def compact_to(self, *, snapshot_index: int, checkpoint_index: int, log_bytes: int) -> int:
        """The index to compact to now, or 0 for "not yet"."""
        target = checkpoint_index - self.trailing_entries
        if target <= snapshot_index:
            return 0
        if target - snapshot_index >= self.snapshot_entries or log_bytes >= self.snapshot_bytes:
            return target
        return 0
