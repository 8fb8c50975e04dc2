"""Thread creation with explicit 1 MiB stacks.

``threading.stack_size`` is process-wide, so it is set only around ``Thread.start`` (the moment
the stack is allocated), under a lock shared by every scheduler, and restored afterwards: other
code in the embedding process keeps its own stack size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .config import THREAD_STACK_BYTES

_STACK_SIZE_LOCK = threading.Lock()


def start_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """Start a daemon thread with a ``THREAD_STACK_BYTES`` stack.

    Daemon: an unfinished callback must not keep the interpreter from exiting (it is detached).
    """
    thread = threading.Thread(target=target, name=name, daemon=True)
    with _STACK_SIZE_LOCK:
        previous_bytes = threading.stack_size(THREAD_STACK_BYTES)
        try:
            thread.start()
        finally:
            threading.stack_size(previous_bytes)
    return thread
