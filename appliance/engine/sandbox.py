"""One execution inside an engine child: its isolate, its driver thread, its fetches.

Theory of operation
-------------------
A child hosts several sandboxes at once (child.py), each with its own V8 isolate (v8.py). The
sandbox's driver thread starts the script, then waits — never on the isolate itself — for one
of: the answer to the one call it has outstanding (``run``, later ``take``), the doorbell (the
harness has something to take), a stop request, the deadline, or the next look at the heap
flag. Each take record is acted on at once: console text goes to the parent as an ``output``
frame (so a running attempt's output is readable while it runs), fetch requests become
exchanges of the egress gate (prepared in call order, each run on its own *request thread*),
aborts abort their exchanges, and an outcome ends the run. A request thread hands its answer
back with a ``deliver`` call and exits.

How it ends, and what is proved before the parent hears of it:

- **outcome** (completed, or an exception the harness caught): nothing more is asked of the
  script.
- **timeout, out of memory, stop (cancel)**: the outstanding call is cancelled (V8 terminates
  a script spinning in it); for a timeout or out of memory one ``take`` is tried within
  ``OUTPUT_GRACE_SECONDS`` to keep the last console text (a script spinning outside any call —
  in a timer or a promise reaction — does not answer, and that text is lost).

Then, every time: the egress attempt is closed (a request still in flight is aborted and its
sockets closed), the isolate disposed (terminating anything still running, a leftover timer
included) and every request thread joined; the slot is given back to the child; and only then
does ``done`` go out, saying ``disposed: true`` when each of those steps was confirmed within
the run's ``dispose_seconds``. So ``done`` always means: nothing of this execution runs any
more, or the parent must kill and reap the child (SPEC §12).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from appliance.engine import protocol
from appliance.engine.model import (
    DISPOSE_SECONDS_DEFAULT,
    ERROR_LIMIT_BYTES,
    MIB,
    OUTPUT_GRACE_SECONDS,
    REASON_CANCELLED,
    REASON_EXCEPTION,
    REASON_OUT_OF_MEMORY,
    REASON_TIMEOUT,
)
from appliance.engine.procstat import rss_bytes
from appliance.engine.protocol import truncate_utf8
from appliance.engine.text import well_formed
from appliance.engine.v8 import Isolate

# How often the driver looks at the heap flag when nothing else wakes it: an out-of-memory
# termination inside a timer or a promise reaction tells nobody.
HEAP_POLL_SECONDS = 0.1

Send = Callable[[dict[str, Any]], None]


class Sandbox:
    """One execution in the child. ``start`` once; ``request_stop`` from any thread."""

    def __init__(
        self,
        request: dict[str, Any],
        isolate: Isolate,
        gate: Any,
        send: Send,
        on_finished: Callable[[Sandbox, bool], None],
    ) -> None:
        self.execution_id = str(request["execution_id"])
        self.heap_bytes = int(request["heap_mb"]) * MIB
        dispose = request.get("dispose_seconds")
        self._dispose_seconds = (
            float(dispose)
            if isinstance(dispose, int | float) and dispose > 0
            else DISPOSE_SECONDS_DEFAULT
        )
        self._request = request
        self._isolate = isolate
        self._gate = gate
        self._send = send
        self._on_finished = on_finished
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._stop_requested = False
        self._attempt: Any = None
        self._deadline = 0.0
        self._exchanges: dict[int, Any] = {}
        self._script_aborted: set[int] = set()
        self._request_threads: list[threading.Thread] = []
        self._ending = False
        self._truncated = False
        self._bell = False
        self._output_lost = False
        self._thread = threading.Thread(
            target=self._drive, name=f"sandbox-{self.execution_id[:32]}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        with self._lock:
            self._stop_requested = True
        self._wake.set()

    # ----- the driver --------------------------------------------------------------------

    def _drive(self) -> None:
        try:
            reply, disposed = self._run_to_the_end()
        except Exception as exc:  # a bug here must not leave the parent waiting
            error, _ = truncate_utf8(f"engine child error: {exc!r}", ERROR_LIMIT_BYTES)
            self._close_egress()
            disposed = self._dispose()
            reply = {"status": "failed", "reason": REASON_EXCEPTION, "error": error}
        # The child frees the slot before the parent hears of it: a run the parent sends for
        # this slot right after ``done`` finds it free.
        self._on_finished(self, disposed)
        self._send_done(reply, disposed)

    def _run_to_the_end(self) -> tuple[dict[str, Any], bool]:
        request = self._request
        timeout_seconds = float(request["timeout_seconds"])
        isolate = self._isolate
        isolate.set_heap_limit_bytes(self.heap_bytes)
        isolate.on_bell(self._ring)
        start = json.dumps(
            {
                "code": str(request["code"]),
                "scheduled": request["scheduled"],
                "output_limit_bytes": int(request["output_limit_bytes"]),
                "fetch": self._gate is not None,
            }
        )
        self._send({"type": protocol.MSG_RUNNING, "execution_id": self.execution_id})
        self._deadline = deadline = time.monotonic() + timeout_seconds
        pending: Future[Any] | None = self._call("start", start)
        result_limit_bytes = int(request["result_limit_bytes"])
        while True:
            self._wake.clear()  # everything is looked at below, after the clear: no lost wake
            if self._stopping():
                return self._end_stopped(pending)
            if pending is not None and pending.done():
                try:
                    record = json.loads(pending.result())
                except Exception as exc:
                    if isolate.heap_limit_reached():
                        return self._end_out_of_memory(None)
                    error, _ = truncate_utf8(str(exc), ERROR_LIMIT_BYTES)
                    return self._end_with(
                        {"status": "failed", "reason": REASON_EXCEPTION, "error": error}
                    )
                pending = None
                outcome = self._act_on(record)
                if outcome is not None:
                    return self._end_with(_describe(outcome, result_limit_bytes))
            if isolate.heap_limit_reached():
                return self._end_out_of_memory(pending)
            if pending is None and self._take_bell():
                pending = self._call("take")
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return self._end_timed_out(pending)
            self._wake.wait(min(left, HEAP_POLL_SECONDS))

    def _call(self, name: str, this_text: str | None = None) -> Future[Any]:
        """The one call the driver has outstanding; its answer wakes the driver."""
        future = self._isolate.call(name, this_text)
        future.add_done_callback(lambda _future: self._wake.set())
        return future

    def _ring(self) -> None:
        """The doorbell (the isolate's loop thread): something to take."""
        with self._lock:
            self._bell = True
        self._wake.set()

    def _take_bell(self) -> bool:
        with self._lock:
            rang, self._bell = self._bell, False
        return rang

    def _stopping(self) -> bool:
        with self._lock:
            return self._stop_requested

    # ----- what a take record says ----------------------------------------------------------

    def _act_on(self, record: dict[str, Any]) -> dict[str, Any] | None:
        out = record.get("out")
        self._truncated = self._truncated or record.get("truncated") is True
        if isinstance(out, str) and out:
            self._send(
                {
                    "type": protocol.MSG_OUTPUT,
                    "execution_id": self.execution_id,
                    "text": out,
                    "truncated": self._truncated,
                }
            )
        outcome = record.get("outcome")
        if isinstance(outcome, dict):
            return outcome  # a fetch made in the same turn would outlive the script: not sent
        for entry in record.get("requests") or ():
            self._start_fetch(entry)
        for fetch_id in record.get("aborts") or ():
            self._abort_fetch(fetch_id)
        return None

    def _start_fetch(self, entry: Any) -> None:
        fetch_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(fetch_id, int) or isinstance(fetch_id, bool):
            return  # not a record the harness made: nothing to answer
        try:
            attempt = self._egress_attempt()
        except RuntimeError as exc:
            self._deliver(fetch_id, error=("TypeError", f"fetch failed: {exc}"))
            return
        from appliance.egress.model import FetchRequest

        try:
            headers = tuple((well_formed(str(n)), well_formed(str(v))) for n, v in entry["headers"])
            body = entry.get("body")
            fetch_request = FetchRequest(
                url=well_formed(str(entry["url"])),
                method=well_formed(str(entry["method"])),
                headers=headers,
                body=None if body is None else well_formed(str(body)).encode("utf-8"),
                redirect=str(entry.get("redirect") or "manual"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            self._deliver(fetch_id, error=("TypeError", f"malformed fetch request: {exc}"))
            return
        exchange = attempt.prepare(fetch_request)  # in call order: it fixes n
        thread = threading.Thread(
            target=self._run_fetch,
            args=(fetch_id, exchange),
            name=f"fetch-{self.execution_id[:24]}-{fetch_id}",
            daemon=True,
        )
        with self._lock:
            if self._ending:
                exchange.abort()
                return
            self._exchanges[fetch_id] = exchange
            self._request_threads.append(thread)
        thread.start()

    def _egress_attempt(self) -> Any:
        """The execution's egress attempt, opened at its first fetch (the gate may still be
        being built when the script starts)."""
        if self._attempt is None:
            if self._gate is None:
                raise RuntimeError("fetch is not available")
            from appliance.egress.model import EgressInvocation

            gate = self._gate.get(self._deadline - time.monotonic(), self._stopping)
            attempt = gate.open_attempt(
                EgressInvocation.from_scheduled(self._request["scheduled"]), self._deadline
            )
            with self._lock:
                self._attempt = attempt
        return self._attempt

    def _abort_fetch(self, fetch_id: Any) -> None:
        if not isinstance(fetch_id, int) or isinstance(fetch_id, bool):
            return  # not an id the harness made
        with self._lock:
            exchange = self._exchanges.get(fetch_id)
            if exchange is not None:
                self._script_aborted.add(fetch_id)
        if exchange is not None:
            exchange.abort()

    def _run_fetch(self, fetch_id: int, exchange: Any) -> None:
        """A request thread: one exchange, its answer delivered to the script, then exit."""
        from appliance.egress.model import KIND_ABORTED, FetchFailed

        try:
            response = exchange.run()
        except FetchFailed as exc:
            with self._lock:
                by_script = fetch_id in self._script_aborted
            name = "AbortError" if exc.kind == KIND_ABORTED and by_script else "TypeError"
            self._deliver(fetch_id, error=(name, exc.message))
        except Exception as exc:  # the gate's bug must still settle the script's promise
            self._deliver(fetch_id, error=("TypeError", f"fetch failed: {type(exc).__name__}"))
        else:
            self._deliver(
                fetch_id,
                response={
                    "status": response.status,
                    "statusText": response.status_text,
                    "url": response.url,
                    "headers": [list(pair) for pair in response.headers],
                    "body": response.body.decode("utf-8", errors="replace"),
                    "redirected": response.redirected,
                },
            )
        finally:
            with self._lock:
                self._exchanges.pop(fetch_id, None)

    def _deliver(
        self,
        fetch_id: int,
        *,
        response: dict[str, Any] | None = None,
        error: tuple[str, str] | None = None,
    ) -> None:
        with self._lock:
            if self._ending:
                return  # the script is over: nobody is waiting for this answer
        message: dict[str, Any] = {"id": fetch_id}
        if error is not None:
            message["error"] = {"name": error[0], "message": error[1]}
        else:
            message["response"] = response
        # Not awaited: the answer resolves the script's promise, which rings the doorbell.
        self._isolate.call("deliver", json.dumps(message))

    # ----- the ends -------------------------------------------------------------------------

    def _end_with(self, reply: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The script ended by itself: close its egress (a request it left in flight is
        aborted), dispose of everything it started."""
        egress_closed = self._close_egress()
        return reply, self._dispose() and egress_closed

    def _end_timed_out(self, pending: Future[Any] | None) -> tuple[dict[str, Any], bool]:
        self._halt(pending, keep_output=True)
        return self._end_after_halt({"status": "timed_out", "reason": REASON_TIMEOUT})

    def _end_out_of_memory(self, pending: Future[Any] | None) -> tuple[dict[str, Any], bool]:
        # Lift the limit so the console buffer can still be read; the OS backstop stays.
        self._isolate.set_heap_limit_bytes(0)
        self._halt(pending, keep_output=True)
        reply = {
            "status": "failed",
            "reason": REASON_OUT_OF_MEMORY,
            "error": f"V8 heap limit of {self._request['heap_mb']} MiB reached",
        }
        return self._end_after_halt(reply)

    def _end_stopped(self, pending: Future[Any] | None) -> tuple[dict[str, Any], bool]:
        self._halt(pending, keep_output=False)
        return self._end_after_halt({"status": "cancelled", "reason": REASON_CANCELLED})

    def _halt(self, pending: Future[Any] | None, *, keep_output: bool) -> None:
        """Stop the script's outstanding call; optionally take what it wrote last."""
        if pending is not None and not pending.done():
            pending.cancel()  # terminates the call if it is running
        if not keep_output:
            return
        take = self._isolate.call("take")
        try:
            record = json.loads(take.result(timeout=OUTPUT_GRACE_SECONDS))
        except Exception:
            self._output_lost = True
            return
        out = record.get("out") if isinstance(record, dict) else None
        self._truncated = self._truncated or (
            isinstance(record, dict) and record.get("truncated") is True
        )
        if isinstance(out, str) and out:
            self._send(
                {
                    "type": protocol.MSG_OUTPUT,
                    "execution_id": self.execution_id,
                    "text": out,
                    "truncated": self._truncated,
                }
            )

    def _end_after_halt(self, reply: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        egress_closed = self._close_egress()
        disposed = self._dispose() and egress_closed
        if self._output_lost:
            reply["note"] = (
                "the script did not yield at its end (it spun in a timer or promise reaction); "
                "its isolate was terminated and console output after the last line read was lost"
            )
        return reply, disposed

    def _close_egress(self) -> bool:
        with self._lock:
            self._ending = True
        if self._attempt is None:
            return True
        return bool(self._attempt.close(self._dispose_seconds))

    def _dispose(self) -> bool:
        """Terminate and free the isolate, join every request thread: True when proved."""
        with self._lock:
            self._ending = True
            threads = list(self._request_threads)
        deadline = time.monotonic() + self._dispose_seconds
        disposed = self._isolate.dispose(self._dispose_seconds)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return disposed and not any(thread.is_alive() for thread in threads)

    def _send_done(self, reply: dict[str, Any], disposed: bool) -> None:
        done = {
            "type": protocol.MSG_DONE,
            "execution_id": self.execution_id,
            "output_truncated": self._truncated,
            "disposed": disposed,
            "rss_bytes": rss_bytes(),
            **reply,
        }
        if self._attempt is not None:
            done["egress"] = self._attempt.report()
        self._send(done)


def _without_harness_frames(stack: str) -> str:
    """Drop the stack frames that belong to the harness, keeping the script's own."""
    kept = [
        line
        for line in stack.splitlines()
        if not (line.lstrip().startswith("at ") and "<anonymous>" in line)
    ]
    return "\n".join(kept)


def _describe(outcome: dict[str, Any], result_limit_bytes: int) -> dict[str, Any]:
    """The done fields for a settled outcome record of the harness."""
    if outcome.get("ok") is not True:
        stack = outcome.get("stack")
        message = outcome.get("message")
        text = _without_harness_frames(stack if isinstance(stack, str) else "") or str(message)
        error, _ = truncate_utf8(text, ERROR_LIMIT_BYTES)
        return {"status": "failed", "reason": REASON_EXCEPTION, "error": error}
    result_json = outcome.get("json")
    note = outcome.get("note")
    if not isinstance(result_json, str):
        result_json = None
    if result_json is not None and len(result_json.encode("utf-8", "replace")) > result_limit_bytes:
        result_json = None
        note = f"completion value exceeds {result_limit_bytes} bytes as JSON; result is null"
    return {"status": "completed", "result_json": result_json, "note": note}
