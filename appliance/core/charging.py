"""The committed switch to charging rules 2 (see ``state.py``, "The checkpoint budget").

The budget decides what a growth command may add and what observation drops for capacity, so it
is apply semantics: two binaries charging differently would decide differently from the same log.
Rules 2 therefore never switch on by themselves. ``AdoptCharging(2)`` is a command kind outside
the version gate's baseline, proposed by the owner once every voter reports it; its apply writes
the ``charging`` part and charges every live record and its bound parts again, deterministically.
From then on the checkpoint names its rules, a reload charges by them, and the runner raises the
store's minimum reader version so an older binary refuses the store instead of charging it by
rules 1 (appliance/store/versions.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import (
    CHARGING_PART,
    CHARGING_V2,
    bound_part_admits_v2,
    bound_part_names,
)
from appliance.core.txn import Txn, register


@dataclass(frozen=True)
class AdoptCharging:
    """Charge the checkpoint by ``rules`` (only 2, the one switch there is) from now on."""

    rules: int


@register(AdoptCharging, grows=True)
def _adopt_charging(txn: Txn, cmd: AdoptCharging) -> bool:
    """True when this apply switched; False when the checkpoint already named the rules."""
    if type(cmd.rules) is not int or cmd.rules != CHARGING_V2:
        raise InvalidCommand(f"rules: must be {CHARGING_V2}")
    if txn.rules == CHARGING_V2:
        return False
    # A claim or permit written under rules 1 may exceed the bounds rules 2 reserve for: then the
    # switch waits (refused, nothing changes) until that record is terminal.
    for oid in sorted(txn.state.occurrences):
        record = txn.occurrence(oid)
        if record is None or record.terminal:
            continue
        for name in bound_part_names(oid):
            value = txn.extra(name)
            if value is None:
                continue
            problem = bound_part_admits_v2(name.partition("/")[0], value)
            if problem is not None:
                raise InvalidCommand(
                    f"rules: occurrence {oid} holds {name} beyond rules 2 ({problem})"
                )
    txn.put_extra(CHARGING_PART, {"rules": CHARGING_V2})
    txn.rebudget_live()
    return True


def charging_rules(state: SchedulerState) -> int:
    """The rules the checkpoint names: 1 without the ``charging`` part, else 2."""
    return 1 if CHARGING_PART not in state.extra else CHARGING_V2


def needs_charging_reader(state: SchedulerState) -> bool:
    """True once the checkpoint names rules 2: binaries that charge by rules 1 must refuse it."""
    return CHARGING_PART in state.extra


register_command_type(AdoptCharging)
