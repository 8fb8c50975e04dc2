"""etcd with authentication enabled: the member authenticates from ``user:password`` and its
token reaches both the unary calls and the watch stream."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from appliance.replication.etcd import EtcdReplication
from appliance.replication.etcd_gateway import EtcdGateway, EtcdUnavailable
from tests.etcd.cluster import EtcdCluster, require_etcd
from tests.etcd.members import WAIT_S, StateMachine, fresh_prefix, settings, wait_for


@pytest.fixture
def secured(tmp_path) -> Iterator[EtcdCluster]:  # type: ignore[no-untyped-def]
    require_etcd()
    etcd = EtcdCluster(tmp_path)
    try:
        etcd.start()
        admin = EtcdGateway(etcd.endpoints)
        admin.call("/v3/auth/user/add", {"name": "root", "password": "pw-root"}, idempotent=False)
        admin.call("/v3/auth/user/grant", {"user": "root", "role": "root"}, idempotent=False)
        admin.call("/v3/auth/enable", {}, idempotent=False)
        admin.close()
        yield etcd
    finally:
        etcd.stop()


def test_an_authenticated_member_leads_appends_and_watches(secured) -> None:  # type: ignore[no-untyped-def]
    prefix = fresh_prefix()
    base = settings(secured.endpoints, prefix)
    writer_machine, reader_machine = StateMachine(), StateMachine()
    writer = EtcdReplication(
        node_id="w", settings=replace(base, auth=("root", "pw-root")), apply=writer_machine
    )
    reader = EtcdReplication(
        node_id="r", settings=replace(base, auth=("root", "pw-root")), apply=reader_machine
    )
    writer.start()
    try:
        wait_for(writer.is_leader, "leadership with auth")
        reader.start()
        for n in range(3):
            writer.propose(b"%d" % n, timeout_s=WAIT_S)
        wait_for(lambda: len(reader_machine.applied) == 3, "the reader's watch delivers")
    finally:
        reader.stop()
        writer.stop()


def test_without_or_with_wrong_credentials_nothing_is_read(secured) -> None:  # type: ignore[no-untyped-def]
    anonymous = EtcdGateway(secured.endpoints, request_timeout_ms=1_000)
    with pytest.raises(EtcdUnavailable):
        anonymous.range(b"/any")
    wrong = EtcdGateway(secured.endpoints, auth=("root", "nope"), request_timeout_ms=1_000)
    with pytest.raises(EtcdUnavailable, match="authentication refused"):
        wrong.range(b"/any")
    anonymous.close()
    wrong.close()
