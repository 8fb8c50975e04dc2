"""Where the console's live view comes from: the runner's change feed, fanned out; and the hub.

Theory of operation. The console pushes two kinds of news to open pages: *changes* (an
occurrence moved to a new state or attempt, a schedule was created, updated, enabled, disabled
or deleted, the cluster was paused or resumed, ownership moved) and *output* (console lines of a
running attempt that a page follows). It reads both where ``appliance admin watch`` and
``admin output --follow`` read them (docs/management.md "Watching"), so the console and the CLI
cannot tell different stories:

- changes: the voter's committed change feed (``appliance.metrics.feed.ChangeFeed``, the runner's
  ``changes``; served by ``GET /scheduler/v1/events``). ONE reader thread long-polls it for every
  page at once: its wait is uncounted (``counted=False``) so it never takes one of the feed's
  ``WAITERS_MAX`` request slots, and browsers never wait on the feed themselves (the pusher fans
  each message out to every stream). Each feed event is mapped to the console's shape
  (``console_change``); a page of at least ``BULK_CHANGES_MIN`` changes, or a gap (the feed no
  longer holds what came after the reader's cursor), is sent as one ``bulk`` change (the pages
  reload) rather than hundreds of messages. Looks are at least ``LOOK_INTERVAL_S`` apart, so a
  burst of commits is one look.
- output: for each occurrence an open page follows (at most ``FOLLOWED_MAX``), a second thread
  takes the attempt's report through ``occurrence_output`` (appliance/metrics/voter.py: the one
  function behind ``GET /scheduler/v1/events?output=true``) every ``OUTPUT_POLL_S``, and at once
  when the feed shows that occurrence changed, and sends what its console text grew by, until
  the report is final (``FINAL_STATUSES``).

``LiveSource`` is the contract the rest of the console relies on (``EventHub``: ids, replay, the
pusher); ``ChangeFeedSource`` is its one implementation.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appliance.metrics.attempt_report import FINAL_STATUSES
from appliance.metrics.voter import latest_execution_id, occurrence_output

log = logging.getLogger("appliance.console.feed")

READ_WAIT_MS: Final = 500  # the reader's long poll; also how soon it notices a stop
LOOK_INTERVAL_S: Final = 0.1
READ_RETRY_S: Final = 1.0  # after a failed read (a bug must not end the live view)
BULK_CHANGES_MIN: Final = 64
FOLLOWED_MAX: Final = 16
OUTPUT_POLL_S: Final = 0.5
REPLAY_EVENTS_MAX: Final = 1024
REPLAY_BYTES_MAX: Final = 1024 * 1024
THREAD_JOIN_S: Final = 5.0


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


class Feed(Protocol):
    """The part of ``ChangeFeed`` the console reads."""

    @property
    def cursor(self) -> int: ...

    def page(
        self, after: int | None, wait_ms: int = 0, keep: Any = None, *, counted: bool = True
    ) -> Any: ...


Read = Callable[[Callable[[Any], Any]], Any]


def console_change(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """A feed event (docs/management.md "Watching") in the console's shape: ``kind`` and ``id``
    say which page it concerns (console.js ``concerns``); the feed's cursor rides along."""
    kind = event.get("kind")
    if kind == "occurrence":
        return {
            "kind": "occurrence",
            "id": event.get("occurrence_id"),
            "schedule_id": event.get("schedule_id"),
            "state": event.get("state"),
            "attempt": event.get("attempt"),
            "due_at": event.get("due"),
            "index": event.get("index"),
        }
    if kind == "schedule":
        return {
            "kind": "schedule",
            "id": event.get("schedule_id"),
            "change": event.get("change"),
            "index": event.get("index"),
        }
    if kind == "pause":
        return {
            "kind": "cluster",
            "paused": event.get("change") == "paused",
            "index": event.get("index"),
        }
    if kind == "owner":
        return {"kind": "cluster", "owner": event.get("node"), "index": event.get("index")}
    return None  # a kind this console does not show (a newer feed): nothing to refresh


@dataclass
class _Sent:
    """What a followed occurrence's pages were sent last."""

    execution_id: str
    text: str
    final: bool


