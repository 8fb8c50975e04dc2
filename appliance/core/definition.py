"""Schedule definitions: the value an operator creates (SPEC §3), its JSON form and its rules.

Theory of operation: ``parse_definition`` is the only way a definition enters the system (stdin,
management HTTP/MCP, initial config schedules), so every rule of the SPEC §3 table lives in the
one rule table below and every problem is reported at once with its JSON path. Byte limits are
UTF-8 bytes of the decoded string (so heavily escaped JSON may exceed a transport cap while the
code is within 64 KiB: that is the transport's business). ``definition_to_json`` emits exactly the
shape of seeds/001, and ``parse_definition(definition_to_json(d)) == d``.

``policy`` is optional, and so is each of its members: an omitted ``missed`` is ``"Skip"``, an
omitted ``overlap`` is ``"Skip"``, an omitted ``retry`` (or member) is no retries with no delay
(``DEFAULT_POLICY``). The parsed value is the same as with the defaults written out, and every
digest and checkpoint is computed over ``definition_to_json`` of the parsed value (the
normalized definition, always with the full policy), so a definition written either way has the
same contract digest as before defaults existed.

Cron and timezone are delegated to ``appliance.core.calendar`` (which also rejects patterns that
can never fire); its ``InvalidSchedule("cron: ...")`` / ``("timezone: ...")`` messages are placed
under this document's field paths.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from appliance.core.errors import InvalidDefinition, InvalidSchedule
from appliance.core.limits import Limits
from appliance.core.placement import (
    NO_PLACEMENT,
    PlacementRules,
    labels_rule,
    placement_to_json,
)
from appliance.core.schema import (
    INVALID,
    Choice,
    CrossCheck,
    Custom,
    Field,
    Integer,
    Obj,
    Problems,
    Text,
    join,
    show,
    validate,
)

NAME_BYTES_MAX: Final = 128
CODE_BYTES_MAX: Final = 64 * 1024
CRON_BYTES_MAX: Final = 256
TIMEZONE_BYTES_MAX: Final = 128
MAX_RETRIES_MAX: Final = 100
DELAY_SECONDS_MAX: Final = 86_400
JITTER_SECONDS_MAX: Final = 3_600


@dataclass(frozen=True)
class MissedSkip:
    """Only the latest due slot, and only within the grace window."""


@dataclass(frozen=True)
class MissedRunOnce:
    """All unobserved slots coalesce into the newest."""


@dataclass(frozen=True)
class MissedCatchUp:
    """The newest ``cap`` slots, in chronological order."""

    cap: int


MissedPolicy = MissedSkip | MissedRunOnce | MissedCatchUp


class OverlapPolicy(enum.Enum):
    SKIP = "Skip"
    QUEUE = "Queue"
    CONCURRENT = "Concurrent"


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 0
    delay_seconds: int = 0


@dataclass(frozen=True)
class Policy:
    missed: MissedPolicy
    overlap: OverlapPolicy
    retry: RetryPolicy
    # Each slot waits a deterministic delay in [0, jitter_seconds] (appliance/core/jitter.py).
    # Omitted from the JSON when 0, so the definitions (and digests) of before it are unchanged.
    jitter_seconds: int = 0


@dataclass(frozen=True)
class Definition:
    code: str
    cron: str
    timezone: str
    policy: Policy
    name: str | None = None
    # Which workers of the fleet may run it (appliance/core/placement.py). Omitted from the JSON
    # when empty, so the definitions (and digests) of before the fleet are unchanged.
    placement: PlacementRules = NO_PLACEMENT


# What an omitted ``policy`` (or an omitted member of it) means: the seeds/001 example's policy.
DEFAULT_POLICY: Final = Policy(
    missed=MissedSkip(),
    overlap=OverlapPolicy.SKIP,
    retry=RetryPolicy(max_retries=0, delay_seconds=0),
)


class DefinitionProblems(InvalidDefinition):
    """An ``InvalidDefinition`` that lists every ``(field_path, message)`` it found."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in self.problems))


# ---- rules -------------------------------------------------------------------------------------

_MISSED_WORDS: Final = {"Skip": MissedSkip(), "RunOnce": MissedRunOnce()}
_MISSED_SAYS: Final = '"Skip", "RunOnce" or {"CatchUp": {"cap": N}}'


def _missed_rule(limits: Limits) -> Custom:
    catch_up = Obj(
        fields={
            "CatchUp": Field(
                Obj(
                    fields={"cap": Field(Integer(1, limits.outstanding, "(limits.outstanding)"))},
                    build=MissedCatchUp,
                )
            )
        },
        build=lambda **tagged: tagged["CatchUp"],
    )

    def parse(value: object, path: str, problems: Problems) -> Any:
        if isinstance(value, str) and value in _MISSED_WORDS:
            return _MISSED_WORDS[value]
        if isinstance(value, dict) and "CatchUp" in value:
            return catch_up.check(value, path, problems)
        return problems.add(path, f"must be {_MISSED_SAYS}, got {show(value)}")

    return Custom(parse)


