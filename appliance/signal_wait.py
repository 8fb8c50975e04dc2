"""The main thread's wait for a stop that a signal handler sets.

CPython runs Python signal handlers on the main thread only, between bytecodes. A
process-directed signal (SIGTERM, SIGINT, or the parent-death signal the quickstart arms for its
worker) is delivered by the kernel to one thread that does not block it, usually the main thread
but not always. Only a signal that lands on the main thread interrupts a blocked untimed
``Event.wait()``; one that lands on another thread leaves its handler pending until the main
thread next runs Python, which for an untimed wait is never. That was seen once: a worker whose
quickstart was SIGKILLed logged no shutdown at all and outlived it. So process entry points wait
in slices, and a pending handler runs within ``POLL_S``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

POLL_S = 0.5


def wait_for_stop(
    stop: threading.Event, poll_s: float = POLL_S, between: Callable[[], None] | None = None
) -> None:
    """Return once ``stop`` is set; pending signal handlers get to run at least every
    ``poll_s``, and so does ``between`` (work a handler asked for, done outside the handler)."""
    while not stop.wait(poll_s):
        if between is not None:
            between()
