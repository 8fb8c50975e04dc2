"""What many tests share: awaiting a condition with a bounded wait (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 10.0
POLL_S = 0.005


def wait_for(
    predicate: Callable[[], T], what: str, timeout_s: float = WAIT_S, *, poll_s: float = POLL_S
) -> T:
    """The predicate's first truthy value; ``AssertionError`` naming ``what`` after
    ``timeout_s`` seconds (monotonic) without one."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)
