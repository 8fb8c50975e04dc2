"""One V8 isolate with the harness installed, and a way to talk to it that never blocks on it.

Theory of operation
-------------------
A child hosts several executions, each in its own isolate (a mini-racer ``MiniRacer``: one V8
isolate, its message-pump thread, and an asyncio loop thread). A script may spin forever — in
its own code, in a timer callback, in a promise reaction — and the child must still be able to
stop *that* execution and prove it stopped, without touching its neighbours (SPEC §12). Two
facts about mini-racer 0.14 shape this module:

- Its public calls into an isolate are not all asynchronous. Calling a JS function with
  arguments, reading an object's property, or awaiting a JS promise from Python posts a task to
  the isolate's pump thread and *blocks* until that task runs, holding a reference to the
  context meanwhile. If the script is spinning, that task never runs; and while the reference
  is held, freeing the context does not run its destructor — the only thing that terminates
  JavaScript running outside a task of ours (a timer callback, a promise reaction). So once a
  script has started, Python makes no such call: every call is a *zero-argument* call of a
  harness function, data travelling as ``this`` (a string needs no isolate to build), started
  as a cancellable task whose answer comes back through a future. The script reaches Python
  through a *doorbell*, a one-way notification whose arguments Python never reads; Python then
  asks the harness (``take``) what happened. Nothing of the public ``wrap_py_function`` is used
  for that reason: its Python side unpacks the call's arguments with exactly such blocking
  reads, so a script that called ``fetch`` and then spun could not be stopped in-process.
- Freeing the context (``mr_free_context``) stops JavaScript (V8 ``TerminateExecution``, then a
  state in which no JavaScript runs), cancels pending tasks, joins the pump thread and disposes
  of the isolate. ``dispose`` does that, then stops and joins the loop thread, then checks that
  the isolate's pump thread is gone from ``/proc/self/task``: only then does it answer True.
  The pump thread is found at creation: the creating thread names itself with a unique marker
  (``prctl(PR_SET_NAME)``), threads inherit the name of the thread that creates them, and of
  the two marked threads the one Python knows is the loop thread, the other the pump.

These use a few private names of mini-racer's ``Context`` (``_register_js_notification``,
``_run_cancelable_mr_task``, ``_python_to_value_handle``, ``_dll``, ``_ctx``); pyproject pins
mini-racer to 0.14.x, and tests/engine/test_isolate.py exercises each of them, so an upgrade
that changes them fails there first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance.engine.harness import HARNESS_JS

LOOP_ANSWER_SECONDS = 10.0
THREADS_VISIBLE_SECONDS = 2.0  # how long a new isolate's threads may take to show in /proc
PR_SET_NAME = 15
PR_GET_NAME = 16
THREAD_NAME_BYTES_MAX = 15
_creation_lock = threading.Lock()  # one creation at a time: the marker names one isolate
_markers = itertools.count(1)


class IsolateError(Exception):
    """The isolate could not be built or could not be talked to."""


def initialise_v8() -> None:
    """Load mini-racer and start V8 (its platform threads) once, before any isolate exists."""
    from py_mini_racer._dll import init_mini_racer

    init_mini_racer(ignore_duplicate_init=True)


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _thread_name(value: bytes | None = None) -> bytes:
    """The calling thread's name (Linux ``comm``); set it first when value is given."""
    libc = _LIBC
    if libc is None:
        return b""
    if value is not None:
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(value[:THREAD_NAME_BYTES_MAX]), 0, 0, 0)
    buffer = ctypes.create_string_buffer(THREAD_NAME_BYTES_MAX + 1)
    libc.prctl(PR_GET_NAME, buffer, 0, 0, 0)
    return buffer.value


def _threads_named(name: bytes) -> set[int]:
    found = set()
    for entry in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{entry}/comm", "rb") as comm:
                if comm.read().rstrip(b"\n") == name:
                    found.add(int(entry))
        except OSError:
            continue
    return found


def thread_alive(native_id: int) -> bool:
    return os.path.exists(f"/proc/self/task/{native_id}")


