"""The replication backends the runner's real-process tests run on (issue 11, "Must show").

A test that takes the ``backend`` fixture runs once per backend with the same code:
``backend.replication()`` is the runner config's ``replication`` object for one cluster (``None``
for the built-in Raft, the default). On etcd every call names a fresh key prefix, so each cluster
of runner processes has its own log and election while one real 3-member etcd on loopback is
shared by the whole module (started only when an etcd case runs).
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.etcd.cluster import EtcdCluster, require_etcd
from tests.etcd.members import fresh_prefix

# The shortest lease the config allows: an owner SIGKILLed on etcd is replaced after at most
# this long (plus one poll of the leader key), so failover stays within one scaled slot.
ETCD_LEASE_TTL_S = 2


@dataclass(frozen=True)
class Backend:
    kind: str
    etcd: EtcdCluster | None = None

    def replication(self) -> dict[str, Any] | None:
        if self.etcd is None:
            return None
        return {
            "kind": "etcd",
            "endpoints": self.etcd.endpoints,
            "prefix": fresh_prefix(),
            "lease_ttl_seconds": ETCD_LEASE_TTL_S,
        }

    def etcd_log_entries(self, replication: dict[str, Any]) -> int:
        """How many log entries etcd holds under this cluster's prefix: proof that the commands
        really went through etcd (a linearizable count-only range read)."""
        if self.etcd is None:
            raise ValueError("the raft backend keeps its log in each voter's store, not in etcd")

        def b64(text: str) -> str:
            return base64.b64encode(text.encode()).decode()

        prefix = replication["prefix"]
        body = {
            "key": b64(f"{prefix}/log/"),
            "range_end": b64(f"{prefix}/log0"),
            "count_only": True,
        }
        request = urllib.request.Request(
            self.etcd.endpoints[0] + "/v3/kv/range", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            return int(json.loads(reply.read()).get("count", 0))


@pytest.fixture(scope="module")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    require_etcd()
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["raft", "etcd"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "etcd":
        return Backend("etcd", request.getfixturevalue("etcd_cluster"))
    return Backend("raft")