def _retry_rule() -> Obj:
    return Obj(
        fields={
            "max_retries": Field(
                Integer(0, MAX_RETRIES_MAX), required=False, default=0, doc="additional attempts"
            ),
            "delay_seconds": Field(
                Integer(0, DELAY_SECONDS_MAX),
                required=False,
                default=0,
                doc="fixed delay before each",
            ),
        },
        build=RetryPolicy,
    )


def _check_schedule(values: Any, path: str, problems: Problems) -> None:
    # Imported here: the calendar is a sibling core module and the rule table is built lazily.
    from appliance.core import calendar

    before = len(problems)
    for field, validate_one in (
        ("cron", calendar.validate_cron),
        ("timezone", calendar.validate_timezone),
    ):
        try:
            validate_one(values[field])
        except InvalidSchedule as err:
            _add_schedule_problem(err, field, path, problems)
    if len(problems) > before:
        return
    try:
        calendar.compile_schedule(values["cron"], values["timezone"])
    except InvalidSchedule as err:
        _add_schedule_problem(err, "cron", path, problems)


def _add_schedule_problem(
    err: InvalidSchedule, default_field: str, path: str, problems: Problems
) -> None:
    message = str(err)
    field = default_field
    for prefix in ("cron", "timezone"):
        if message.startswith(f"{prefix}: "):
            field, message = prefix, message[len(prefix) + 2 :]
    problems.add(join(path, field), message)


def _build_definition(
    name: str | None,
    code: str,
    cron: str,
    timezone: str,
    policy: Policy,
    placement: PlacementRules = NO_PLACEMENT,
) -> Definition:
    return Definition(
        code=code, cron=cron, timezone=timezone, policy=policy, name=name, placement=placement
    )


# A definition's ``placement`` (issue 33): hard ``labels`` and soft ``prefer`` label rules.
PLACEMENT_RULE: Final = Obj(
    fields={
        "labels": Field(
            Custom(labels_rule), required=False, default=(), doc="every pair must match"
        ),
        "prefer": Field(
            Custom(labels_rule), required=False, default=(), doc="each matching pair counts"
        ),
    },
    build=PlacementRules,
)


@lru_cache(maxsize=64)
def definition_rule(limits: Limits) -> Obj:
    """The rule table of a definition; ``CatchUp.cap`` is bounded by ``limits.outstanding``."""
    policy = Obj(
        fields={
            "missed": Field(
                _missed_rule(limits),
                required=False,
                default=DEFAULT_POLICY.missed,
                doc=_MISSED_SAYS,
            ),
            "overlap": Field(
                Choice({p.value: p for p in OverlapPolicy}),
                required=False,
                default=DEFAULT_POLICY.overlap,
            ),
            "retry": Field(_retry_rule(), required=False, default=DEFAULT_POLICY.retry),
            "jitter_seconds": Field(
                Integer(0, JITTER_SECONDS_MAX),
                required=False,
                default=0,
                doc="a delay in [0, N] s derived from SHA-256 of (schedule id, slot)",
            ),
        },
        build=Policy,
    )
    return Obj(
        fields={
            "name": Field(Text(NAME_BYTES_MAX), required=False, default=None),
            "code": Field(Text(CODE_BYTES_MAX, secret=True)),
            "cron": Field(Text(CRON_BYTES_MAX)),
            "timezone": Field(Text(TIMEZONE_BYTES_MAX)),
            "policy": Field(policy, required=False, default=DEFAULT_POLICY),
            "placement": Field(PLACEMENT_RULE, required=False, default=NO_PLACEMENT),
        },
        build=_build_definition,
        checks=(CrossCheck(("cron", "timezone"), _check_schedule),),
    )


def parse_definition(obj: object, limits: Limits, path: str = "") -> Definition:
    """Validate a JSON definition; raise DefinitionProblems (an InvalidDefinition) listing all."""
    parsed, problems = validate(definition_rule(limits), obj, path)
    if parsed is INVALID:
        raise DefinitionProblems(problems)
    return parsed


def missed_to_json(missed: MissedPolicy) -> str | dict[str, dict[str, int]]:
    if isinstance(missed, MissedSkip):
        return "Skip"
    if isinstance(missed, MissedRunOnce):
        return "RunOnce"
    if isinstance(missed, MissedCatchUp):
        return {"CatchUp": {"cap": missed.cap}}
    raise InvalidDefinition(f"policy.missed: not a missed-run policy: {type(missed).__name__}")


def definition_to_json(d: Definition) -> dict[str, Any]:
    """The seeds/001 JSON shape; ``name`` is omitted when absent."""
    out: dict[str, Any] = {} if d.name is None else {"name": d.name}
    out.update(
        code=d.code,
        cron=d.cron,
        timezone=d.timezone,
        policy={
            "missed": missed_to_json(d.policy.missed),
            "overlap": d.policy.overlap.value,
            "retry": {
                "max_retries": d.policy.retry.max_retries,
                "delay_seconds": d.policy.retry.delay_seconds,
            },
        },
    )
    if d.policy.jitter_seconds:
        out["policy"]["jitter_seconds"] = d.policy.jitter_seconds
    if d.placement:
        out["placement"] = placement_to_json(d.placement)
    return out
