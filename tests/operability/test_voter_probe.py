"""Probing peers' Raft status routes: reachability, lag, the cluster bearer, the cache."""

from __future__ import annotations

from collections.abc import Iterator

import falcon
import pytest

from appliance.config.addresses import HostPort
from appliance.http import HttpServer, create_app
from appliance.metrics.voters import RAFT_STATUS_PATH, VoterProbe
from tests.runner.cluster import free_ports

CLUSTER_TOKEN = "cluster-token-for-probe-tests"


class Status:
    def __init__(self) -> None:
        self.calls = 0
        self.applied_index = 40

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.calls += 1
        resp.media = {
            "node_id": "v2",
            "role": "follower",
            "term": 7,
            "leader_id": "v1",
            "commit_index": 42,
            "applied_index": self.applied_index,
            "last_log_index": 42,
        }


@pytest.fixture
def peer() -> Iterator[tuple[Status, int]]:
    status = Status()
    app = create_app(
        routes={RAFT_STATUS_PATH: status},
        credentials={"cluster": CLUSTER_TOKEN},
        accepted_roles={"cluster"},
        body_bytes_max=1024,
        surface="raft",
    )
    server = HttpServer(app, host="127.0.0.1", port=0, name="peer", body_bytes_max=1024).start()
    try:
        yield status, server.port
    finally:
        server.stop()


def test_a_reachable_peer_reports_role_term_and_lag_against_our_commit_index(peer) -> None:
    _, port = peer
    (closed,) = free_ports(1)
    probe = VoterProbe(
        {"v2": HostPort("127.0.0.1", port), "v3": HostPort("127.0.0.1", closed)}, CLUSTER_TOKEN
    )
    try:
        v2, v3 = probe.views(commit_index=45)
    finally:
        probe.close()
    assert (v2.node_id, v2.reachable, v2.role, v2.term, v2.applied_index) == (
        "v2", True, "follower", 7, 40
    )  # fmt: skip
    assert v2.lag_entries == 5
    assert (v3.node_id, v3.reachable, v3.lag_entries) == ("v3", False, None)


def test_a_peer_refusing_the_bearer_counts_as_unreachable(peer) -> None:
    _, port = peer
    probe = VoterProbe({"v2": HostPort("127.0.0.1", port)}, "not-the-cluster-token")
    try:
        assert probe.views(commit_index=1)[0].reachable is False
    finally:
        probe.close()


def test_answers_are_cached_so_a_burst_of_scrapes_costs_one_round(peer) -> None:
    status, port = peer
    now = [100.0]
    probe = VoterProbe(
        {"v2": HostPort("127.0.0.1", port)}, CLUSTER_TOKEN, cache_s=1.0, clock=lambda: now[0]
    )
    try:
        probe.views(42)
        now[0] += 0.999
        status.applied_index = 42
        assert probe.views(42)[0].lag_entries == 2  # still the cached answer
        assert status.calls == 1
        now[0] += 0.001
        assert probe.views(42)[0].lag_entries == 0
        assert status.calls == 2
    finally:
        probe.close()
