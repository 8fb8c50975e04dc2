"""The attempts that wait, claimed and unsent, for the worker's capacity (paced dispatch).

Theory of operation (appliance/owner/pacing.py has the whole of paced dispatch): a claimed
attempt that the worker has no room for waits here, oldest claim first, until the attempts
(appliance/owner/attempts.py) send it. Each one that began waiting is noted once in its history
by a committed ``NoteCapacityWait`` — one entry for all that began waiting in a pass, proposed
without holding other events, and only once every voter applies it (the version gate); until
then the decision log and ``status`` still show the wait. Nothing here decides when to send.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from appliance.core import state as core
from appliance.owner.events import Outcome, Propose
from appliance.owner.serial import Serial


class Waiter(Protocol):
    occurrence_id: int
    attempt: int


W = TypeVar("W", bound=Waiter)


class CapacityWaits(Generic[W]):
    """The waiting attempts in FIFO order, and the notes of their waits."""

    def __init__(self, serial: Serial) -> None:
        self._serial = serial
        self._waiting: dict[int, W] = {}  # occurrence id -> claimed, unsent (FIFO)
        self._to_note: list[W] = []
        self._notes: dict[int, tuple[tuple[int, int], ...]] = {}  # proposal token -> attempts
        self.total = 0  # attempts that waited (the metric's counter)

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, work: W) -> None:
        self._waiting[work.occurrence_id] = work
        self._to_note.append(work)
        self.total += 1

    def pending(self) -> bool:
        """Something waits, or a wait is still to be noted."""
        return bool(self._waiting or self._to_note)

    def oldest_first(self) -> list[tuple[int, W]]:
        return list(self._waiting.items())

    def remove(self, occurrence_id: int) -> None:
        del self._waiting[occurrence_id]

    def waiting_ids(self) -> list[int]:
        return list(self._waiting)

    def clear(self) -> int:
        """Forget every wait (ownership ended: the next owner's takeover fences them); how many
        waited."""
        dropped = len(self._waiting)
        self._waiting.clear()
        self._to_note.clear()
        return dropped

    def note(self, epoch: int | None) -> None:
        """One ``NoteCapacityWait`` for the attempts that began waiting and still wait."""
        pairs = tuple(
            (w.occurrence_id, w.attempt)
            for w in self._to_note
            if self._waiting.get(w.occurrence_id) is w
        )
        self._to_note.clear()
        if not pairs or epoch is None:
            return
        command = core.NoteCapacityWait(epoch, pairs, self._serial.now_s())
        if self._serial.gated(command) is not None:
            return  # not every voter applies it yet: the log and status still show the wait
        token = self._serial.token()
        self._notes[token] = pairs
        self._serial.emit(Propose(token, command))

    def awaits(self, token: int) -> bool:
        return token in self._notes

    def noted(self, token: int, outcome: Outcome) -> None:
        pairs = self._notes.pop(token, ())
        noted: Any = getattr(outcome, "value", None)
        self._serial.log(
            "capacity_wait_noted",
            asked=len(pairs),
            noted=len(noted) if isinstance(noted, tuple) else None,
            outcome=type(outcome).__name__,
        )
