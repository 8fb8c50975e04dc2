"""An in-process voter for loop tests: the real loop, core, machine and single-voter Raft, with an
injected clock and a scripted worker at the network boundary (the only part replaced)."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from appliance.config.runner import parse_runner_config
from appliance.raft.storage import MemoryLogStorage
from appliance.replication import single
from appliance.runner.logs import DecisionLog
from appliance.runner.loop import Runner
from appliance.runner.machine import Machine
from appliance.runner.process import answer_line
from appliance.runner.worker_client import CancelResult, ExecResult, ObserveResult
from tests import support

T0 = 1_800_000_000  # 2027-01-15T08:00:00Z, a whole minute
WAIT_S = 10.0


def config(**remote: Any) -> Any:
    return parse_runner_config(
        {
            "node_id": "v1",
            "advertise_addr": "127.0.0.1",
            "cluster_port": 9,
            "peers": [],
            "data_dir": "/nonexistent/v1",
            "admission_addr": "127.0.0.1:9",
            "admission_bearer_env": "A",
            "cluster_bearer_env": "C",
            "remote": {
                "url": "http://127.0.0.1:9",
                "bearer_env": "W",
                "expires_at": "2099-01-01T00:00:00Z",
                "session": "tests",
                "timeout_seconds": 60,
                "heap_mb": 64,
                "namespace": "ns",
                "worker_id": "w1",
                **remote,
            },
        }
    )


def one_slot_schedules(due_s: int, count: int, code: str, prefix: str) -> list[dict[str, Any]]:
    """``count`` schedules whose cron names exactly one slot, the minute ``due_s`` (UTC); CatchUp
    cap 1 so that a late owner still runs it, Skip, no retry."""
    due = time.gmtime(due_s)
    cron = f"{due.tm_min} {due.tm_hour} {due.tm_mday} {due.tm_mon} *"
    return [
        {
            "name": f"{prefix}-{i}",
            "code": code,
            "cron": cron,
            "timezone": "UTC",
            "policy": {
                "missed": {"CatchUp": {"cap": 1}},
                "overlap": "Skip",
                "retry": {"max_retries": 0, "delay_seconds": 0},
            },
        }
        for i in range(count)
    ]


def definition(name: str = "job", cron: str = "* * * * *", **policy: Any) -> dict[str, Any]:
    return {
        "name": name,
        "code": "console.log(1)",
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": "Skip",
            "overlap": "Skip",
            "retry": {"max_retries": 0, "delay_seconds": 0},
            **policy,
        },
    }


class ManualClock:
    time_scale = 1.0

    def __init__(self, now_s: float) -> None:
        self._now_s = now_s
        self._lock = threading.Lock()

    def now_s(self) -> float:
        with self._lock:
            return self._now_s

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_s(), UTC)

    def set(self, now_s: float) -> None:
        with self._lock:
            self._now_s = now_s


class ScriptedWorker:
    """The worker's three routes as functions the test sets; records every call."""

    def __init__(self) -> None:
        self.runner: Runner | None = None
        self.calls: list[tuple[str, Any]] = []
        self.on_exec: Callable[[dict[str, Any]], ExecResult] = self.admit_and_accept
        self.on_observe: Callable[[str], ObserveResult] = lambda eid: ObserveResult("completed")
        self.on_cancel: Callable[[dict[str, Any]], CancelResult] = lambda b: CancelResult("stopped")
        self.admissions: list[tuple[int, dict[str, Any]]] = []
        self.incarnation = "inc-1"
        self.retained_through: list[int | None] = []  # W of every exec and observation

    def admit_and_accept(self, binding: dict[str, Any]) -> ExecResult:
        if self.runner is None:
            raise RuntimeError("no runner")
        status, body = self.runner.admit(binding, self.incarnation)
        self.admissions.append((status, body))
        if status != 200:
            return ExecResult("refused", code=body["error"]["code"])
        eid = f"s{binding['schedule_id']}-o{binding['occurrence_id']}-a{binding['attempt']}"
        return ExecResult("accepted", eid)

    def execute(
        self, binding: dict[str, Any], code: str, retained_through: int | None = None
    ) -> ExecResult:
        self.calls.append(("exec", binding))
        self.retained_through.append(retained_through)
        return self.on_exec(binding)

    def observe(self, execution_id: str, retained_through: int | None = None) -> ObserveResult:
        self.calls.append(("observe", execution_id))
        self.retained_through.append(retained_through)
        return self.on_observe(execution_id)

    def cancel(self, binding: dict[str, Any]) -> CancelResult:
        self.calls.append(("cancel", binding))
        return self.on_cancel(binding)

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)

    def close(self) -> None:
        pass