class ChangeFeedSource:
    """Changes from the runner's change feed, output through ``occurrence_output`` (module
    docstring). ``read`` reads the voter's applied state, ``worker`` is its worker client."""

    def __init__(self, feed: Feed, read: Read, worker: Any) -> None:
        self._feed = feed
        self._read = read
        self._worker = worker
        self._cursor = feed.cursor  # news from now on: a page loads what is already there
        self._publish: Publish | None = None
        self._stop = threading.Event()
        self._output_due = threading.Event()
        self._followed: dict[int, int] = {}  # occurrence id -> pages following it
        self._sent: dict[int, _Sent] = {}
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read_changes, name="console-changes", daemon=True),
            threading.Thread(target=self._follow_output, name="console-output", daemon=True),
        ]

    def start(self, publish: Publish) -> None:
        self._publish = publish
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._output_due.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(THREAD_JOIN_S)

    def follow(self, occurrence_id: int) -> bool:
        with self._lock:
            if occurrence_id not in self._followed and len(self._followed) >= FOLLOWED_MAX:
                return False
            self._followed[occurrence_id] = self._followed.get(occurrence_id, 0) + 1
        self._output_due.set()  # its first lines now, not at the next poll
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

    def _read_changes(self) -> None:
        while not self._stop.is_set():
            try:
                page = self._feed.page(self._cursor, READ_WAIT_MS, counted=False)
            except Exception:  # a bug here must not end the live view
                log.exception("console: reading the change feed failed")
                self._stop.wait(READ_RETRY_S)
                continue
            if self._stop.is_set():
                return
            self._cursor = page.cursor
            self._send_changes(page.events, gap=bool(page.gap))
            if not page.more:
                self._stop.wait(LOOK_INTERVAL_S)

    def _send_changes(self, events: list[dict[str, Any]], *, gap: bool) -> None:
        changes = [change for event in events if (change := console_change(event)) is not None]
        if gap or len(changes) >= BULK_CHANGES_MIN:
            bulk: dict[str, Any] = {"kind": "bulk", "count": len(changes)}
            if gap:
                bulk["gap"] = True
            changes = [bulk]
        for change in changes:
            self._emit(FeedEvent("change", change))
        with self._lock:
            followed = set(self._followed)
        if gap or any(e.get("occurrence_id") in followed for e in events):
            self._output_due.set()  # a followed attempt moved on: its output now

    # -- output --

    def _follow_output(self) -> None:
        while not self._stop.is_set():
            self._output_due.wait(OUTPUT_POLL_S)
            self._output_due.clear()
            if self._stop.is_set():
                return
            with self._lock:
                followed = list(self._followed)
            for occurrence_id in followed:
                try:
                    self._send_output(occurrence_id)
                except Exception:
                    log.exception("console: following occurrence %d failed", occurrence_id)

    def _send_output(self, occurrence_id: int) -> None:
        record = self._read(lambda st: st.occurrences.get(occurrence_id))
        latest = None if record is None else latest_execution_id(record)
        if latest is None:
            return  # not dispatched yet
        with self._lock:
            sent = self._sent.get(occurrence_id)
        if sent is not None and sent.execution_id == latest and sent.final:
            return  # its final output was sent already: no need to ask the worker again
        reply = occurrence_output(self._read, self._worker, occurrence_id)
        if reply.status != 200:
            return  # not at the worker yet, or the worker is unreachable: the next poll
        report = reply.body
        execution_id = str(report.get("execution_id"))
        output = report.get("output") if isinstance(report.get("output"), Mapping) else {}
        text = output.get("text") if isinstance(output.get("text"), str) else ""
        final = report.get("status") in FINAL_STATUSES or bool(report.get("finished_at"))
        previous = "" if sent is None or sent.execution_id != execution_id else sent.text
        if text.startswith(previous):
            offset, piece = len(previous), text[len(previous) :]
        else:  # a new attempt, or the worker's text was cut differently: send it whole
            offset, piece = 0, text
        if piece or final:
            data = {
                "occurrence_id": occurrence_id,
                "execution_id": execution_id,
                "offset": offset,
                "text": piece,
                "bytes": output.get("bytes") if isinstance(output.get("bytes"), int) else None,
                "truncated": bool(output.get("truncated")),
                "final": final,
                "status": report.get("status"),
            }
            self._emit(FeedEvent("output", data, occurrence_id))
        with self._lock:
            if occurrence_id in self._followed:
                self._sent[occurrence_id] = _Sent(execution_id, text, final)

    def _emit(self, event: FeedEvent) -> None:
        publish = self._publish
        if publish is not None:
            publish(event)


class EventHub:
    """Numbers the news, keeps a bounded replay window, and hands messages to the pusher
    (``send(message, occurrence_id, event_id)``, in id order: it is called under the lock)."""

    def __init__(self, send: Callable[[bytes, int | None, int | None], None]) -> None:
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
            self._send(message, event.occurrence_id, event_id)

    def replay(self, after_id: int, follow: int | None) -> list[bytes] | None:
        """Messages after ``after_id`` for a stream (its followed output included), or None
        when some of them have left the window (the page must reload)."""
        with self._lock:
            return self._replay(after_id, follow)

    def opening(self, after_id: int | None, follow: int | None) -> tuple[list[bytes] | None, int]:
        """A new stream's first messages and the newest id, read at once: what came after
        ``after_id`` (``replay``; nothing without one) and the id its first bytes reach to. The
        pusher leaves out of the stream what was published up to that id, so a page's stream
        that resumes from the id its page was rendered at misses nothing and repeats nothing."""
        with self._lock:
            missed = [] if after_id is None else self._replay(after_id, follow)
            return missed, self._next_id - 1

    def _replay(self, after_id: int, follow: int | None) -> list[bytes] | None:
        if after_id > self._next_id - 1:
            return None  # an id from before a restart
        if after_id < self._next_id - 1 and (not self._window or self._window[0][0] > after_id + 1):
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
