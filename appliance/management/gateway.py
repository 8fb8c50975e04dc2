"""The management listener's one door into the runner loop: ``CommandGateway``.

Theory of operation (seeds/000, "Management adapters preserve the durable boundary"): stdin, HTTP
and MCP commands enter the SAME serialized runner loop; an adapter never schedules, retries or
cancels anything by itself. The listener therefore only validates a command (before the queue),
hands the validated command document to ``CommandGateway.submit`` and waits for the loop's reply.

Contract of a gateway (any implementation):

- ``submit(command, role=...)`` either admits the command to a bounded queue and returns a
  ``Submitted`` handle, or raises ``QueueFull`` (nothing was queued: the caller may retry, the
  HTTP answer is 503 ``accepted: false``). ``command`` is exactly the stdin document of seeds/001
  (``{"action": "create", "definition": {...}}`` ...), already validated; ``role`` is
  ``"operator"`` or ``"recovery"`` (the loop may log it; authorization was done by the listener).
- From admission on, the command belongs to the loop: a client that disconnects, or a listener
  that stops waiting, does not withdraw it (there is deliberately no ``cancel``/``withdraw``).
- ``Submitted.wait(timeout_s)`` returns the loop's success reply (a JSON object), or raises
  ``NotOwner`` (this voter is not the acquired owner: the command was not applied, HTTP 409),
  ``DefinitelyRefused`` (the loop knows the command did not and will not take effect: it failed
  validation before it was proposed, or a committed apply refused it; HTTP 400/404/422 with the
  core's reason, see ``refusals``), ``Uncertain`` (anything else after admission, including the
  wait timing out: the command may or may not have taken effect, HTTP 503
  ``outcome: "uncertain"``, ``retry_safe: false``). A loop may also resolve with its stdin-shaped
  error reply (``{"ok": false, "status": 400, ...}``); ``replies.run_command`` classifies it.

``BoundedCommandQueue`` is the real queue (64 slots by default) with both sides: the listener
threads call ``submit``; the runner loop calls ``take()`` (or ``take_nowait()``) and completes each
``Submitted`` with ``resolve(reply)``, ``not_owner(leader_hint)``, ``refused(status, code,
message)`` or ``uncertain(reason)``. The
consumer side is documented for the runner in README-gateway.md.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

COMMAND_QUEUE_SLOTS: Final = 64
ROLES: Final = frozenset({"operator", "recovery", "admin"})


class GatewayError(Exception):
    """Base of the outcomes a gateway reports instead of a reply."""


class QueueFull(GatewayError):
    """The bounded queue has no free slot: the command was NOT queued (safe to retry later)."""


class NotOwner(GatewayError):
    """This voter is not the acquired owner; the command was not applied."""

    def __init__(self, leader_hint: str | None = None) -> None:
        super().__init__("this voter is not the acquired owner")
        self.leader_hint = leader_hint


class DefinitelyRefused(GatewayError):
    """The command certainly did not take effect (validation, or a committed apply refused it).

    ``message`` is the core's reason (it names fields and states, never source or paths) and is
    sent to the caller; ``status`` is 400, 404 or 422.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        if status not in (400, 404, 422):
            raise ValueError(f"status: a definite refusal is 400, 404 or 422, not {status}")
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Uncertain(GatewayError):
    """After admission, the outcome is not known (failure, timeout, runner stopping).

    ``reason`` is for the local log only: it may hold internal details and is never sent to a
    remote caller.
    """

    def __init__(self, reason: str = "outcome unknown") -> None:
        super().__init__(reason)
        self.reason = reason


