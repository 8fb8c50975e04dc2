"""A stop signal that the kernel delivers to a thread other than the main one still stops the
process: the main thread waits in slices, so the pending Python handler runs.

The child blocks SIGTERM on its main thread after starting another thread (threads keep the mask
they were created with), so the kernel must deliver SIGTERM to that other thread: exactly the case
an untimed ``Event.wait()`` on the main thread never wakes from. The other thread says "ready" only
once the main thread is blocked in its wait: a signal that arrives earlier is handled by the main
thread at its next bytecode, and the untimed case would then wake (seen on a loaded host)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from appliance.signal_wait import wait_for_stop

REPO = Path(__file__).resolve().parents[1]
NEEDS_THREAD_SIGNALS = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask") or not Path("/proc/self/task").is_dir(),
    reason="needs pthread_sigmask and /proc (Linux)",
)

CHILD = r"""
import signal, sys, threading, time
from appliance.signal_wait import wait_for_stop

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
main = threading.main_thread()


def blocked_in_wait() -> bool:
    # The main thread's Python frame is in a wait and its kernel thread sleeps: it is blocked on
    # the lock. Before that, a tripped handler would simply run at its next bytecode.
    frame = sys._current_frames().get(main.ident)
    with open(f"/proc/self/task/{main.native_id}/stat") as stat:
        state = stat.read().rsplit(")", 1)[1].split()[0]
    return frame is not None and frame.f_code.co_name == "wait" and state == "S"


def announce() -> None:  # started before the mask below: SIGTERM lands on this thread
    while not blocked_in_wait():
        time.sleep(0.001)
    print("ready", flush=True)
    time.sleep(60)


threading.Thread(target=announce, daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
if sys.argv[1] == "untimed":
    stop.wait()
else:
    wait_for_stop(stop)
print("stopped", flush=True)
"""


def run_child(mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    os.kill(child.pid, signal.SIGTERM)
    return child


@NEEDS_THREAD_SIGNALS
def test_a_stop_signal_delivered_to_another_thread_stops_the_main_threads_wait() -> None:
    child = run_child("sliced")
    try:
        out, _ = child.communicate(timeout=10)
    finally:
        child.kill()
    assert out.strip() == "stopped"
    assert child.returncode == 0


@NEEDS_THREAD_SIGNALS
def test_an_untimed_wait_would_not_wake_for_it() -> None:
    """The failure the sliced wait exists for (so the test above can fail)."""
    child = run_child("untimed")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.communicate(timeout=2)
    finally:
        child.kill()
        child.wait(10)


def test_between_runs_after_each_slice_until_the_stop() -> None:
    """``between`` is where a handler's request (the worker's SIGHUP reload) is carried out."""
    stop = threading.Event()
    calls: list[int] = []

    def between() -> None:
        calls.append(len(calls))
        if len(calls) == 3:
            stop.set()

    wait_for_stop(stop, poll_s=0.001, between=between)
    assert calls == [0, 1, 2]  # never called again once the stop is set