class Isolate:
    """A fresh isolate with the harness evaluated, not yet bound to a script. Not thread-safe
    except ``call``, ``heap_limit_reached`` and ``dispose`` (dispose once)."""

    def __init__(self) -> None:
        from py_mini_racer import MiniRacer

        with _creation_lock:
            marker = f"v8iso-{next(_markers)}".encode()
            own_name = _thread_name()
            _thread_name(marker)
            try:
                self._racer = MiniRacer()
            finally:
                _thread_name(own_name)
        self._ctx = self._racer._ctx
        self._loop = self._ctx.event_loop
        try:
            self.loop_thread_id, self.pump_thread_id = self._find_threads(marker)
        except BaseException:
            self._racer.close()  # frees the context and joins its threads: nothing is left
            raise
        self._bell: Callable[[], None] | None = None
        self._doorbell_cm = self._ctx._register_js_notification(self._ring)
        doorbell = self._doorbell_cm.__enter__()
        harness = self._racer.eval(HARNESS_JS)
        harness["bind"](doorbell)  # type: ignore[index]
        self._functions = {name: harness[name] for name in ("start", "take", "deliver")}  # type: ignore[index]
        self._no_arguments = self._racer.eval("[]")
        self._disposed = False
        self._outstanding: set[concurrent.futures.Future[Any]] = set()
        self._outstanding_lock = threading.Lock()

    def _find_threads(self, marker: bytes) -> tuple[int, int]:
        """(loop thread, pump thread). Both new threads carry the marker: the loop thread is
        the one Python started (asked on the loop itself when that does not settle it: a native
        thread that ran Python code may be known to ``threading`` too). On a busy host the pump
        thread, although created first, can be missing from ``/proc/self/task`` for a moment
        (seen in about 1 of 70 creations while other isolates ran): look again until both are
        there, within a bound."""
        deadline = time.monotonic() + THREADS_VISIBLE_SECONDS
        pause = 0.0001
        loop_id: int | None = None
        while True:
            marked = _threads_named(marker)
            if loop_id is None:
                started = {
                    thread.native_id
                    for thread in threading.enumerate()
                    if not isinstance(thread, threading._DummyThread)
                }
                loops = marked & started
                if len(loops) == 1:
                    loop_id = loops.pop()
                else:
                    loop_id = self._on_loop(threading.get_native_id).result(LOOP_ANSWER_SECONDS)
            pumps = marked - {loop_id}
            if loop_id in marked and len(pumps) == 1:
                return loop_id, pumps.pop()
            if len(pumps) > 1 or time.monotonic() >= deadline:
                raise IsolateError(f"cannot tell the isolate's threads among {sorted(marked)}")
            time.sleep(pause)  # nothing tells us when /proc shows a new thread
            pause = min(pause * 2, 0.01)

    def _on_loop(self, function: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        async def call() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(call(), self._loop)

    def _ring(self, _arguments: object) -> None:
        bell = self._bell
        if bell is not None:
            bell()

    # ----- for one execution: nothing here waits for the isolate ----------------------------

    def on_bell(self, callback: Callable[[], None]) -> None:
        """Who hears the doorbell (called on the isolate's asyncio loop thread: must not
        block)."""
        self._bell = callback

    def set_heap_limit_bytes(self, limit_bytes: int) -> None:
        """V8 hard heap limit for this isolate; 0 lifts it."""
        self._racer.set_hard_memory_limit(limit_bytes)

    def call(self, name: str, this_text: str | None = None) -> concurrent.futures.Future[Any]:
        """Start a zero-argument call of harness function ``name`` with ``this_text`` as
        ``this``; its answer (a string) or error arrives through the future. Cancelling the
        future terminates the call if it is running (V8 TerminateExecution)."""
        from py_mini_racer._types import JSUndefined

        if self._disposed:
            failed: concurrent.futures.Future[Any] = concurrent.futures.Future()
            failed.set_exception(IsolateError("the isolate is disposed"))
            return failed
        ctx = self._ctx
        function = self._functions[name]
        no_arguments = self._no_arguments

        async def start() -> Any:
            this = ctx._python_to_value_handle(JSUndefined if this_text is None else this_text)
            return await ctx._run_cancelable_mr_task(
                ctx._dll.mr_call_function,
                function.raw_handle.raw,
                this.raw,
                no_arguments.raw_handle.raw,
            )

        future = asyncio.run_coroutine_threadsafe(start(), self._loop)
        with self._outstanding_lock:
            self._outstanding.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._outstanding_lock:
            self._outstanding.discard(future)

    def heap_limit_reached(self) -> bool:
        return self._racer.was_hard_memory_limit_reached()

    # ----- the end ---------------------------------------------------------------------------

    def dispose(self, timeout_seconds: float) -> bool:
        """Terminate whatever runs, free the isolate, stop the loop; True once the isolate's
        pump thread and the loop thread are proved gone (within timeout_seconds)."""
        if self._disposed:
            return not thread_alive(self.pump_thread_id)
        self._disposed = True
        self._bell = None
        deadline = time.monotonic() + timeout_seconds
        ctx = self._ctx
        # Free first: it terminates JavaScript spinning outside any task of ours.
        ctx._dll.mr_free_context(ctx._ctx)
        self._functions.clear()
        self._no_arguments = None  # type: ignore[assignment]
        # Then stop the loop. It never blocks on the isolate (module doc); a marker it runs
        # proves it is turning, so close() — stop, an unbounded join of its thread — is prompt.
        turning = threading.Event()
        with contextlib.suppress(RuntimeError):  # closed already: nothing will set it
            self._loop.call_soon_threadsafe(turning.set)
        stopped = turning.wait(max(0.0, deadline - time.monotonic()))
        # Calls still outstanding can never be answered now (their loop is gone): end them, so
        # nobody waits on them forever.
        with self._outstanding_lock:
            outstanding = list(self._outstanding)
        for future in outstanding:
            future.cancel()
        if not stopped:
            return False
        self._racer.close()  # stops the loop, joins its thread, frees again (a no-op)
        # A joined Python thread may linger in /proc for a moment after it released its lock.
        gone = _wait_thread_gone(self.pump_thread_id, deadline) and _wait_thread_gone(
            self.loop_thread_id, deadline
        )
        return gone and time.monotonic() <= deadline  # proved late is not proved in time


def _wait_thread_gone(native_id: int, deadline_monotonic: float) -> bool:
    """True once the thread has exited. The pump thread is joined inside the context's
    destructor, normally before mr_free_context returns; a short bounded wait covers the case
    where another thread held the last reference and ran the destructor instead."""
    pause = 0.0001
    while thread_alive(native_id):
        if time.monotonic() >= deadline_monotonic:
            return False
        time.sleep(pause)  # no event tells us a foreign thread exited
        pause = min(pause * 2, 0.01)
    return True
