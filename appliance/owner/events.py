"""The owner core's inputs (events) and outputs (effects), as frozen dataclasses.

See appliance/owner/owner.py for the contract: who feeds which event, what each effect asks of
the driver, and what a token means. Nothing here does anything; these are messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.commands.operator import OperatorCommand
from appliance.owner.applied import Accepted, Refused
from appliance.owner.worker_answers import CancelResult, ExecResult, ObserveResult

# ---- how a proposal (or a read barrier) ended ---------------------------------------------------


@dataclass(frozen=True)
class NotLeaderAnswer:
    """The replication layer said this voter does not lead (nothing was or will be committed)."""

    leader_hint: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class LostAnswer:
    """The entry was overwritten by another leader's: it did not commit."""

    detail: str


@dataclass(frozen=True)
class FailedAnswer:
    """No answer (a timeout, a stopped driver, an error): the proposal may still commit."""

    detail: str


# Accepted / Refused: it committed (the apply's result); the others: it did not, or may have.
Outcome = Accepted | Refused | NotLeaderAnswer | LostAnswer | FailedAnswer


# ---- events: what the driver feeds in ------------------------------------------------------------


@dataclass(frozen=True)
class LeadershipChanged:
    """The replication layer's view of leadership changed (from its subscription)."""

    is_leader: bool
    term: int
    leader_id: str | None


@dataclass(frozen=True)
class Tick:
    """Look at the clock now: acquire ownership if it is wanted, else pulse, retry and claim.
    The driver sends one after every other event it hands over and whenever it wakes."""


@dataclass(frozen=True)
class ProposalDone:
    """The proposal of ``Propose(token, ...)`` ended so."""

    token: int
    outcome: Outcome


@dataclass(frozen=True)
class BarrierDone:
    """The read barrier of ``ReadBarrier(token)`` ended: ``failure`` is None when a quorum
    confirmed leadership; ``raft_status`` is the replication layer's status read right after."""

    token: int
    failure: NotLeaderAnswer | FailedAnswer | None
    raft_status: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecAnswered:
    token: int
    result: ExecResult | Exception


@dataclass(frozen=True)
class ObserveAnswered:
    token: int
    result: ObserveResult | Exception


@dataclass(frozen=True)
class CancelAnswered:
    token: int
    result: CancelResult | Exception


@dataclass(frozen=True)
class TimerFired:
    token: int


@dataclass(frozen=True)
class OperatorRequest:
    """An operator command (stdin, HTTP, MCP, admin); ``request`` is the driver's id for the
    caller, echoed by the ``Reply``."""

    request: int
    command: OperatorCommand


@dataclass(frozen=True)
class AdmissionRequest:
    """The worker's request for a permit (the admission route)."""

    request: int
    binding: Mapping[str, Any]
    incarnation: str
    # Issue 33: the fleet worker whose own admission credential was presented; None for the
    # shared one. The owner refuses it for an attempt bound to another worker.
    caller: str | None = None


@dataclass(frozen=True)
class Drain:
    """Stop scheduling; keep answering admissions, observations and cancellations."""


Event = (
    LeadershipChanged
    | Tick
    | ProposalDone
    | BarrierDone
    | ExecAnswered
    | ObserveAnswered
    | CancelAnswered
    | TimerFired
    | OperatorRequest
    | AdmissionRequest
    | Drain
)


# ---- effects: what the driver carries out --------------------------------------------------------


@dataclass(frozen=True)
class Propose:
    """Propose ``command`` (a core command) and feed back ``ProposalDone(token, outcome)``.

    ``answers_admission``: when set, the driver may answer that admission request as soon as the
    proposal commits, with ``ownership.admit_answer(outcome)``, before the owner hears of it (the
    worker waits on its launch path; the answer depends only on the applied result). The owner's
    later ``Reply`` for the same request is then ignored."""

    token: int
    command: Any
    answers_admission: int | None = None


@dataclass(frozen=True)
class ReadBarrier:
    """Confirm leadership with a quorum; feed back ``BarrierDone(token, ...)``."""

    token: int


@dataclass(frozen=True)
class DispatchRequest:
    """Ask the worker to execute (exec route); feed back ``ExecAnswered(token, result)``."""

    token: int
    binding: Mapping[str, Any]
    code: str
    retained_through: int | None = None  # W of the committed state, for the worker's retention

    @property
    def worker_id(self) -> str | None:
        """The fleet worker to send it to: the one the binding names (issue 33)."""
        value = self.binding.get("worker_id")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class ObserveRequest:
    """Ask the worker about an execution; feed back ``ObserveAnswered(token, result)``."""

    token: int
    execution_id: str
    retained_through: int | None = None  # W of the committed state, for the worker's retention
    worker_id: str | None = None  # the fleet worker to ask (issue 33); None: the only one


@dataclass(frozen=True)
class CancelRequest:
    """Ask the worker to stop an invocation; feed back ``CancelAnswered(token, result)``."""

    token: int
    binding: Mapping[str, Any]

    @property
    def worker_id(self) -> str | None:
        value = self.binding.get("worker_id")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class SetTimer:
    """Feed back ``TimerFired(token)`` after ``delay_s`` real (unscaled) seconds."""

    token: int
    delay_s: float


@dataclass(frozen=True)
class Reply:
    """Answer caller ``request``: an operator reply (a JSON-able dict) or an admission answer
    (HTTP status, body)."""

    request: int
    value: Any


@dataclass(frozen=True)
class ReplyFailed:
    """The owner failed while serving ``request`` (a bug): the caller's outcome is unknown."""

    request: int
    error: str


@dataclass(frozen=True)
class LogRecord:
    """One decision-log line: ``log.emit(event, **fields)``."""

    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


Effect = (
    Propose
    | ReadBarrier
    | DispatchRequest
    | ObserveRequest
    | CancelRequest
    | SetTimer
    | Reply
    | ReplyFailed
    | LogRecord
)
