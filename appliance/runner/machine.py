"""The replicated state machine of one voter: the apply hook, the durable checkpoint, reads.

Theory of operation: Raft hands every committed command to :meth:`Machine.apply` in index order, on
whichever thread holds the Raft node's turn (one at a time). Apply is the core's pure
``apply(state, command)``; what it touched is then handed, with the applied index, to the
checkpoint writer (appliance/runner/checkpoint_writer.py), which writes it durably off the Raft
path, several transitions merged into one commit when they queue up. The checkpoint may lag the
applied state by what is queued; a restart resumes from the checkpoint's applied index and
re-applies the committed log entries after it (the log is compacted only up to the durable
checkpoint), which ends in exactly the state that was acknowledged. A follower behind the leader's
compacted log gets the leader's checkpoint as a snapshot instead (``restore``). A command the
core refuses (a failed compare-and-set) changes nothing and is *reported*, not raised: a refusal
is an ordinary, replicated result, identical on every voter, and raising would stop the Raft
driver.

A command of a kind this binary does not know is the one exception: reporting it as a refusal
would make this voter's state differ from the voters that apply it (a newer binary's), so apply
raises ``UnsupportedCommand``, which stops the replication driver and the process with a message
that names the entry and the kind (SPEC §11, the version gate; appliance/capabilities.py). The
owner proposes a new kind only once every voter reports that it can apply it, so this happens
only when a voter is rolled back or a voter was never upgraded.

Every read of the state from another thread (the loop, the admission route, ``list``) happens under
:attr:`Machine.lock`, which apply holds while it mutates; nobody holds it while waiting for Raft.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from appliance.capabilities import BINARY_VERSION, command_kinds
from appliance.core import state as core
from appliance.core.errors import CoreError
from appliance.core.limits import Limits
from appliance.owner.applied import Accepted, NotYetApplicable, Refused
from appliance.runner.checkpoint_writer import CheckpointWriter
from appliance.runner.committed_kinds import FILE_NAME as COMMITTED_KINDS_FILE
from appliance.runner.committed_kinds import CommittedKinds
from appliance.store.runner_store import RunnerStore
from appliance.store.versions import (
    READER_VERSION_AMENDED,
    READER_VERSION_CANCELLING,
    READER_VERSION_CHARGING,
    READER_VERSION_COMMANDS,
    READER_VERSION_FLEET,
)

T = TypeVar("T")
# (index, command, parts written, parts deleted), after every apply
ChangeListener = Callable[[int, Any, Iterable[str], Iterable[str]], None]
RESTORE_FLUSH_S = 30.0  # the writer's queue is at most 1,024 transitions

__all__ = [
    "Accepted",
    "Machine",
    "NotYetApplicable",
    "Refused",
    "UnsupportedCommand",
    "decode_command",
    "encode_command",
]


def encode_command(command: Any) -> bytes:
    return json.dumps(core.command_to_json(command), separators=(",", ":"), sort_keys=True).encode()


class UnsupportedCommand(RuntimeError):
    """A committed entry holds a command kind this binary cannot apply: stop, never diverge."""

    def __init__(self, index: int, kind: str) -> None:
        super().__init__(
            f"log entry {index} holds a {kind} command, which this binary (appliance "
            f"{BINARY_VERSION}) cannot apply; stopping rather than diverging from the voters "
            f"that can. Start this voter with a binary that applies {kind} (docs/raft.md, "
            f'"Version gate")'
        )
        self.index = index
        self.kind = kind


def decode_command(data: bytes) -> Any:
    return core.command_from_json(json.loads(data))


def state_from_parts(limits: Limits, parts: dict[str, bytes]) -> core.SchedulerState:
    if not parts:
        return core.SchedulerState(limits)
    body = b",".join(b'"' + n.encode() + b'":' + parts[n] for n in sorted(parts))
    return core.from_json(b"{" + body + b"}")


class Machine:
    def __init__(
        self,
        store: RunnerStore | None,
        limits: Limits,
        *,
        on_fatal: Callable[[BaseException], None] | None = None,
        known_kinds: frozenset[str] | None = None,
    ) -> None:
        self.lock = threading.RLock()
        # Tests pass a smaller set to play an older binary; production knows every registered kind.
        self._known_kinds = command_kinds() if known_kinds is None else known_kinds
        self._store = store
        self._limits = limits
        self._writer = CheckpointWriter(store, on_fatal) if store is not None else None
        applied, parts = store.load_checkpoint() if store is not None else (0, {})
        self.applied_index = applied
        self.state = state_from_parts(limits, parts)
        # A fresh store holds no parts yet; the first transition writes every part of the initial
        # state (not only those the command touched), so the checkpoint is complete from then on
        # and a restart after any transition can decode it.
        self._checkpoint_complete = bool(parts)
        self._listeners: list[Callable[[int, Any, Accepted | Refused], None]] = []
        self._change_listeners: list[ChangeListener] = []
        # What promote_voter asks a learner to apply (issue 36): the kinds the log committed.
        self.committed_kinds = CommittedKinds(
            None if store is None else Path(store.path).parent / COMMITTED_KINDS_FILE,
            fresh_store=applied == 0 and not parts,
            known=self._known_kinds,
        )

    def on_applied(self, listener: Callable[[int, Any, Accepted | Refused], None]) -> None:
        """``listener(index, command, result)`` after every apply, on the applying thread."""
        self._listeners.append(listener)

    def on_changes(self, listener: ChangeListener) -> None:
        """``listener(index, command, written, deleted)`` after every apply, on the applying
        thread: the checkpoint parts the entry wrote and deleted (both empty for a refusal;
        every part for the first transition of a fresh store). The change feed reads them
        (appliance/metrics/feed.py)."""
        self._change_listeners.append(listener)

    def apply(self, index: int, data: bytes) -> Accepted | Refused:
        value = json.loads(data)
        kind = value.get("command") if isinstance(value, dict) else None
        if isinstance(kind, str) and kind not in self._known_kinds:
            raise UnsupportedCommand(index, kind)
        with self.lock:
            try:
                command = core.command_from_json(value)
                self.committed_kinds.note(core.command_kind(command))
                applied = core.apply(self.state, command)
            except CoreError as err:
                if isinstance(kind, str):  # refused, or not even decoded: still committed
                    self.committed_kinds.note(kind)
                command = None
                result: Accepted | Refused = Refused(err)
                upserts: dict[str, bytes] = {}
                deletes: frozenset[str] = frozenset()
            else:
                result = Accepted(applied.value)
                names = applied.touched if self._checkpoint_complete else self.state.part_names()
                upserts = {name: self.state.part_bytes(name) for name in names}
                deletes = applied.deleted
            reader_version = self._reader_version()
            self._checkpoint_complete = self._checkpoint_complete or bool(upserts)
            self.applied_index = index
        if self._writer is not None:  # in apply order: one thread at a time applies
            self._writer.put(index, upserts, deletes, reader_version)
        for listener in self._listeners:
            listener(index, command, result)
        for changes in self._change_listeners:
            changes(index, command, upserts.keys(), deletes)
        return result

    def _reader_version(self) -> int | None:
        # For good once the fleet's amendments or a placement rule are in the checkpoint.
        if core.needs_fleet_reader(self.state):
            return READER_VERSION_FLEET
        # For good once the checkpoint names charging rules 2: an older binary would charge it
        # by rules 1 and decide growth commands differently (appliance/core/charging.py).
        if core.needs_charging_reader(self.state):
            return READER_VERSION_CHARGING
        # Raised only while the checkpoint holds what older binaries cannot read (SPEC §4): the
        # contract amendments part (from the first amendment on, for good), the new commands'
        # parts and fields (appliance/core/features.py), or a Cancelling record.
        if core.needs_amended_reader(self.state):
            return READER_VERSION_AMENDED
        if core.needs_commands_reader(self.state):
            return READER_VERSION_COMMANDS
        if core.needs_cancelling_reader(self.state):
            return READER_VERSION_CANCELLING
        return None

    def restore(self, snapshot: Any, install: Callable[[], None]) -> None:
        """Raft's snapshot hook (a follower behind the leader's compacted log): write what is
        still queued for older indexes, let ``install`` replace the store's checkpoint and log
        with the snapshot, then take the state from the new checkpoint."""
        if self._writer is not None and not self._writer.flush(RESTORE_FLUSH_S):
            raise RuntimeError("the checkpoint writer did not finish before a snapshot install")
        install()
        self.committed_kinds.prefix_unknown()
        with self.lock:
            if self._store is None:
                raise RuntimeError("a snapshot install needs a store")
            applied, parts = self._store.load_checkpoint()
            if applied != snapshot.index:
                raise RuntimeError(f"checkpoint at {applied} after installing {snapshot.index}")
            self.state = state_from_parts(self._limits, parts)
            self.applied_index = applied
            self._checkpoint_complete = bool(parts)

    def flush(self, timeout_s: float) -> bool:
        """Wait until the checkpoint holds every transition applied so far."""
        return True if self._writer is None else self._writer.flush(timeout_s)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Write what is queued and stop the writer (before the store closes)."""
        return True if self._writer is None else self._writer.close(timeout_s)

    def read(self, fn: Callable[[core.SchedulerState], T]) -> T:
        with self.lock:
            return fn(self.state)
