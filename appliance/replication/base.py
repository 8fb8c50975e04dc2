"""The replication interface the runner uses, whatever engine sits behind it (SPEC §5).

Contract (every implementation, one contract test suite in tests/replication):

- ``start()`` / ``stop()``: own the engine's threads; ``stop`` fails every waiting call.
- ``propose(command, timeout_s)`` blocks until the command is committed AND applied locally
  through the apply hook, and returns the hook's result for it. Raises ``NotLeader`` (with a
  leader hint) when this member cannot accept proposals, ``ProposalLost`` when the command will
  never apply (a new leader overwrote it), ``TimeoutError`` when the outcome is unknown — the
  command may still commit later, so the caller must treat the result as uncertain.
- ``read_barrier(timeout_s)`` returns once this member has confirmed, after the call began, that
  it is still the leader and has applied everything committed before the call: a read of the
  local state after it is linearizable. Raises ``NotLeader`` / ``TimeoutError``.
- ``is_leader()`` is a cheap, possibly stale hint; only ``read_barrier`` proves leadership.
- ``subscribe(callback)`` calls ``callback(Leadership)`` on every change (once at registration)
  from the engine's thread; the callback must not block.
- The apply hook ``apply(index, command) -> result`` is called for every committed command, in
  index order, exactly once per process lifetime, starting after the ``applied_index`` given at
  construction; it must be deterministic (SPEC §2: apply is a pure function of state and command).

An external engine (etcd) would fit as a third implementation: ``propose`` becomes a transaction
that appends the command under a revision-ordered key prefix and waits until the local watcher
has applied it; ``read_barrier`` is a linearizable (quorum) read of the current revision followed
by waiting for the watcher to reach it; leadership is an etcd election (lease + campaign key),
and ``subscribe`` follows the election observer. The apply hook is fed by a watch on the command
prefix from ``applied_index + 1``. Nothing in the runner would change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from appliance.replication.errors import (
    NotLeader,
    Overloaded,
    ProposalLost,
    ProposalRefused,
    ReplicationStopped,
)

ApplyHook = Callable[[int, bytes], Any]

__all__ = [
    "ApplyHook",
    "Leadership",
    "NotLeader",
    "Overloaded",
    "ProposalLost",
    "ProposalRefused",
    "Replication",
    "ReplicationStopped",
]


@dataclass(frozen=True)
class Leadership:
    is_leader: bool
    term: int
    leader_id: str | None


class Replication(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def propose(self, command: bytes, *, timeout_s: float) -> Any: ...

    def read_barrier(self, *, timeout_s: float) -> int: ...

    def is_leader(self) -> bool: ...

    def subscribe(self, callback: Callable[[Leadership], None]) -> None: ...

    def status(self) -> dict[str, Any]: ...
