"""The owner core's serial decisions: continuations keyed by the tokens they await.

Theory of operation: the runner loop used to block on a commit and take nothing else from its
queue meanwhile, so every decision was made from the state the previous one produced. The owner
keeps that rule without blocking: a decision that needs a commit is a generator that *yields*
the proposals (or the read barrier) it waits for and is resumed with their outcomes; while one is
suspended, every other event is held, in order, and handed back once it finishes. The claims of
one pulse are yielded together, so they are proposed at once and Raft batches them.

``Serial`` is the one object every part of the owner shares (appliance/owner/owner.py composes
them): the token counter, the effects of the event being handled, the timers, the wall instant,
the committed-state reader, the version gate and the one suspended decision. It makes no
scheduling decision itself; it only proposes, waits and reports how a proposal ended.
"""

from __future__ import annotations

import itertools
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
    Tick,
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


class Serial:
    """Tokens, effects, timers and the one suspended decision, shared by the owner's parts."""

    def __init__(
        self,
        state: StateReader,
        time_scale: float,
        *,
        gate: Gate | None,
        strict: bool,
        lost_leadership: Callable[[str | None], None],
    ) -> None:
        self.time_scale = time_scale
        # Strict (the simulator, the tests): an exception inside a decision is a bug and is
        # raised to the driver. Otherwise (production) it is logged as ``loop_error`` and the
        # decision is dropped, so one bug does not stop all scheduling.
        self.strict = strict
        # The version gate (appliance/capabilities.py): why a command kind may not be proposed
        # yet, or None. Without one (tests, a single binary) every kind this binary knows goes.
        self._gate = gate
        # Told when a proposal or barrier answers "not the leader": ownership ends at once.
        self.lost_leadership = lost_leadership
        self.read = state.read
        self._tokens = itertools.count(1)
        self._out: list[Effect] = []
        self.wall_s = 0.0
        # The serial decision in progress: its continuation, its caller, the answers it awaits.
        self._chain: Chain[Any] | None = None
        self._chain_request: int | None = None
        self._awaited: dict[int, Any] = {}
        self._awaited_order: list[int] = []
        # Awaited tokens not answered yet: a chain can await a whole burst's proposals, so an
        # answer must not rescan them all.
        self._unanswered: set[int] = set()
        self._held: deque[Event] = deque()
        self._timers: dict[int, Callable[[], None]] = {}
        self.dirty = True  # a commit happened: what may be claimed may have changed

    # ---- one event's turn --------------------------------------------------------------------

    def begin(self, wall_s: float) -> None:
        """A new event is handed over at wall instant ``wall_s``."""
        self.wall_s = wall_s
        self._out = []

    def take_effects(self) -> list[Effect]:
        out, self._out = self._out, []
        return out

    def emit(self, effect: Effect) -> None:
        self._out.append(effect)

    def log(self, event: str, **fields: Any) -> None:
        self._out.append(LogRecord(event, fields))

    def token(self) -> int:
        """A fresh token (unique per owner) for an effect whose answer the driver echoes."""
        return next(self._tokens)

    def fail(self, request: int | None, exc: Exception) -> None:
        """Production's answer to a bug: logged, and the caller waiting on it answered."""
        self.log("loop_error", error=repr(exc))
        if request is not None:
            self._out.append(ReplyFailed(request, repr(exc)))

    # ---- the one suspended decision ----------------------------------------------------------

    @property
    def suspended(self) -> bool:
        """A decision waits for its commit (or barrier): every other event is held."""
        return self._chain is not None

    def awaits(self, event: Event) -> bool:
        return isinstance(event, ProposalDone | BarrierDone) and event.token in self._awaited

    def hold(self, event: Event) -> None:
        """Keep ``event`` until the suspended decision finishes; one pending look at the clock
        is enough."""
        if isinstance(event, Tick) and self._held and isinstance(self._held[-1], Tick):
            return
        self._held.append(event)

    def next_held(self) -> Event | None:
        """The oldest held event, once no decision is suspended."""
        if self._chain is None and self._held:
            return self._held.popleft()
        return None

    def deliver(self, event: ProposalDone | BarrierDone) -> None:
        self._awaited[event.token] = event.outcome if isinstance(event, ProposalDone) else event
        self._unanswered.discard(event.token)
        if self._unanswered:
            return
        answers = [self._awaited[t] for t in self._awaited_order]
        self._awaited, self._awaited_order = {}, []
        self._step(answers)

    def run(self, chain: Chain[Any], request: int | None = None) -> None:
        """Start a serial decision; ``request`` is the caller answered ``ReplyFailed`` if it
        fails (not strict)."""
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
            self.fail(self._chain_request, exc)
            self._chain = self._chain_request = None
            return
        self._awaited = {ask.token: None for ask in asks}
        self._awaited_order = [ask.token for ask in asks]
        self._unanswered = set(self._awaited)
        self._out.extend(asks)

    # ---- proposals and barriers --------------------------------------------------------------

    def proposals(self, commands: list[Any]) -> Chain[list[Outcome]]:
        """Propose independent commands at once, so Raft batches their appends and fsyncs; the
        raw outcomes in the same order."""
        gated = [self.gated(c) for c in commands]
        asks = tuple(
            Propose(next(self._tokens), c)
            for c, g in zip(commands, gated, strict=True)
            if g is None
        )
        answers = iter((yield asks) if asks else ())
        return [next(answers) if g is None else g for g in gated]

    def gated(self, command: Any) -> Refused | None:
        """A definite refusal for a kind some voter cannot apply yet: nothing is proposed."""
        refusal = self.kind_gated(command_kind(command))
        return None if refusal is None else Refused(NotYetApplicable(refusal))

    def kind_gated(self, kind: str) -> str | None:
        """Why ``kind`` may not be proposed yet (the version gate), or None."""
        return self._gate(kind) if self._gate is not None else None

    def propose(self, command: Any) -> Chain[Accepted | Refused]:
        (outcome,) = yield from self.proposals([command])
        return self.interpret(outcome)

    def barrier(self) -> Chain[BarrierDone]:
        (done,) = yield (ReadBarrier(next(self._tokens)),)
        return done  # type: ignore[no-any-return]

    def interpret(self, outcome: Outcome) -> Accepted | Refused:
        """A proposal's outcome, or NotOwner / Uncertain."""
        if isinstance(outcome, NotLeaderAnswer):
            self.lost_leadership(outcome.leader_hint)
            raise NotOwner(outcome.detail or "not the leader")
        if isinstance(outcome, LostAnswer):
            raise Uncertain(f"the proposal was overwritten: {outcome.detail}")
        if isinstance(outcome, FailedAnswer):
            raise Uncertain(outcome.detail)
        self.dirty = True
        return outcome

    # ---- time --------------------------------------------------------------------------------

    def now_s(self) -> int:
        return int(self.wall_s)

    def late_ms(self, due_s: int) -> float:
        """How long after its due instant something happened, in real milliseconds."""
        return round((self.wall_s - due_s) * 1000 / self.time_scale, 2)

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` once ``delay_s`` real seconds have passed (the driver's timer)."""
        token = next(self._tokens)
        self._timers[token] = fn
        self._out.append(SetTimer(token, delay_s))

    def fire(self, token: int) -> None:
        fn = self._timers.pop(token, None)
        if fn is not None:
            fn()
