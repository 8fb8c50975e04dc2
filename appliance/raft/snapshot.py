"""A Raft snapshot: the application's state at an applied index, as opaque bytes (thesis §5).

The node never looks inside ``data``: the storage produces it (``LogStorage.snapshot``, the
checkpoint at its applied index) and consumes it (``install_snapshot``). What the node adds is the
metadata — the index, the term of the entry at that index, and the voters — and the checksum that
the follower verifies once every chunk has arrived, before anything is installed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Snapshot:
    index: int
    term: int
    voters: tuple[str, ...]
    data: bytes

    @cached_property
    def checksum(self) -> str:  # computed once: a leader sends it with every chunk
        return snapshot_checksum(self.data)


def snapshot_checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
