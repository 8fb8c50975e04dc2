"""The change feed: a bounded, in-memory list of the committed state changes one voter applied.

Theory of operation (issue 35, item 2). ``appliance admin watch``, ``admin output --follow`` and the
web console's live view all ask one question: "what changed since I last looked?". The answer is
derived from what this voter *applied*, never from what the owner intends, so it shows only
committed changes, identically on every voter.

- **Cursor = the Raft log index.** Every committed entry has one; every voter applies the same
  entries in the same order with the same result (SPEC §2), so a client that moves to another
  voter (a failover) continues with the same cursor. ``after=N`` asks for the changes of entries
  N+1 onward. One entry may change many things (a pulse creates several occurrences): its events
  are always delivered together.
- **Derived from the parts an apply touched.** ``Machine`` reports, per applied entry, the
  checkpoint parts it wrote and deleted (``occurrence/<id>``, ``schedule/<id>``, ``paused``,
  ``ownership``). The
  feed reads just those back and compares them with its shadow (the state, attempt and definition
  it saw last), so a change costs O(parts touched), not O(state). An entry that jumps over others
  (a snapshot installed on a follower) is compared in full once, its events marked ``resync``.
- **Bounded.** At most ``FEED_EVENTS_MAX`` events are kept (whole entries are dropped, oldest
  first); a client whose cursor is older than what is kept is told ``gap: true`` (re-read ``list``
  and continue from ``cursor``). A reply carries at most ``EVENTS_PER_REPLY_MAX`` events (whole
  entries; ``more: true`` says to ask again at once).
- **Waiting is bounded.** A long poll waits at most ``WAIT_MS_MAX``, and at most ``WAITERS_MAX``
  requests wait at once (the management listener has 8 threads): a request beyond that is
  answered at once with what there is, so no request can hold the listener. The web console's
  one reader (``appliance/console/feed.py``: a thread of its own that fans the feed out to every
  open page) waits uncounted (``counted=False``): it holds no listener thread, and a page never
  waits here itself.

The listener runs on the thread that applies (between two applies, outside the machine's lock);
it only reads the touched parts and appends to a deque under the feed's own condition variable.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from appliance.core import state as core
from appliance.core.binding import instant_text
from appliance.core.definition import definition_to_json
from appliance.core.runner_parts import OWNERSHIP_PART, ownership_of
from appliance.core.state_parts import PAUSED_PART

FEED_EVENTS_MAX: Final = 4096
EVENTS_PER_REPLY_MAX: Final = 512
WAIT_MS_MAX: Final = 25_000
WAITERS_MAX: Final = 4
_OCCURRENCE: Final = "occurrence/"
_SCHEDULE: Final = "schedule/"
DEFINITION_FIELDS: Final = ("name", "code", "cron", "timezone", "policy")


@dataclass(frozen=True)
class _Seen:
    """What the feed last saw of one schedule."""

    name: str | None
    enabled: bool
    definition: Mapping[str, Any]


@dataclass
class Page:
    """One reply's worth of events (see :meth:`ChangeFeed.page`)."""

    cursor: int  # pass it back as ``after``
    first_cursor: int  # the oldest ``after`` answered without a gap
    gap: bool
    more: bool
    events: list[dict[str, Any]] = field(default_factory=list)
    waited: bool = True  # False when the wait was refused (too many waiters)


EventFilter = Callable[[Mapping[str, Any]], bool]


def matches(schedule_id: int | None, occurrence_id: int | None) -> EventFilter:
    """Events of one schedule and/or one occurrence (None: any)."""

    def keep(event: Mapping[str, Any]) -> bool:
        if schedule_id is not None and event.get("schedule_id") != schedule_id:
            return False
        return occurrence_id is None or event.get("occurrence_id") == occurrence_id

    return keep


