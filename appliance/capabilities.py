"""What this binary can apply: its version and the replicated command kinds it knows.

Theory of operation (SPEC §11, "A version gate for the log"). A rolling upgrade runs two binaries
side by side for a while. If the owner proposed a command kind that an older voter cannot decode,
that voter would either refuse it (and its state would differ from its peers': divergence) or
crash on every restart at the same entry. So every voter reports its binary version and the set of
command kinds it can apply (on its cluster status route, behind the cluster bearer), the owner
proposes a kind outside :data:`BASELINE_COMMAND_KINDS` only once every voter of the configuration
(and every learner that has reported) has reported it, and a voter that still meets a kind it
cannot apply stops with a clear message instead of diverging (``appliance/runner/machine.py``). A
learner becomes a voter only once it has reported a binary that applies every kind committed so
far (``promotion_refusal``).

The baseline is the set every binary of the first round applies: a voter that reports nothing (an
older binary, or one not reached yet) is assumed to apply exactly that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance import __version__

BINARY_VERSION: Final = __version__

# Every replicated command kind of the first round (docs/raft.md, "Version gate"). Never remove a
# name: a log written by any earlier binary may hold it.
BASELINE_COMMAND_KINDS: Final = frozenset(
    {
        "AcknowledgeStopped",
        "AcquireOwnership",
        "Admit",
        "Cancel",
        "Claim",
        "ClaimOccurrence",
        "ConfirmCancelled",
        "CreateSchedule",
        "DeleteSchedule",
        "DisableSchedule",
        "FenceAfterCancel",
        "FenceNotLaunched",
        "MarkUnknown",
        "Observe",
        "ObserveAndClaim",
        "RecordOutcome",
        "RetryDue",
        "SeedInitialSchedules",
    }
)
COMMAND_KINDS_MAX: Final = 256  # a report naming more is malformed
COMMAND_KIND_BYTES_MAX: Final = 64


def command_kinds() -> frozenset[str]:
    """The command kinds this binary applies: every registered command type, and the features a
    baseline command can carry (``appliance.core.features``; the owner gates on
    ``command_kind(command)``)."""
    from appliance.core import state  # (importing it registers every command)
    from appliance.core.serialisation import COMMAND_TYPES

    return frozenset(COMMAND_TYPES) | state.FEATURE_KINDS


@dataclass(frozen=True)
class Capabilities:
    """One voter's report: its binary version and the command kinds it applies."""

    binary: str
    commands: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        return {"binary": self.binary, "commands": sorted(self.commands)}


def local_capabilities() -> Capabilities:
    return Capabilities(BINARY_VERSION, command_kinds())


def capabilities_from_json(value: Any) -> Capabilities:
    """A peer's report; ``ValueError`` naming the field when it is malformed."""
    if not isinstance(value, Mapping):
        raise ValueError("capabilities: expected an object")
    binary, commands = value.get("binary"), value.get("commands")
    if not isinstance(binary, str) or not 0 < len(binary) <= COMMAND_KIND_BYTES_MAX:
        raise ValueError("capabilities.binary: expected a version string of 1-64 characters")
    if not isinstance(commands, list) or len(commands) > COMMAND_KINDS_MAX:
        raise ValueError(f"capabilities.commands: expected a list of at most {COMMAND_KINDS_MAX}")
    for kind in commands:
        if not isinstance(kind, str) or not 0 < len(kind) <= COMMAND_KIND_BYTES_MAX:
            raise ValueError("capabilities.commands: every kind must be a short string")
    return Capabilities(binary, frozenset(commands))


def gate_refusal(
    kind: str,
    voters: Iterable[str],
    reported: Mapping[str, Capabilities | None],
    baseline: frozenset[str] = BASELINE_COMMAND_KINDS,
    learners: frozenset[str] = frozenset(),
) -> str | None:
    """Why ``kind`` may not be proposed yet, or None when every member can apply it.

    ``voters``: every member of the configuration in force (voters and learners; ``learners``
    says which are learners). A baseline kind is always allowed. Any other kind needs a report
    naming it from every voter, and from every learner that has reported at all. A voter without
    a report counts as a baseline binary. A learner that never reported (added, never started, or
    not reached yet) is left out: it counts in no quorum, it meets the kind in its log before it
    can vote, and a kind it cannot apply stops it there (SPEC §11) — and ``promote_voter`` waits
    until it has reported a binary that applies every committed kind (``promotion_refusal``).
    Each member holding the gate is named with its own remedy.
    """
    if kind in baseline:
        return None
    lacking = []
    for member in sorted(voters):
        report = reported.get(member)
        learner = member in learners
        if report is None and learner:
            continue
        if report is None:
            lacking.append(
                f"{member} (no report yet): is it running and reachable? start it, or remove it "
                "(remove_voter)"
            )
        elif kind not in report.commands and learner:
            lacking.append(
                f"{member} (learner, binary {report.binary}): upgrade it, or remove it "
                "(remove_voter)"
            )
        elif kind not in report.commands:
            lacking.append(f"{member} (binary {report.binary}): upgrade it")
    if not lacking:
        return None
    return (
        f"command {kind} is not proposed until every voter can apply it; "
        f"not yet: {'; '.join(lacking)}"
    )


def promotion_refusal(
    learner: str,
    report: Capabilities | None,
    committed: frozenset[str],
) -> str | None:
    """Why ``learner`` may not become a voter yet (None: it may): it must have reported, and
    with a binary that applies every kind in ``committed`` (the kinds beyond the baseline the
    log may hold; appliance/runner/committed_kinds.py). A learner left out of the gate while it
    never reported may hold entries of kinds its binary cannot apply; as a voter it would stop
    at the first and the cluster would count a voter that never answers."""
    if report is None:
        # Worded as the Raft leader's own "has not caught up" (a learner still starting is the
        # usual case), so callers that wait for a learner (admin promote-voter --wait-s) wait.
        return (
            f"learner {learner!r} has not caught up: it has not reported what it can apply (is "
            "it running? start it and let it catch up), then promote it again"
        )
    missing = sorted(committed - report.commands)
    if missing:
        return (
            f"learner {learner!r} runs appliance {report.binary}, which cannot apply "
            f"{', '.join(missing)}, committed in this cluster's log: start it with a binary that "
            f"does (this voter runs {BINARY_VERSION}), then promote it again"
        )
    return None