class Submitted:
    """One admitted command; completed exactly once by the loop, awaited by the listener."""

    __slots__ = ("_done", "_error", "_lock", "_reply", "command", "role")

    def __init__(self, command: Mapping[str, Any], role: str) -> None:
        self.command = dict(command)
        self.role = role
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._reply: dict[str, Any] | None = None
        self._error: GatewayError | None = None

    # -- consumer side (the runner loop) --------------------------------------------------------

    def resolve(self, reply: Mapping[str, Any]) -> None:
        """The command was executed; ``reply`` is its success reply (a JSON object)."""
        self._complete(dict(reply), None)

    def not_owner(self, leader_hint: str | None = None) -> None:
        self._complete(None, NotOwner(leader_hint))

    def refused(self, status: int, code: str, message: str) -> None:
        """The command certainly did not take effect (see ``DefinitelyRefused``)."""
        self._complete(None, DefinitelyRefused(status, code, message))

    def uncertain(self, reason: str = "outcome unknown") -> None:
        self._complete(None, Uncertain(reason))

    def _complete(self, reply: dict[str, Any] | None, error: GatewayError | None) -> None:
        with self._lock:
            if self._done.is_set():
                # A second completion would mean two loops executed one command: refuse loudly.
                raise RuntimeError("a submitted command was completed twice")
            self._reply, self._error = reply, error
            self._done.set()

    # -- listener side ---------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """The reply, or ``NotOwner`` / ``DefinitelyRefused`` / ``Uncertain`` (also when
        ``timeout_s`` elapses)."""
        if not self._done.wait(timeout_s):
            raise Uncertain(f"no reply from the runner loop within {timeout_s}s")
        if self._error is not None:
            raise self._error
        if self._reply is None:
            raise Uncertain("the runner loop completed the command without a reply")
        return self._reply

    def __repr__(self) -> str:
        # Never the definition (it holds the source).
        return f"Submitted(action={self.command.get('action')!r}, done={self.done})"


class CommandGateway(Protocol):
    """What the management listener needs from the runner (see the module docstring)."""

    def submit(self, command: Mapping[str, Any], *, role: str) -> Submitted: ...


class BoundedCommandQueue:
    """A ``CommandGateway`` backed by a real bounded FIFO; the runner loop is its consumer."""

    def __init__(
        self,
        slots: int = COMMAND_QUEUE_SLOTS,
        *,
        on_submit: Callable[[], None] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError("a command queue needs at least one slot")
        self.slots = slots
        self._queue: queue.Queue[Submitted] = queue.Queue(maxsize=slots)
        # Lets an event-driven loop wake up when a command arrives (e.g. set an Event).
        self._on_submit = on_submit
        self.rejected_full = 0  # queue rejections since start, for status/metrics

    def submit(self, command: Mapping[str, Any], *, role: str) -> Submitted:
        if role not in ROLES:
            raise ValueError(f"unknown management role {role!r}")
        submitted = Submitted(command, role)
        try:
            self._queue.put_nowait(submitted)
        except queue.Full:
            self.rejected_full += 1
            raise QueueFull(f"the command queue is full ({self.slots} commands)") from None
        if self._on_submit is not None:
            self._on_submit()
        return submitted

    def take(self, timeout_s: float | None = None) -> Submitted | None:
        """The oldest queued command, waiting up to ``timeout_s`` (None: forever)."""
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def take_nowait(self) -> Submitted | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def __len__(self) -> int:
        return self._queue.qsize()

    def __repr__(self) -> str:
        return f"BoundedCommandQueue(queued={len(self)}, slots={self.slots})"


Handler = Callable[[dict[str, Any]], Mapping[str, Any]]


def execute(submitted: Submitted, handler: Handler) -> None:
    """Run ``handler`` on one command and complete it; for a loop that executes synchronously.

    ``handler`` returns the reply, or raises ``NotOwner`` or ``DefinitelyRefused``; any other
    exception becomes ``Uncertain`` (nothing says whether it took effect), and its text stays in
    the local log.
    """
    try:
        reply = handler(submitted.command)
    except NotOwner as exc:
        submitted.not_owner(exc.leader_hint)
    except DefinitelyRefused as exc:
        submitted.refused(exc.status, exc.code, exc.message)
    except Uncertain as exc:
        submitted.uncertain(exc.reason)
    except Exception as exc:
        submitted.uncertain(f"{type(exc).__name__}: {exc}")
    else:
        submitted.resolve(reply)


class ThreadedConsumer:
    """A stand-in runner loop: one thread that executes queued commands in order with a handler.

    Used by tests and by tools that need a listener without a voter. ``pause()`` holds the
    consumer before its next command so tests can fill the queue deterministically.
    """

    def __init__(self, gateway: BoundedCommandQueue, handler: Handler) -> None:
        self._gateway = gateway
        self._handler = handler
        self._running = threading.Event()
        self._running.set()
        self._parked = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="mgmt-consumer", daemon=True)
        self.executed = 0

    def start(self) -> ThreadedConsumer:
        self._thread.start()
        return self

    def pause(self, timeout_s: float = 5.0) -> None:
        """Hold the consumer; returns once it is parked (it takes nothing more until resumed)."""
        self._running.clear()
        if self._thread.is_alive() and not self._parked.wait(timeout_s):
            raise RuntimeError("the consumer did not park in time")

    def resume(self) -> None:
        self._running.set()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once the queue is empty and the consumer is between commands (for tests)."""
        deadline_s = time.monotonic() + timeout_s
        with self._idle:
            while len(self._gateway) > 0 or self._busy:
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    return False
                self._idle.wait(min(remaining_s, 0.05))
            return True

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._running.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._running.is_set():
                self._parked.set()
                self._running.wait()
                self._parked.clear()
            if self._stop.is_set():
                return
            # Taking happens under the idle lock so wait_idle() never sees "empty and not busy"
            # while a command is in flight between the queue and the handler.
            with self._idle:
                submitted = self._gateway.take(timeout_s=0.05)
                self._busy = submitted is not None
                if submitted is None:
                    self._idle.notify_all()
            if submitted is None:
                continue
            try:
                execute(submitted, self._handler)
                self.executed += 1
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
