"""Core limits shared by every replica (SPEC §3 "Limits"): the type, its JSON form, its rules.

Every replica must hold the same limits (they are part of the sealed contract), so parsing is
strict: unknown fields are rejected, missing fields take the SPEC defaults, and the cross-checks
``running <= outstanding <= records`` are enforced. All problems are reported together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Final

from appliance.core.errors import InvalidConfig
from appliance.core.schema import INVALID, Field, Integer, Obj, not_above, validate

SCHEDULES_MAX: Final = 1024
RECORDS_MAX: Final = 65536
GRACE_SECONDS_MAX: Final = 59


@dataclass(frozen=True)
class Limits:
    schedules: int = 64
    records: int = 4096
    outstanding: int = 128
    running: int = 16
    grace_seconds: int = 5


CHECKPOINT_BYTES_MAX = 4 * 1024 * 1024

_DEFAULT: Final = Limits()


LIMITS_RULE: Final = Obj(
    fields={
        "schedules": Field(
            Integer(1, SCHEDULES_MAX),
            required=False,
            default=_DEFAULT.schedules,
            doc="defined schedules at most",
        ),
        "records": Field(
            Integer(1, RECORDS_MAX),
            required=False,
            default=_DEFAULT.records,
            doc="retained occurrence records",
        ),
        "outstanding": Field(
            Integer(1, RECORDS_MAX),
            required=False,
            default=_DEFAULT.outstanding,
            doc="non-terminal records at most",
        ),
        "running": Field(
            Integer(1, RECORDS_MAX),
            required=False,
            default=_DEFAULT.running,
            doc="Running + Cancelling + Unknown at most",
        ),
        "grace_seconds": Field(
            Integer(0, GRACE_SECONDS_MAX),
            required=False,
            default=_DEFAULT.grace_seconds,
            doc="Skip grace window",
        ),
    },
    build=Limits,
    # Each bound is stated against its neighbour so the message names the field to change.
    checks=(not_above("outstanding", "records"), not_above("running", "outstanding")),
)


def parse_limits(obj: object, path: str = "") -> Limits:
    """Parse the JSON ``limits`` object; raise InvalidConfig listing every problem."""
    parsed, problems = validate(LIMITS_RULE, obj, path)
    if parsed is INVALID:
        raise InvalidConfig(problems)
    return parsed


def limits_to_json(limits: Limits) -> dict[str, int]:
    """The JSON form, every field explicit (so the sealed contract does not depend on defaults)."""
    return asdict(limits)


# The limits a listener checks against: fixed (tests, the local library) or read from the
# committed state each time (a runner: ``amend_limits`` changes them without a restart).
LimitsInForce = Limits | Callable[[], Limits]


def limits_reader(limits: LimitsInForce) -> Callable[[], Limits]:
    if isinstance(limits, Limits):
        return lambda: limits
    return limits
