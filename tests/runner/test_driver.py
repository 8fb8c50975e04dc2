"""The runner loop is the owner core's thin driver: it builds no core command of its own, and
everything it proposes came from an owner ``Propose`` effect."""

from __future__ import annotations

import ast
import json
import threading
import time
from pathlib import Path
from typing import Any

from appliance.owner.events import Propose, Tick
from appliance.runner.machine import encode_command
from tests.runner.harness import T0, Voter, definition

RUNNER = Path(__file__).resolve().parents[2] / "appliance" / "runner"
# What the driver may call on the pure ownership helpers: an admission's reply, never a command.
OWNERSHIP_CALLS_ALLOWED = {"admit_answer"}


def _tree(name: str) -> ast.Module:
    return ast.parse((RUNNER / name).read_text(), filename=name)


def test_the_loop_imports_nothing_that_builds_core_commands() -> None:
    tree = _tree("loop.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("appliance.core"), node.module
            assert node.module != "appliance.commands.table", node.module
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("appliance.core") for a in node.names)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "ownership"
        ):
            assert node.func.attr in OWNERSHIP_CALLS_ALLOWED, f"line {node.lineno}"


class RecordingReplication:
    """The real replication, recording every proposal's bytes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.proposed: list[bytes] = []

    def propose(self, command: bytes, *, timeout_s: float) -> Any:
        self.proposed.append(command)
        return self._inner.propose(command, timeout_s=timeout_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_every_proposal_of_the_driver_is_an_owner_effect() -> None:
    recorders: list[RecordingReplication] = []

    def wrap(replication: Any) -> RecordingReplication:
        recorders.append(RecordingReplication(replication))
        return recorders[-1]

    voter = Voter(wrap=wrap)
    effects: list[bytes] = []
    handle = voter.runner.owner.handle

    def spy(event: Any, wall_s: float) -> list[Any]:
        out = handle(event, wall_s)
        effects.extend(encode_command(e.command) for e in out if isinstance(e, Propose))
        return out

    voter.runner.owner.handle = spy  # type: ignore[method-assign]
    with voter as v:
        reply = v.command(json.dumps({"action": "create", "definition": definition()}))
        assert reply["ok"] is True, reply
        v.advance_to(T0 + 60)
        v.wait_state(1, "Succeeded")
    proposed = recorders[0].proposed
    kinds = {json.loads(p)["command"] for p in proposed}
    # Ownership, the named create, the folded observation and claim, the admission, the outcome.
    assert {"AcquireOwnership", "CreateNamedSchedule", "Admit", "RecordOutcome"} <= kinds, kinds
    assert sorted(proposed) == sorted(effects)


class StalledObservation(RecordingReplication):
    """Holds every observation's proposal until released."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.held = threading.Event()

    def propose(self, command: bytes, *, timeout_s: float) -> Any:
        if json.loads(command)["command"] == "ObserveAndClaim":
            self.held.set()
            self.release.wait(10.0)
        return super().propose(command, timeout_s=timeout_s)


def test_the_loop_sleeps_while_the_owner_waits_for_a_commit() -> None:
    stalls: list[StalledObservation] = []

    def wrap(replication: Any) -> StalledObservation:
        stalls.append(StalledObservation(replication))
        return stalls[-1]

    voter = Voter(wrap=wrap)
    ticks: list[float] = []
    handle = voter.runner.owner.handle

    def counting(event: Any, wall_s: float) -> list[Any]:
        if isinstance(event, Tick):
            ticks.append(wall_s)
        return handle(event, wall_s)

    voter.runner.owner.handle = counting  # type: ignore[method-assign]
    with voter as v:
        assert v.command(json.dumps({"action": "create", "definition": definition()}))["ok"]
        v.advance_to(T0 + 60)
        assert stalls[0].held.wait(10.0)
        before = len(ticks)
        time.sleep(0.3)  # the commit is held: the loop has nothing to do but wait
        spun = len(ticks) - before
        stalls[0].release.set()
        v.wait_state(1, "Succeeded")
    assert spun <= 3, f"{spun} ticks in 0.3 s while the owner waited for a commit"


def test_drain_and_stop_waits_for_a_busy_loop_to_take_the_drain() -> None:
    voter = Voter()
    busy = threading.Event()
    in_turn = threading.Event()
    handle = voter.runner.owner.handle

    def slow(event: Any, wall_s: float) -> list[Any]:
        if busy.is_set() and isinstance(event, Tick):
            busy.clear()
            in_turn.set()
            time.sleep(0.5)  # a long turn: the drain item waits in the queue meanwhile
        return handle(event, wall_s)

    voter.runner.owner.handle = slow  # type: ignore[method-assign]
    with voter as v:
        busy.set()
        v.runner.wake()
        assert in_turn.wait(10.0)
        v.runner.drain_and_stop(5.0)  # called while the loop is in the middle of its turn
        assert v.events("draining"), "the loop stopped without taking the drain"
