"""Where the console's live view comes from: ``LiveSource``, and the hub that numbers and replays.

Theory of operation. The console pushes two kinds of news to open pages: *changes* (an
occurrence moved to a new state or attempt, a schedule was created, updated or deleted, the
cluster was paused or resumed, ownership moved) and *output* (console lines of a running
attempt that a page follows). ``LiveSource`` is the one seam that produces them; the rest of the
console (``EventHub``: ids, replay, the pusher) does not care where they come from.

``RunnerStateSource`` is today's source, built on what a voter already exposes:

- changes: the machine calls a listener after every apply (``Machine.on_applied``), which only
  sets an event; a thread then takes references to the records under the machine's lock and
  compares them with the previous ones by identity (records are immutable values, replaced on
  every transition). A burst of more than ``BULK_CHANGES_MIN`` changes in one look is sent as
  one ``bulk`` change (the pages reload) rather than hundreds of messages. Looks are at least
  ``LOOK_INTERVAL_S`` apart, so the pages learn a commit within about that.
- output: for each occurrence an open page follows (at most ``FOLLOWED_MAX``), a second thread
  asks the worker's executions route every ``OUTPUT_POLL_S`` for the attempt's document while it
  runs, and once more when it ended, and sends what the console text grew by. Whatever
  ``output`` the worker's document carries is passed through: today's worker returns it once the
  attempt ended; a worker that reports it while running (issue 35's live output) makes the
  lines appear as they are produced, with no change here.

When the runner gains its committed-change feed (issue 35), a source reading that feed replaces
this class; ``LiveSource`` is the whole contract.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appliance.console.views import rfc3339
from appliance.core.occurrence import Occurrence, OccurrenceState
from appliance.metrics.voter import observe_execution
from appliance.owner.binding import execution_id

log = logging.getLogger("appliance.console.feed")

S = OccurrenceState
LOOK_INTERVAL_S: Final = 0.1
IDLE_LOOK_S: Final = 1.0  # a look even without an apply (a restored snapshot, a missed wake)
BULK_CHANGES_MIN: Final = 64
FOLLOWED_MAX: Final = 16
OUTPUT_POLL_S: Final = 0.5
OUTPUT_TEXT_BYTES_MAX: Final = 64 * 1024
REPLAY_EVENTS_MAX: Final = 1024
REPLAY_BYTES_MAX: Final = 1024 * 1024


@dataclass(frozen=True)
class FeedEvent:
    """One piece of news: ``event`` is the SSE event name (``change`` or ``output``)."""

    event: str
    data: dict[str, Any]
    occurrence_id: int | None = None  # output: only streams following it receive it


Publish = Callable[[FeedEvent], None]


class LiveSource(Protocol):
    """What produces the console's live news (see the module docstring)."""

    def start(self, publish: Publish) -> None: ...

    def stop(self) -> None: ...

    def follow(self, occurrence_id: int) -> bool:
        """Start sending the output of ``occurrence_id``; False when too many are followed."""
        ...

    def unfollow(self, occurrence_id: int) -> None: ...


class RunnerLike(Protocol):
    machine: Any
    worker: Any


def occurrence_change(record: Occurrence) -> dict[str, Any]:
    return {
        "kind": "occurrence",
        "id": record.id,
        "schedule_id": record.schedule_id,
        "state": record.state.value,
        "attempt": record.attempt,
        "due_at": rfc3339(record.due_s),
    }


def changes_between(
    before: tuple[dict[int, Any], dict[int, Any], Any, Any],
    after: tuple[dict[int, Any], dict[int, Any], Any, Any],
) -> list[dict[str, Any]]:
    """The changes from one look to the next (identity comparison of immutable values)."""
    old_occ, old_sched, old_paused, old_owner = before
    new_occ, new_sched, new_paused, new_owner = after
    changes: list[dict[str, Any]] = []
    for oid, record in new_occ.items():
        if old_occ.get(oid) is not record:
            changes.append(occurrence_change(record))
    for sid, schedule in new_sched.items():
        known = old_sched.get(sid)
        if known is None:
            changes.append({"kind": "schedule", "id": sid, "change": "created"})
        elif known is not schedule:
            changes.append({"kind": "schedule", "id": sid, "change": "updated"})
    for sid in old_sched.keys() - new_sched.keys():
        changes.append({"kind": "schedule", "id": sid, "change": "deleted"})
    if old_paused != new_paused or old_owner != new_owner:
        changes.append({"kind": "cluster", "paused": new_paused is not None})
    return changes


def _look(st: Any) -> tuple[dict[int, Any], dict[int, Any], Any, Any]:
    return (dict(st.occurrences), dict(st.schedules), st.extra.get("paused"),
            json.dumps(st.extra.get("ownership"), sort_keys=True, default=str))  # fmt: skip


