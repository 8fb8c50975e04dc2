"""Three ``appliance runner`` processes on loopback (issue 4's 3-process test, via the runner).

They elect a leader that acquires ownership and commits operator mutations; after SIGKILL of the
owner a new owner (higher term, new epoch) takes over with every committed entry intact; the
killed voter restarts from its store and catches up; every Raft route, status included, answers
401 without the cluster bearer; a voter that is not the owner answers ``status`` with 409 and
the leader it knows.

The same test runs on the etcd backend (issue 11): there the "voters" are runner instances
sharing one etcd prefix, the term is the etcd leader key's creation revision, and a runner opens
no cluster listener at all (instead of one that refuses requests without the cluster bearer).
"""

from __future__ import annotations

import socket
from pathlib import Path

from appliance.http import HttpClient
from tests.runner.cluster import DEMO, ENV, Cluster, wait_for
from tests.runner.conftest import Backend


def _schedule_names(reply: dict) -> list[str]:  # type: ignore[type-arg]
    return [s["definition"]["name"] for s in reply["schedules"]]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _assert_raft_routes_need_the_cluster_bearer(cluster: Cluster, client: HttpClient) -> None:
    for port in cluster.cluster_ports.values():
        for method, path in (
            ("GET", "/raft/v1/status"),
            ("POST", "/raft/v1/append"),
            ("POST", "/raft/v1/vote"),
        ):
            url = f"http://127.0.0.1:{port}{path}"
            assert client.request(method, url, body=b"{}").status == 401, url
            wrong = ENV["RUNNER_ADMISSION_TOKEN"]  # a real credential of another role
            assert client.request(method, url, body=b"{}", bearer=wrong).status == 401
        good = client.get(
            f"http://127.0.0.1:{port}/raft/v1/status", bearer=ENV["RUNNER_CLUSTER_TOKEN"]
        )
        assert good.status == 200


def test_three_runner_voters_fail_over_without_losing_a_committed_entry(
    tmp_path: Path, backend: Backend
) -> None:
    cluster = Cluster(tmp_path, 3, time_scale=1.0, replication=backend.replication())
    client = HttpClient(connect_timeout_ms=500, read_timeout_ms=2_000)
    try:
        cluster.start()
        first = cluster.owner()
        status = first.command({"action": "status"})
        assert status["ownership"]["node"] == first.node_id
        first_epoch, first_term = status["ownership"]["epoch"], status["term"]
        created = [
            first.command({"action": "create", "definition": {**DEMO, "name": f"s{i}"}})
            for i in range(3)
        ]
        assert [r.get("id") for r in created] == [1, 2, 3], created

        others = [v for v in cluster.voters.values() if v is not first]
        refusal = others[0].command({"action": "status"})
        assert refusal["ok"] is False and refusal["status"] == 409
        assert refusal["error"]["leader_hint"] == first.node_id

        if backend.etcd is None:
            _assert_raft_routes_need_the_cluster_bearer(cluster, client)
        else:
            # The runners talk only to etcd: nothing listens on the (unused) cluster ports, and
            # the committed commands are etcd keys under the shared prefix.
            assert not any(_listening(p) for p in cluster.cluster_ports.values())
            assert cluster.replication is not None
            applied = first.command({"action": "status"})["applied_index"]
            assert applied >= 4, applied  # the acquisition and the three creates
            assert backend.etcd_log_entries(cluster.replication) >= applied

        first.kill()
        second = cluster.owner(exclude=(first.node_id,))
        status2 = second.command({"action": "status"})
        assert status2["term"] > first_term
        assert status2["ownership"]["epoch"] > first_epoch
        assert _schedule_names(second.command({"action": "list"})) == ["s0", "s1", "s2"]
        assert second.command({"action": "disable", "id": 2})["ok"] is True

        first.start()
        caught_up = wait_for(
            lambda: (
                (view := first.command({"action": "list"}))
                and [s["enabled"] for s in view["schedules"]] == [True, False, True]
                and view
            ),
            "the restarted voter to catch up",
        )
        assert caught_up["stale_local_view"] is True
        assert _schedule_names(caught_up) == ["s0", "s1", "s2"]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        client.close()
        cluster.stop()
