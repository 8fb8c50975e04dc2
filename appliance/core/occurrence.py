"""The occurrence state machine: the only code that changes an occurrence's state.

Theory of operation
-------------------
An *occurrence* is one calendar slot of one schedule that selection turned into work. It lives
through one or more *attempts*; every attempt is at most once submitted to an engine (SPEC §1).
The legal moves are one table, ``TRANSITIONS``, keyed by (state, event), in the manner of h11:
anything not in the table raises :class:`IllegalTransition` naming the state and the event, and
the record is left untouched (records are frozen values; a transition returns a new one).

Why the table is shaped this way (seeds/000, SPEC §3 "Accounting"):

* ``Pending`` covers three waits: ready to claim, queued behind an active occurrence, and
  retry-waiting (``not_before`` is set until a committed ``retry_due`` clears it). A cancel of a
  ``Pending`` occurrence ends it at once: it was never admitted, so nothing can be running.
* A lost acknowledgement or an unreachable worker is ``Unknown``: the attempt may have run. It
  keeps its running and overlap reservation, never retries by itself, and resolves only to the
  engine's confirmed outcome (the real result wins) or, with explicit operator attestation, to
  ``Abandoned``.
* ``Cancelling`` is committed before the worker is asked to stop. Only a confirmed stop makes it
  ``Cancelled``; a completion that wins the race keeps its real result.
* Only a confirmed ``Failed`` retries (``retry`` event, Failed → Pending as attempt + 1, not before
  failure instant + ``delay_seconds``); the aggregate applies it in the same command as the failure,
  so a committed ``Failed`` is always final. A *fenced* attempt (provably never admitted) goes back
  to ``Pending`` as attempt + 1 without spending a retry.

Engine outcomes map to events per SPEC §3: completed → Succeeded; failed, timed_out,
out_of_memory → Failed (with the reason); cancelled → Cancelled; lost, unreachable → Unknown.
"""

from __future__ import annotations

import enum
import json
from typing import NamedTuple

from appliance.core.canonical import canonical_json
from appliance.core.errors import CoreError, IllegalTransition

# Largest integer any counter, id or attempt may reach: it keeps every number exact in JSON
# readers that use doubles and bounds the byte size of a record.
INT_MAX = 2**53 - 1
# 9999-12-31T23:59:59Z: instants are whole seconds since the Unix epoch in [0, INSTANT_MAX_S].
INSTANT_MAX_S = 253_402_300_799
TIMELINE_ENTRIES_MAX = 16
REASON_BYTES_MAX = 256
EXECUTION_ID_BYTES_MAX = 128


