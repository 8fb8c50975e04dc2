"""A testing-only crash hook: the worker SIGKILLs itself right after a named step.

Theory of operation: the crash tests must prove that a crash between ANY two durable steps of the
launch path never leads to a second submission after restart. A real SIGKILL (no cleanup, no
``finally``, no flush) at an exact point is the honest way to show it. The hook is armed only
when the environment holds ``APPLIANCE_TESTING=1`` and ``APPLIANCE_CRASH_AT=<step>``; a crash
request without the testing flag, or naming an unknown step, refuses start-up (fail closed: a
production worker never carries a self-destruct switch it did not ask for).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Final

from appliance.core.errors import InvalidConfig

TESTING_ENV: Final = "APPLIANCE_TESTING"
CRASH_AT_ENV: Final = "APPLIANCE_CRASH_AT"

# The launch path, in order (docs/worker.md), and the cancel path's fence.
LAUNCH_STEPS: Final = (
    "validated",  # binding checked; nothing durable yet
    "pool_reserved",  # engine capacity held (in memory only)
    "reserved",  # invocation durably reserved
    "permit_received",  # the admission route answered with a permit; not yet recorded
    "permit_recorded",  # permit durably recorded
    "consumed",  # permit durably consumed (+ execution record): the point of no return
    "submitted",  # the engine accepted the work through the one-shot capability
    "receipt_recorded",  # receipt recorded (no fsync of its own); the 202 is about to be sent
)
CANCEL_STEPS: Final = ("fenced",)
STEPS: Final = LAUNCH_STEPS + CANCEL_STEPS


class CrashHook:
    """``after(step)`` kills this process with SIGKILL when ``step`` is the armed one."""

    def __init__(self, crash_at: str | None = None) -> None:
        if crash_at is not None and crash_at not in STEPS:
            raise ValueError(f"unknown crash step {crash_at!r}")
        self.crash_at = crash_at

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> CrashHook:
        step = environ.get(CRASH_AT_ENV)
        if step is None or step == "":
            return cls(None)
        if environ.get(TESTING_ENV) != "1":
            raise InvalidConfig(
                [(CRASH_AT_ENV, f"is a testing-only switch; it needs {TESTING_ENV}=1")]
            )
        if step not in STEPS:
            raise InvalidConfig([(CRASH_AT_ENV, f"must be one of {', '.join(STEPS)}")])
        return cls(step)

    def after(self, step: str) -> None:
        if step not in STEPS:
            raise ValueError(f"unknown crash step {step!r}")
        if step == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