class ChangeFeed:
    """The feed of one voter's machine (``appliance.runner.machine.Machine``)."""

    def __init__(self, machine: Any, *, events_max: int = FEED_EVENTS_MAX) -> None:
        self._machine = machine
        self._events_max = events_max
        self._cond = threading.Condition()
        self._entries: deque[tuple[int, list[dict[str, Any]]]] = deque()
        self._held = 0  # events in _entries
        self._waiters = 0
        # The shadow and the cursor are taken under the machine's lock together with the
        # listener's registration, so no apply falls between them.
        with machine.lock:
            self._occurrences, self._schedules, self._paused = _shadow(machine.state)
            self._owner = _owner_of(machine.state)
            self._cursor = machine.applied_index
            self._first = machine.applied_index
            machine.on_changes(self._on_changes)

    # ---- the apply side ------------------------------------------------------------------------

    def _on_changes(
        self, index: int, command: Any, written: Iterable[str], deleted: Iterable[str]
    ) -> None:
        if index <= self._cursor:
            return  # already in the shadow (registered while this entry was being applied)
        jumped = index != self._cursor + 1
        at_s = getattr(command, "at_s", None)
        if jumped:
            events = self._machine.read(lambda st: self._resync(st))
        else:
            events = self._machine.read(lambda st: self._diff(st, written, deleted))
        for event in events:
            event["index"] = index
            if "at" not in event and isinstance(at_s, int):
                event["at"] = instant_text(at_s)
            if jumped:
                event["resync"] = True
        with self._cond:
            self._cursor = index
            if events:
                self._entries.append((index, events))
                self._held += len(events)
                while self._held > self._events_max and len(self._entries) > 1:
                    dropped_index, dropped = self._entries.popleft()
                    self._held -= len(dropped)
                    self._first = dropped_index
            self._cond.notify_all()

    def _diff(
        self, st: core.SchedulerState, written: Iterable[str], deleted: Iterable[str]
    ) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        gone = set(deleted)
        for name in sorted(set(written) | gone, key=_part_order):
            if name.startswith(_OCCURRENCE):
                oid = int(name[len(_OCCURRENCE) :])
                record = None if name in gone else st.occurrences.get(oid)
                event = self._occurrence(oid, record)
            elif name.startswith(_SCHEDULE):
                sid = int(name[len(_SCHEDULE) :])
                event = self._schedule(sid, None if name in gone else st.schedules.get(sid))
            elif name == PAUSED_PART:
                event = self._pause(core.paused_since(st))
            elif name == OWNERSHIP_PART:
                event = self._ownership(st)
            else:
                continue
            if event is not None:
                events.append(event)
        return events

    def _resync(self, st: core.SchedulerState) -> list[dict[str, Any]]:
        names = {f"{_OCCURRENCE}{oid}" for oid in set(st.occurrences) | set(self._occurrences)}
        names |= {f"{_SCHEDULE}{sid}" for sid in set(st.schedules) | set(self._schedules)}
        names |= {PAUSED_PART, OWNERSHIP_PART}
        present = {f"{_OCCURRENCE}{oid}" for oid in st.occurrences}
        present |= {f"{_SCHEDULE}{sid}" for sid in st.schedules} | {PAUSED_PART, OWNERSHIP_PART}
        return self._diff(st, present, names - present)

    def _occurrence(self, oid: int, record: Any) -> dict[str, Any] | None:
        before = self._occurrences.get(oid)
        if record is None:  # retired from retention (or never seen): not a state change
            self._occurrences.pop(oid, None)
            return None
        now = (record.state.value, record.attempt)
        if before == now:
            return None
        self._occurrences[oid] = now
        last = record.timeline[-1] if record.timeline else None
        event: dict[str, Any] = {
            "kind": "occurrence",
            "occurrence_id": oid,
            "schedule_id": record.schedule_id,
            "state": now[0],
            "previous": None if before is None else before[0],
            "attempt": record.attempt,
            "due": instant_text(record.due_s),
        }
        if last is not None:
            event["at"] = instant_text(last.at_s)
            event["reason"] = last.reason
        if record.failure_reason and now[0] != "Succeeded":
            event["failure_reason"] = record.failure_reason
        if record.not_before_s is not None and now[0] == "Pending":
            event["not_before"] = instant_text(record.not_before_s)
        return event

    def _schedule(self, sid: int, schedule: Any) -> dict[str, Any] | None:
        before = self._schedules.get(sid)
        if schedule is None:
            if before is None:
                return None
            del self._schedules[sid]
            return {
                "kind": "schedule",
                "schedule_id": sid,
                "change": "deleted",
                "name": before.name,
            }
        seen = _seen(schedule)
        self._schedules[sid] = seen
        event: dict[str, Any] = {"kind": "schedule", "schedule_id": sid, "name": seen.name}
        if before is None:
            return {**event, "change": "created"}
        changed = [
            f for f in DEFINITION_FIELDS if before.definition.get(f) != seen.definition.get(f)
        ]
        if changed:
            return {**event, "change": "updated", "fields": changed}
        if before.enabled != seen.enabled:
            return {**event, "change": "enabled" if seen.enabled else "disabled"}
        return None

    def _pause(self, since_s: int | None) -> dict[str, Any] | None:
        paused = since_s is not None
        if paused == self._paused:
            return None
        self._paused = paused
        if paused:
            return {"kind": "pause", "change": "paused", "at": instant_text(since_s)}
        return {"kind": "pause", "change": "resumed"}

    def _ownership(self, st: core.SchedulerState) -> dict[str, Any] | None:
        owner = ownership_of(st.extra.get)
        now = None if owner is None else (owner.node, owner.epoch)
        if now is None or now == self._owner:  # seeding rewrites the part, not the owner
            return None
        self._owner = now
        return {
            "kind": "owner",
            "change": "acquired",
            "node": owner.node,
            "term": owner.term,
            "epoch": owner.epoch,
            "at": instant_text(owner.acquired_at_s),
        }

    # ---- the reading side ----------------------------------------------------------------------

    @property
    def cursor(self) -> int:
        with self._cond:
            return self._cursor

    def page(
        self,
        after: int | None,
        wait_ms: int = 0,
        keep: EventFilter | None = None,
        *,
        counted: bool = True,
    ) -> Page:
        """The events of entries after ``after`` that ``keep`` accepts; when there are none, wait
        up to ``wait_ms`` (bounded) for one. ``after=None``: no events, only the cursor (a watch
        that starts now). ``counted=False`` is for the console's one reader thread, which holds
        no listener thread: it waits outside the ``WAITERS_MAX`` requests (module docstring)."""
        wait_s = min(max(wait_ms, 0), WAIT_MS_MAX) / 1000
        deadline = time.monotonic() + wait_s
        with self._cond:
            if after is None:
                return Page(self._cursor, self._first, False, False)
            waiting = False
            try:
                while True:
                    page = self._collect(after, keep)
                    remaining = deadline - time.monotonic()
                    if page.events or page.gap or remaining <= 0:
                        return page
                    if not waiting and counted:
                        if self._waiters >= WAITERS_MAX:
                            page.waited = False
                            return page
                        self._waiters += 1
                        waiting = True
                    # An entry that matched nothing moves the cursor too: look from there.
                    after = max(after, page.cursor)
                    self._cond.wait(remaining)
            finally:
                if waiting:
                    self._waiters -= 1

    def _collect(self, after: int, keep: EventFilter | None) -> Page:
        gap = after < self._first
        events: list[dict[str, Any]] = []
        cursor = max(after, self._first) if gap else after
        more = False
        for index, entry_events in self._entries:
            if index <= after:
                continue
            chosen = [e for e in entry_events if keep is None or keep(e)]
            if events and len(events) + len(chosen) > EVENTS_PER_REPLY_MAX:
                more = True
                break
            events.extend(dict(e) for e in chosen)
            cursor = index
        if not more:
            cursor = max(cursor, self._cursor)
        return Page(cursor, self._first, gap, more, events)


def _part_order(name: str) -> tuple[int, int]:
    """The owner (a takeover fences occurrences), schedules, occurrences (by id), then the
    pause: the order a reader expects."""
    if name == OWNERSHIP_PART:
        return 0, 0
    for rank, prefix in enumerate((_SCHEDULE, _OCCURRENCE), start=1):
        if name.startswith(prefix):
            return rank, int(name[len(prefix) :])
    return 3, 0


def _seen(schedule: Any) -> _Seen:
    definition = definition_to_json(schedule.definition)
    return _Seen(definition.get("name"), bool(schedule.enabled), definition)


def _owner_of(st: core.SchedulerState) -> tuple[str, int] | None:
    owner = ownership_of(st.extra.get)
    return None if owner is None else (owner.node, owner.epoch)


def _shadow(
    st: core.SchedulerState,
) -> tuple[dict[int, tuple[str, int]], dict[int, _Seen], bool]:
    occurrences = {oid: (r.state.value, r.attempt) for oid, r in st.occurrences.items()}
    schedules = {sid: _seen(s) for sid, s in st.schedules.items()}
    return occurrences, schedules, core.paused_since(st) is not None