class OccurrenceState(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    CANCELLING = "Cancelling"
    CANCELLED = "Cancelled"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    ABANDONED = "Abandoned"

    # Members are singletons compared by identity, so identity hashing is exact and C-fast (the
    # inherited hash is a Python-level call on every set or dict lookup in the pulse's hot path).
    # Nothing iterates a hashed collection of states for output, so order never depends on it.
    __hash__ = object.__hash__


S = OccurrenceState

TERMINAL = frozenset({S.CANCELLED, S.SUCCEEDED, S.FAILED, S.ABANDONED})
# States that hold a running reservation (SPEC §3: running = Running + Cancelling + Unknown);
# they are also the "active" work that overlap Skip and Queue wait for.
RESERVING = frozenset({S.RUNNING, S.CANCELLING, S.UNKNOWN})


class Event(enum.Enum):
    CREATED = "created"
    CLAIM = "claim"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    OUT_OF_MEMORY = "out_of_memory"
    CANCELLED = "cancelled"
    LOST = "lost"
    UNREACHABLE = "unreachable"
    CANCEL = "cancel"
    CANCEL_CONFIRMED = "cancel_confirmed"
    RETRY = "retry"
    RETRY_DUE = "retry_due"
    JITTER_DUE = "jitter_due"  # a new record's jittered instant came (appliance/core/jitter.py)
    FENCED_NOT_LAUNCHED = "fenced_not_launched"
    ACKNOWLEDGE_STOPPED = "acknowledge_stopped"
    SCHEDULE_DELETED = "schedule_deleted"
    CAPACITY_WAIT = "capacity_wait"  # waits, unsent, for the worker (core/capacity_wait.py)

    __hash__ = object.__hash__  # see OccurrenceState


E = Event

# Engine outcomes a worker can report (SPEC §3 "Accounting").
OUTCOME_EVENTS = frozenset(
    {E.COMPLETED, E.FAILED, E.TIMED_OUT, E.OUT_OF_MEMORY, E.CANCELLED, E.LOST, E.UNREACHABLE}
)
FAILURE_EVENTS = frozenset({E.FAILED, E.TIMED_OUT, E.OUT_OF_MEMORY})

TRANSITIONS: dict[tuple[OccurrenceState, Event], OccurrenceState] = {
    # Pending: never admitted yet.
    (S.PENDING, E.CLAIM): S.RUNNING,
    (S.PENDING, E.CANCEL): S.CANCELLED,
    (S.PENDING, E.RETRY_DUE): S.PENDING,
    (S.PENDING, E.JITTER_DUE): S.PENDING,
    (S.PENDING, E.SCHEDULE_DELETED): S.CANCELLED,
    # Running: claimed; the attempt may be admitted and submitted.
    (S.RUNNING, E.COMPLETED): S.SUCCEEDED,
    (S.RUNNING, E.FAILED): S.FAILED,
    (S.RUNNING, E.TIMED_OUT): S.FAILED,
    (S.RUNNING, E.OUT_OF_MEMORY): S.FAILED,
    (S.RUNNING, E.CANCELLED): S.CANCELLED,
    (S.RUNNING, E.LOST): S.UNKNOWN,
    (S.RUNNING, E.UNREACHABLE): S.UNKNOWN,
    (S.RUNNING, E.CANCEL): S.CANCELLING,
    (S.RUNNING, E.FENCED_NOT_LAUNCHED): S.PENDING,
    (S.RUNNING, E.CAPACITY_WAIT): S.RUNNING,  # a note in the history, nothing else
    # Cancelling: committed before the worker is contacted; completion may win the race.
    (S.CANCELLING, E.CANCEL_CONFIRMED): S.CANCELLED,
    (S.CANCELLING, E.CANCELLED): S.CANCELLED,
    (S.CANCELLING, E.COMPLETED): S.SUCCEEDED,
    (S.CANCELLING, E.FAILED): S.FAILED,
    (S.CANCELLING, E.TIMED_OUT): S.FAILED,
    (S.CANCELLING, E.OUT_OF_MEMORY): S.FAILED,
    (S.CANCELLING, E.FENCED_NOT_LAUNCHED): S.CANCELLED,
    (S.CANCELLING, E.ACKNOWLEDGE_STOPPED): S.ABANDONED,
    # Unknown: may have run; only a confirmed outcome, a fence or an attestation resolves it.
    (S.UNKNOWN, E.COMPLETED): S.SUCCEEDED,
    (S.UNKNOWN, E.FAILED): S.FAILED,
    (S.UNKNOWN, E.TIMED_OUT): S.FAILED,
    (S.UNKNOWN, E.OUT_OF_MEMORY): S.FAILED,
    (S.UNKNOWN, E.CANCELLED): S.CANCELLED,
    (S.UNKNOWN, E.CANCEL): S.CANCELLING,
    (S.UNKNOWN, E.FENCED_NOT_LAUNCHED): S.PENDING,
    (S.UNKNOWN, E.ACKNOWLEDGE_STOPPED): S.ABANDONED,
    # Failed: final unless the aggregate applies the retry in the same command.
    (S.FAILED, E.RETRY): S.PENDING,
}


class AttestationRequired(CoreError):
    """acknowledge_stopped without explicit ``dispatcher_and_work_quiesced: true``."""


class AttemptLimitReached(CoreError):
    """A fence or retry would push the attempt number past INT_MAX."""


class TimelineEntry(NamedTuple):
    state: OccurrenceState
    at_s: int
    attempt: int
    reason: str


class Occurrence(NamedTuple):
    """One occurrence record: an immutable value, replaced (never mutated) on every transition.

    A NamedTuple rather than a frozen dataclass: observation creates one per due schedule and a
    tuple is built several times faster, with the same immutability.
    """

    id: int
    schedule_id: int
    due_s: int
    state: OccurrenceState = S.PENDING
    attempt: int = 1
    retries_used: int = 0
    not_before_s: int | None = None
    timeline: tuple[TimelineEntry, ...] = ()
    execution_id: str | None = None  # the worker's id for the current attempt's execution
    failure_reason: str | None = None  # the reason of the most recent failed attempt

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def reserving(self) -> bool:
        return self.state in RESERVING

    @property
    def retry_waiting(self) -> bool:
        return self.state is S.PENDING and self.not_before_s is not None


def bound_text(text: str, bytes_max: int) -> str:
    """The longest prefix of ``text`` whose JSON string body fits in ``bytes_max`` bytes.

    Deterministic, so replicas that truncate the same input agree; escaping is counted, so the
    bound holds for the checkpoint bytes, not just the character count.
    """
    if len(text) * 6 <= bytes_max:
        return text
    size = 0
    for index, char in enumerate(text):
        size += len(canonical_json(char)) - 2
        if size > bytes_max:
            return text[:index]
    return text


# Why a record exists, in its creation timeline entry: a selected slot, or an operator command.
CREATED_BY = frozenset({E.CREATED.value, "run_now", "backfill"})
_CREATED = E.CREATED.value


def new_occurrence(
    occurrence_id: int,
    schedule_id: int,
    due_s: int,
    at_s: int,
    not_before_s: int | None = None,
    created_by: str = _CREATED,
) -> Occurrence:
    """A Pending record; ``not_before_s`` makes it wait (jitter) like a retry-waiting one."""
    if created_by is not _CREATED and created_by not in CREATED_BY:
        raise CoreError(f"invariant: {created_by!r} is not a creation reason")
    return Occurrence(
        id=occurrence_id,
        schedule_id=schedule_id,
        due_s=due_s,
        not_before_s=not_before_s,
        timeline=(TimelineEntry(S.PENDING, at_s, 1, created_by),),
    )


def _append(timeline: tuple[TimelineEntry, ...], entry: TimelineEntry) -> tuple[TimelineEntry, ...]:
    # Keep the creation entry and the newest ones: bounded, so a record has a maximum size.
    if len(timeline) < TIMELINE_ENTRIES_MAX:
        return (*timeline, entry)
    return (timeline[0], *timeline[2:], entry)


def transition(
    record: Occurrence,
    event: Event,
    at_s: int,
    *,
    reason: str | None = None,
    execution_id: str | None = None,
    retry_delay_seconds: int = 0,
    attested: bool = False,
) -> Occurrence:
    """Apply ``event`` at ``at_s``; return the new record or raise, changing nothing."""
    target = TRANSITIONS.get((record.state, event))
    if target is None:
        raise IllegalTransition(
            f"occurrence {record.id}: event {event.value!r} is not allowed in state "
            f"{record.state.value!r} (attempt {record.attempt})"
        )
    if event is E.ACKNOWLEDGE_STOPPED and attested is not True:
        raise AttestationRequired(
            f"occurrence {record.id}: acknowledge_stopped needs explicit "
            "dispatcher_and_work_quiesced: true"
        )
    attempt = record.attempt
    retries_used = record.retries_used
    not_before_s = record.not_before_s
    failure_reason = record.failure_reason
    if event in (E.RETRY, E.FENCED_NOT_LAUNCHED) and target is S.PENDING:
        if attempt >= INT_MAX:
            raise AttemptLimitReached(f"occurrence {record.id}: attempt limit reached")
        attempt += 1
        if event is E.RETRY:
            retries_used += 1
            # A zero delay is claimable at once; otherwise a committed retry_due clears it.
            not_before_s = at_s + retry_delay_seconds if retry_delay_seconds > 0 else None
        else:
            not_before_s = None
    elif event in (E.RETRY_DUE, E.JITTER_DUE):
        not_before_s = None
    if event in FAILURE_EVENTS:
        failure_reason = bound_text(reason or event.value, REASON_BYTES_MAX)
    new_execution_id = record.execution_id
    if execution_id is not None:
        new_execution_id = bound_text(execution_id, EXECUTION_ID_BYTES_MAX)
    elif event in (E.CLAIM, E.RETRY, E.FENCED_NOT_LAUNCHED):
        # A new attempt has no execution yet.
        new_execution_id = None
    entry = TimelineEntry(target, at_s, attempt, event.value)
    return record._replace(
        state=target,
        attempt=attempt,
        retries_used=retries_used,
        not_before_s=not_before_s,
        timeline=_append(record.timeline, entry),
        execution_id=new_execution_id,
        failure_reason=failure_reason,
    )


def occurrence_to_json(record: Occurrence) -> dict:
    return {
        "id": record.id,
        "schedule_id": record.schedule_id,
        "due": record.due_s,
        "state": record.state.value,
        "attempt": record.attempt,
        "retries_used": record.retries_used,
        "not_before": record.not_before_s,
        "timeline": [[e.state.value, e.at_s, e.attempt, e.reason] for e in record.timeline],
        "execution_id": record.execution_id,
        "failure_reason": record.failure_reason,
    }


# Enum ``.value`` is a Python-level descriptor; the encoder looks names up here instead.
_STATE_NAMES = {state: state.value for state in OccurrenceState}


def _json_text(value: str | None) -> str:
    return "null" if value is None else json.dumps(value, ensure_ascii=False)


def encode_occurrence(record: Occurrence) -> bytes:
    """``canonical_json(occurrence_to_json(record))``, written out by hand for the pulse's sake.

    Observation encodes one record per due schedule; the generic encoder is twice as slow. Keys
    are in sorted order; state and event names are plain ASCII identifiers, free text goes
    through the JSON encoder. A test proves byte equality with the canonical form.
    """
    names = _STATE_NAMES
    timeline = ",".join(
        f'["{names[e.state]}",{e.at_s},{e.attempt},"{e.reason}"]' for e in record.timeline
    )
    not_before = "null" if record.not_before_s is None else str(record.not_before_s)
    return (
        f'{{"attempt":{record.attempt},"due":{record.due_s},'
        f'"execution_id":{_json_text(record.execution_id)},'
        f'"failure_reason":{_json_text(record.failure_reason)},"id":{record.id},'
        f'"not_before":{not_before},"retries_used":{record.retries_used},'
        f'"schedule_id":{record.schedule_id},"state":"{names[record.state]}",'
        f'"timeline":[{timeline}]}}'
    ).encode()


def occurrence_from_json(value: dict) -> Occurrence:
    return Occurrence(
        id=value["id"],
        schedule_id=value["schedule_id"],
        due_s=value["due"],
        state=OccurrenceState(value["state"]),
        attempt=value["attempt"],
        retries_used=value["retries_used"],
        not_before_s=value["not_before"],
        timeline=tuple(
            TimelineEntry(OccurrenceState(s), at, attempt, reason)
            for s, at, attempt, reason in value["timeline"]
        ),
        execution_id=value["execution_id"],
        failure_reason=value["failure_reason"],
    )


def worst_timeline_entry() -> TimelineEntry:
    longest_state = max(OccurrenceState, key=lambda s: len(s.value))
    longest_reason = max((e.value for e in Event), key=len)
    return TimelineEntry(longest_state, INSTANT_MAX_S, INT_MAX, longest_reason)


def timeline_entry_bytes(e: TimelineEntry) -> int:
    """The JSON length of one timeline entry as ``encode_occurrence`` writes it."""
    return len(f'["{_STATE_NAMES[e.state]}",{e.at_s},{e.attempt},"{e.reason}"]'.encode())


def _worst_case_record() -> Occurrence:
    longest_state = max(OccurrenceState, key=lambda s: len(s.value))
    entry = worst_timeline_entry()
    return Occurrence(
        id=INT_MAX,
        schedule_id=INT_MAX,
        due_s=INSTANT_MAX_S,
        state=longest_state,
        attempt=INT_MAX,
        retries_used=INT_MAX,
        not_before_s=INSTANT_MAX_S + 86_400 * 2,
        timeline=(entry,) * TIMELINE_ENTRIES_MAX,
        execution_id="x" * EXECUTION_ID_BYTES_MAX,
        failure_reason="x" * REASON_BYTES_MAX,
    )


# The largest canonical JSON any record can reach: every field is bounded above. The checkpoint
# reserves this much for each non-terminal record so its completion always fits (SPEC §3).
RECORD_BYTES_MAX = len(encode_occurrence(_worst_case_record()))
if max(map(len, CREATED_BY)) > max(len(e.value) for e in Event):
    raise CoreError("invariant: a creation reason is longer than every event name")
