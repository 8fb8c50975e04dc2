"""Core limits shared by every replica (SPEC §3 "Limits"): the type, its JSON form, its rules.

Every replica must hold the same limits (they are part of the sealed contract), so parsing is
strict: unknown fields are rejected, missing fields take the SPEC defaults, and the cross-checks
``running <= outstanding <= records`` are enforced. All problems are reported together.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final

from appliance.core.errors import InvalidConfig
from appliance.core.schema import (
    INVALID,
    CrossCheck,
    Field,
    Integer,
    Obj,
    Problems,
    join,
    validate,
)

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


def _check_outstanding(values: Any, path: str, problems: Problems) -> None:
    # Each bound is stated against its neighbour so the message names the field to change.
    if values["outstanding"] > values["records"]:
        problems.add(
            join(path, "outstanding"),
            f"must not exceed records ({values['records']}), got {values['outstanding']}",
        )


def _check_running(values: Any, path: str, problems: Problems) -> None:
    if values["running"] > values["outstanding"]:
        problems.add(
            join(path, "running"),
            f"must not exceed outstanding ({values['outstanding']}), got {values['running']}",
        )


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
    checks=(
        CrossCheck(("records", "outstanding"), _check_outstanding),
        CrossCheck(("outstanding", "running"), _check_running),
    ),
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
