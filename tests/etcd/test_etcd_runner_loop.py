"""The runner loop's own tests (tests/runner/test_loop.py), unchanged, on the etcd backend: the
in-process voter of tests/runner/harness.py is swapped for one whose replication is
``EtcdReplication`` on a real 3-member etcd cluster; the test code itself is the same."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tests.runner.test_loop as loop_tests
from appliance.replication.etcd import EtcdReplication
from appliance.runner.logs import DecisionLog
from appliance.runner.loop import Runner
from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import fresh_prefix, settings
from tests.runner.harness import Voter


class EtcdVoter(Voter):
    endpoints: list[str] = []
    built = 0  # proves the loop tests really ran on this voter

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.prefix = fresh_prefix()  # one log per voter, kept across its restarts
        super().__init__(*args, **kwargs)

    def _build(self) -> None:
        EtcdVoter.built += 1
        self.replication = EtcdReplication(  # type: ignore[assignment]
            node_id="v1",
            settings=settings(self.endpoints, self.prefix),
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
            # As the in-process voter: an Unknown is re-observed after 0.2 s, not production's
            # 10 s, which would race the tests' 10 s waits for the later confirmed outcome.
            unknown_poll_s=self._unknown_poll_s,
            gate=self._gate,
            strict=True,
        )
        self.worker.runner = self.runner


LOOP_TESTS = {
    name: fn
    for name, fn in vars(loop_tests).items()
    if name.startswith("test_") and callable(fn) and not inspect.signature(fn).parameters
}


@pytest.fixture
def on_etcd(etcd_cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(EtcdVoter, "endpoints", etcd_cluster.endpoints)
    monkeypatch.setattr(loop_tests, "Voter", EtcdVoter)
    yield


def test_the_loop_suite_is_not_empty() -> None:
    assert len(LOOP_TESTS) >= 10


@pytest.mark.parametrize("name", sorted(LOOP_TESTS))
def test_runner_loop_rule_holds_on_etcd(on_etcd: None, name: str) -> None:
    rule: Callable[[], None] = LOOP_TESTS[name]
    before = EtcdVoter.built
    rule()
    assert EtcdVoter.built > before