class RunnerStateSource:
    """Changes from the voter's applied state, output from the worker (module docstring)."""

    def __init__(self, runner: RunnerLike, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._runner = runner
        self._clock = clock
        self._publish: Publish | None = None
        self._applied = threading.Event()
        self._stop = threading.Event()
        self._followed: dict[int, int] = {}  # occurrence id -> pages following it
        self._sent: dict[int, tuple[str, int, str]] = {}  # oid -> (execution id, chars, text)
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._watch_changes, name="console-changes", daemon=True),
            threading.Thread(target=self._watch_output, name="console-output", daemon=True),
        ]
        on_applied = getattr(runner.machine, "on_applied", None)
        if on_applied is not None:
            on_applied(lambda *_: self._applied.set())

    def start(self, publish: Publish) -> None:
        self._publish = publish
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._applied.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(5.0)

    def follow(self, occurrence_id: int) -> bool:
        with self._lock:
            if occurrence_id not in self._followed and len(self._followed) >= FOLLOWED_MAX:
                return False
            self._followed[occurrence_id] = self._followed.get(occurrence_id, 0) + 1
        return True

    def unfollow(self, occurrence_id: int) -> None:
        with self._lock:
            left = self._followed.get(occurrence_id, 0) - 1
            if left > 0:
                self._followed[occurrence_id] = left
            else:
                self._followed.pop(occurrence_id, None)
                self._sent.pop(occurrence_id, None)

    # -- changes --

    def _watch_changes(self) -> None:
        previous = self._runner.machine.read(_look)
        last_look = self._clock()
        while not self._stop.is_set():
            self._applied.wait(IDLE_LOOK_S)
            if self._stop.is_set():
                return
            wait_s = LOOK_INTERVAL_S - (self._clock() - last_look)
            if wait_s > 0 and self._stop.wait(wait_s):
                return
            self._applied.clear()
            last_look = self._clock()
            try:
                current = self._runner.machine.read(_look)
                changes = changes_between(previous, current)
            except Exception:  # a bug here must not end the live view
                log.exception("console: reading the applied state failed")
                continue
            previous = current
            if len(changes) >= BULK_CHANGES_MIN:
                changes = [{"kind": "bulk", "count": len(changes)}]
            for change in changes:
                self._emit(FeedEvent("change", change))

    # -- output --

    def _watch_output(self) -> None:
        while not self._stop.wait(OUTPUT_POLL_S):
            with self._lock:
                followed = list(self._followed)
            for occurrence_id in followed:
                try:
                    self._poll_output(occurrence_id)
                except Exception:
                    log.exception("console: following occurrence %d failed", occurrence_id)

    def _poll_output(self, occurrence_id: int) -> None:
        record = self._runner.machine.read(lambda st: st.occurrences.get(occurrence_id))
        if record is None or (record.state is S.PENDING and record.execution_id is None):
            return
        eid = (
            record.execution_id
            if record.state is S.PENDING
            else execution_id(record.schedule_id, record.id, record.attempt)
        )
        with self._lock:
            sent = self._sent.get(occurrence_id)
        if sent is not None and sent[0] == eid and sent[1] < 0:
            return  # its final output was sent already
        observed = observe_execution(self._runner, eid)  # a fleet: the worker that ran it
        document = observed.document if observed.status else None
        if not isinstance(document, dict):
            return
        output = document.get("output") if isinstance(document.get("output"), dict) else {}
        text = output.get("text") if isinstance(output.get("text"), str) else ""
        text = text[:OUTPUT_TEXT_BYTES_MAX]
        final = observed.status not in ("running", "queued", "accepted", "submitted")
        previous = "" if sent is None or sent[0] != eid else sent[2]
        if text.startswith(previous):
            offset, piece = len(previous), text[len(previous) :]
        else:  # a new attempt, or the worker's text was cut differently: send it whole
            offset, piece = 0, text
        if piece or final:
            self._emit(
                FeedEvent(
                    "output",
                    {
                        "occurrence_id": occurrence_id,
                        "execution_id": eid,
                        "offset": offset,
                        "text": piece,
                        "truncated": bool(output.get("truncated")),
                        "final": final,
                        "status": observed.status,
                    },
                    occurrence_id,
                )
            )
        with self._lock:
            if occurrence_id in self._followed:
                self._sent[occurrence_id] = (eid, -1 if final else len(text), text)

    def _emit(self, event: FeedEvent) -> None:
        publish = self._publish
        if publish is not None:
            publish(event)


class EventHub:
    """Numbers the news, keeps a bounded replay window, and hands messages to the pusher."""

    def __init__(self, send: Callable[[bytes, int | None], None]) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._next_id = 1
        self._window: deque[tuple[int, bytes, int | None]] = deque()
        self._window_bytes = 0

    @property
    def last_id(self) -> int:
        with self._lock:
            return self._next_id - 1

    def publish(self, event: FeedEvent) -> None:
        with self._lock:
            event_id = self._next_id
            self._next_id += 1
            message = sse_message(event.event, event.data, event_id)
            self._window.append((event_id, message, event.occurrence_id))
            self._window_bytes += len(message)
            while self._window and (
                len(self._window) > REPLAY_EVENTS_MAX or self._window_bytes > REPLAY_BYTES_MAX
            ):
                self._window_bytes -= len(self._window.popleft()[1])
            self._send(message, event.occurrence_id)

    def replay(self, after_id: int, follow: int | None) -> list[bytes] | None:
        """Messages after ``after_id`` for a stream (its followed output included), or None
        when some of them have left the window (the page must reload)."""
        with self._lock:
            if after_id > self._next_id - 1:
                return None  # an id from before a restart
            if after_id < self._next_id - 1 and (
                not self._window or self._window[0][0] > after_id + 1
            ):
                return None
            return [
                message
                for event_id, message, occurrence in self._window
                if event_id > after_id and (occurrence is None or occurrence == follow)
            ]


def sse_message(event: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    """One server-sent event (JSON data on one line: json.dumps escapes every newline)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode("utf-8")