class Voter:
    def __init__(
        self,
        cfg: Any = None,
        now_s: float = T0 + 1,
        wrap: Callable[[Any], Any] | None = None,
        unknown_poll_s: float = 0.2,
        gate: Callable[[str], str | None] | None = None,
        strict: bool = True,
    ) -> None:
        self._gate = gate
        self._strict = strict  # an exception inside the owner or its loop fails the test
        # Unknown attempts are re-observed after unknown_poll_s real seconds (10 s in production).
        self._unknown_poll_s = unknown_poll_s
        self.cfg = cfg or config()
        self.clock = ManualClock(now_s)
        self.worker = ScriptedWorker()
        self.log_stream = io.StringIO()
        self.machine = Machine(None, self.cfg.limits)
        self.storage = MemoryLogStorage()
        self._wrap = wrap
        self._build()

    def _build(self) -> None:
        """A voter process over this machine and log: on restart, the same durable state."""
        self.replication = single(
            node_id="v1",
            storage=self.storage,
            apply=self.machine.apply,
            applied_index=self.machine.applied_index,
        )
        self.runner = Runner(
            cfg=self.cfg,
            machine=self.machine,
            replication=self._wrap(self.replication) if self._wrap else self.replication,
            worker=self.worker,  # type: ignore[arg-type]
            clock=self.clock,
            log=DecisionLog("v1", self.log_stream),
            unknown_poll_s=self._unknown_poll_s,
            gate=self._gate,
            strict=self._strict,
        )
        self.worker.runner = self.runner

    def restart(self) -> None:
        """Crash-free restart: a new term, a new ownership epoch, the takeover."""
        self.runner.drain_and_stop(0.0)
        self.replication.stop()
        self.assert_no_loop_failure()
        self._build()
        self.__enter__()

    def __enter__(self) -> Voter:
        self.replication.start()
        self.runner.start()
        wait_until(lambda: self.runner.epoch is not None, "ownership")
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.drain_and_stop(1.0)
        self.replication.stop()
        if exc[0] is None:  # a test that failed already keeps its own error
            self.assert_no_loop_failure()

    def assert_no_loop_failure(self) -> None:
        """The strict loop stopped on an exception inside the owner or itself: a bug."""
        failure = self.runner.failure
        assert failure is None, f"the runner loop raised {failure!r}"

    def command(self, doc: str) -> dict[str, Any]:
        return answer_line(self.runner, doc)

    def advance_to(self, now_s: float) -> None:
        self.clock.set(now_s)
        self.runner.wake()

    def record(self, occurrence_id: int) -> Any:
        return self.machine.read(lambda st: st.occurrences.get(occurrence_id))

    def state_of(self, occurrence_id: int) -> str | None:
        record = self.record(occurrence_id)
        return None if record is None else record.state.value

    def wait_state(self, occurrence_id: int, state: str) -> Any:
        wait_until(lambda: self.state_of(occurrence_id) == state, f"occurrence -> {state}")
        return self.record(occurrence_id)

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log_stream.getvalue().splitlines():
            event = json.loads(line)
            if event["event"] == name:
                out.append(event)
        return out


def wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    return support.wait_for(predicate, what, timeout_s, poll_s=0.01)
