"""How the owner commits what it learned about an attempt: one named method per way.

Theory of operation. Two ways, and the caller names which one it means:

- ``serially``: proposed, and every other event is held until it commits (a serial decision,
  appliance/owner/serial.py). The fence (``FenceDispatch``), ``MarkUnknown``, a cancellation's
  end (``ConfirmCancelled``, ``FenceAfterCancel``): what the attempt does next depends on it.
- ``outcome``: a worker-confirmed ``RecordOutcome``, proposed *without* holding other events (as
  admissions are). The worker's slot is free once it reported the outcome, so the next attempt
  waiting for capacity may go at once, and the outcomes of a burst share Raft appends. Its
  callers forget the attempt whatever the commit's result (an uncertain outcome is re-observed
  after the next takeover), so nothing waits for it; its result is only logged when it arrives
  (``answered``). A kind the version gate holds back is refused at once, nothing proposed.

Either way the decision log says how it ended: ``<event>`` with the committed state,
``<event>_refused`` or ``<event>_uncertain`` with the reason.
"""

from __future__ import annotations

from typing import Any

from appliance.core import state as core
from appliance.owner.applied import Accepted, Refused
from appliance.owner.events import Outcome, Propose
from appliance.owner.serial import Chain, NotOwner, Serial, Uncertain


class Commits:
    """The owner's commits about attempts, and the concurrent outcomes not answered yet."""

    def __init__(self, serial: Serial) -> None:
        self._serial = serial
        self._outcomes: dict[int, tuple[str, dict[str, Any]]] = {}  # token -> its log event

    def serially(self, command: Any, event: str, **fields: Any) -> Chain[Accepted | Refused | None]:
        """Propose ``command`` and wait for its commit, holding every other event; None when its
        fate is unknown (or this voter no longer leads)."""
        try:
            result = yield from self._serial.propose(command)
        except (NotOwner, Uncertain) as exc:
            self._serial.log(f"{event}_uncertain", **{**fields, "reason": str(exc)})
            return None
        self._log_result(event, fields, result)
        return result

    def outcome(self, command: core.RecordOutcome, event: str, **fields: Any) -> None:
        """Propose a confirmed outcome without waiting for it (see the module docstring)."""
        gated = self._serial.gated(command)
        if gated is not None:  # definite, nothing proposed: logged like a committed refusal
            self._log_result(event, fields, self._serial.interpret(gated))
            return
        token = self._serial.token()
        self._outcomes[token] = (event, fields)
        self._serial.emit(Propose(token, command))

    def awaits(self, token: int) -> bool:
        return token in self._outcomes

    def answered(self, token: int, outcome: Outcome) -> None:
        """The commit of an ``outcome`` proposal ended: log how."""
        event, fields = self._outcomes.pop(token)
        try:
            result = self._serial.interpret(outcome)
        except (NotOwner, Uncertain) as exc:
            self._serial.log(f"{event}_uncertain", **{**fields, "reason": str(exc)})
            return
        self._log_result(event, fields, result)

    def _log_result(self, event: str, fields: dict[str, Any], result: Accepted | Refused) -> None:
        if isinstance(result, Refused):  # its reason replaces the one the command carried
            self._serial.log(f"{event}_refused", **{**fields, "reason": result.message})
            return
        state = getattr(result.value, "state", None)
        self._serial.log(event, state=getattr(state, "value", state), **fields)
