"""Two in-process runners (the real loop, core and machine) on etcd: the owner is cut from etcd,
ownership moves to the other runner with a new epoch, the permit granted before the takeover is
the only one for that invocation, and the cut owner admits nothing."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from appliance.replication.etcd import EtcdReplication
from appliance.runner.logs import DecisionLog
from appliance.runner.loop import Runner
from appliance.runner.worker_client import ObserveResult
from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import fresh_prefix, settings
from tests.etcd.proxy import CuttableProxy
from tests.runner.harness import T0, Voter, config, definition, wait_until


class NamedEtcdVoter(Voter):
    def __init__(self, node_id: str, endpoints: list[str], prefix: str) -> None:
        self.node_id, self.endpoints, self.prefix = node_id, endpoints, prefix
        super().__init__(cfg=dataclasses.replace(config(), node_id=node_id), now_s=T0 + 60)

    def _build(self) -> None:
        self.replication = EtcdReplication(  # type: ignore[assignment]
            node_id=self.node_id,
            settings=settings(self.endpoints, self.prefix),
            apply=self.machine.apply,
            applied_index=self.machine.applied_index,
        )
        self.runner = Runner(
            cfg=self.cfg,
            machine=self.machine,
            replication=self.replication,
            worker=self.worker,  # type: ignore[arg-type]
            clock=self.clock,
            log=DecisionLog(self.node_id, self.log_stream),
            strict=True,
        )
        self.worker.runner = self.runner

    def start_without_waiting(self) -> None:
        self.replication.start()
        self.runner.start()


def test_an_owner_cut_from_etcd_loses_ownership_and_no_second_permit_exists(
    etcd_cluster: EtcdCluster,
) -> None:
    prefix = fresh_prefix()
    proxies = [CuttableProxy(etcd_cluster.client_port[n]) for n in etcd_cluster.names]
    a = NamedEtcdVoter("v1", [p.url for p in proxies], prefix)
    b = NamedEtcdVoter("v2", etcd_cluster.endpoints, prefix)
    try:
        a.clock.set(T0 + 1)
        with a:
            a.worker.on_observe = lambda eid: ObserveResult("running")
            reply = a.command(json.dumps({"action": "create", "definition": definition()}))
            assert reply["ok"] is True, reply
            a.advance_to(T0 + 60)
            wait_until(lambda: a.worker.admissions, "the first permit")
            status, permit = a.worker.admissions[0]
            assert status == 200
            binding: dict[str, Any] = a.worker.calls[0][1]
            epoch_a = a.runner.epoch
            b.start_without_waiting()
            for proxy in proxies:
                proxy.cut()
            wait_until(lambda: b.runner.epoch is not None, "ownership moves to v2", 15)
            assert b.runner.epoch > epoch_a  # type: ignore[operator]
            assert a.runner.admit(binding, "inc-1")[0] != 200  # the cut owner admits nothing
            again = b.runner.admit(binding, "inc-1")  # the same incarnation, a lost answer
            assert again[0] == 200 and again[1]["existing"] is True  # the same permit back...
            assert again[1]["permit"] == permit["permit"]  # ...not a second one
            assert b.runner.admit(binding, "inc-2")[0] == 403  # any other caller: refused
            for proxy in proxies:
                proxy.heal()
            wait_until(
                lambda: a.machine.applied_index == b.machine.applied_index, "v1 catches up", 15
            )
            assert a.runner.epoch is None
    finally:
        b.runner.drain_and_stop(1.0)
        b.replication.stop()
        for proxy in proxies:
            proxy.close()
