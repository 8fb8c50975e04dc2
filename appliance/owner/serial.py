"""The owner core's serial decisions: continuations keyed by the tokens they await.

Theory of operation: the runner loop used to block on a commit and take nothing else from its
queue meanwhile, so every decision was made from the state the previous one produced. The owner
keeps that rule without blocking: a decision that needs a commit is a generator that *yields*
the proposals (or the read barrier) it waits for and is resumed with their outcomes; while one is
suspended, every other event is held, in order, and handled once it finishes. The claims of one
pulse are yielded together, so they are proposed at once and Raft batches them. See
appliance/owner/owner.py for the contract.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

from appliance.core import state as core
from appliance.core.features import command_kind
from appliance.owner.applied import Accepted, NotYetApplicable, Refused
from appliance.owner.events import (
    BarrierDone,
    Effect,
    Event,
    FailedAnswer,
    LogRecord,
    LostAnswer,
    NotLeaderAnswer,
    Outcome,
    ProposalDone,
    Propose,
    ReadBarrier,
    ReplyFailed,
    SetTimer,
)

T = TypeVar("T")

# What a serial decision yields: the proposals / barriers it waits for, all at once.
Asks = tuple[Propose | ReadBarrier, ...]
Chain = Generator[Asks, list[Any], T]


# The version gate's question: why a command kind may not be proposed yet. The kind is the
# class name, or a feature a baseline command carries (appliance/core/features.py).
Gate = Callable[[str], str | None]


class StateReader(Protocol):
    def read(self, fn: Callable[[core.SchedulerState], T]) -> T: ...


class Uncertain(Exception):
    """A proposal whose fate is unknown: it may still commit."""


class NotOwner(Exception):
    """This voter is not the acquired owner (or stopped being it)."""


class SerialCore:
    """Tokens, effects, timers and the one suspended decision; the owner builds on it."""

    def __init__(
        self, state: StateReader, time_scale: float, gate: Gate | None = None, strict: bool = False
    ) -> None:
        self.time_scale = time_scale
        # Strict (the simulator, the tests): an exception inside a decision is a bug and is
        # raised to the driver. Otherwise (production) it is logged as ``loop_error`` and the
        # decision is dropped, so one bug does not stop all scheduling.
        self.strict = strict
        # The version gate (appliance/capabilities.py): why a command kind may not be proposed
        # yet, or None. Without one (tests, a single binary) every kind this binary knows goes.
        self._gate = gate
        self._read = state.read
        self._tokens = itertools.count(1)
        self._out: list[Effect] = []
        self._wall_s = 0.0
        # The serial decision in progress: its continuation, its caller, the answers it awaits.
        self._chain: Chain[Any] | None = None
        self._chain_request: int | None = None
        self._awaited: dict[int, Any] = {}
        self._awaited_order: list[int] = []
        # Awaited tokens not answered yet: a chain can await a whole burst's proposals, so an
        # answer must not rescan them all.
        self._unanswered: set[int] = set()
        self._backlog: deque[Event] = deque()
        self._timers: dict[int, Callable[[], None]] = {}
        self._dirty = True  # a commit happened: what may be claimed may have changed

    @abstractmethod
    def _handle_now(self, event: Event) -> None:  # the owner's event handling
        """Provided by ``Owner`` (appliance/owner/owner.py)."""

    @abstractmethod
    def _lose_ownership(self, hint: str | None) -> None:
        """Provided by ``Owner`` (appliance/owner/owner.py)."""

    # ---- serial decisions (continuations keyed by token) --------------------------------------

    def _awaits(self, event: Event) -> bool:
        return isinstance(event, ProposalDone | BarrierDone) and event.token in self._awaited

    def _deliver(self, event: ProposalDone | BarrierDone) -> None:
        self._awaited[event.token] = event.outcome if isinstance(event, ProposalDone) else event
        self._unanswered.discard(event.token)
        if self._unanswered:
            return
        answers = [self._awaited[t] for t in self._awaited_order]
        self._awaited, self._awaited_order = {}, []
        self._step(answers)

    def _run(self, chain: Chain[Any], request: int | None = None) -> None:
        self._chain, self._chain_request = chain, request
        self._step(None)

    def _step(self, answers: list[Any] | None) -> None:
        chain = self._chain
        if chain is None:
            return
        try:
            asks = chain.send(answers)  # type: ignore[arg-type]
            while not asks:  # nothing to wait for: go on at once
                asks = chain.send([])
        except StopIteration:
            self._chain = self._chain_request = None
            return
        except Exception as exc:  # a bug must not kill scheduling silently
            if self.strict:
                raise
            self._emit_log("loop_error", error=repr(exc))
            if self._chain_request is not None:
                self._out.append(ReplyFailed(self._chain_request, repr(exc)))
            self._chain = self._chain_request = None
            return
        self._awaited = {ask.token: None for ask in asks}
        self._awaited_order = [ask.token for ask in asks]
        self._unanswered = set(self._awaited)
        self._out.extend(asks)

    def _drain_backlog(self) -> None:
        while self._chain is None and self._backlog:
            self._handle_now(self._backlog.popleft())

    def _proposals(self, commands: list[Any]) -> Chain[list[Outcome]]:
        """Propose independent commands at once, so Raft batches their appends and fsyncs; the
        raw outcomes in the same order."""
        gated = [self._gated(c) for c in commands]
        asks = tuple(
            Propose(next(self._tokens), c)
            for c, g in zip(commands, gated, strict=True)
            if g is None
        )
        answers = iter((yield asks) if asks else ())
        return [next(answers) if g is None else g for g in gated]

    def _gated(self, command: Any) -> Refused | None:
        """A definite refusal for a kind some voter cannot apply yet: nothing is proposed."""
        refusal = self._gate(command_kind(command)) if self._gate is not None else None
        return None if refusal is None else Refused(NotYetApplicable(refusal))

    def _propose(self, command: Any) -> Chain[Accepted | Refused]:
        (outcome,) = yield from self._proposals([command])
        return self._interpret(outcome)

    def _barrier(self) -> Chain[BarrierDone]:
        (done,) = yield (ReadBarrier(next(self._tokens)),)
        return done  # type: ignore[no-any-return]

    def _interpret(self, outcome: Outcome) -> Accepted | Refused:
        """A proposal's outcome, or NotOwner / Uncertain."""
        if isinstance(outcome, NotLeaderAnswer):
            self._lose_ownership(outcome.leader_hint)
            raise NotOwner(outcome.detail or "not the leader")
        if isinstance(outcome, LostAnswer):
            raise Uncertain(f"the proposal was overwritten: {outcome.detail}")
        if isinstance(outcome, FailedAnswer):
            raise Uncertain(outcome.detail)
        self._dirty = True
        return outcome

    # ---- small helpers -----------------------------------------------------------------------

    def _emit_log(self, event: str, **fields: Any) -> None:
        self._out.append(LogRecord(event, fields))

    def _now_s(self) -> int:
        return int(self._wall_s)

    def _late_ms(self, due_s: int) -> float:
        """How long after its due instant something happened, in real milliseconds."""
        return round((self._wall_s - due_s) * 1000 / self.time_scale, 2)

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        token = next(self._tokens)
        self._timers[token] = fn
        self._out.append(SetTimer(token, delay_s))
