"""``management.tls``: the loopback operator listener served over TLS with the voter's
certificate, and ``appliance admin --addr https://… --cacert CA`` talking to it."""

from __future__ import annotations

import json

import pytest

from appliance.cluster_init import pki
from appliance.config.addresses import HostPort
from appliance.config.runner import parse_runner_config
from appliance.config.tls import TlsConfig
from appliance.core.errors import InvalidConfig
from appliance.core.limits import Limits
from appliance.http.tls import plain_listener_context
from appliance.management import (
    BoundedCommandQueue,
    ManagementListener,
    ThreadedConsumer,
)
from tests.management.conftest import TOKENS, Live
from tests.management.fake_runner import FakeRunner
from tests.management.test_admin_ops import run, tokens  # noqa: F401 - the fixture
from tests.replication.test_raft_member import runner_doc


@pytest.fixture
def tls_live(tmp_path):
    authority = pki.new_authority("test CA")
    issued = pki.issue(authority, "v1", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    pki.write_public(tmp_path / "ca.pem", authority.cert_pem())
    pki.write_public(tmp_path / "v1.pem", issued.cert_pem())
    pki.write_private(tmp_path / "v1.key", issued.key_pem())
    tls = TlsConfig(str(tmp_path / "ca.pem"), str(tmp_path / "v1.pem"), str(tmp_path / "v1.key"))
    runner = FakeRunner()
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner.handle).start()
    listener = ManagementListener(
        HostPort("127.0.0.1", 0),
        gateway,
        TOKENS,
        Limits(),
        threads=2,
        ssl_context=plain_listener_context(tls),
    ).start()
    yield Live(runner, gateway, consumer, listener), str(tmp_path / "ca.pem")
    listener.stop()
    consumer.stop()


def test_admin_speaks_https_to_a_tls_management_listener(tls_live, tokens):  # noqa: F811
    live, ca = tls_live
    addr = f"https://127.0.0.1:{live.listener.port}"
    code, out, err = run(live, ["status", "--addr", addr, "--cacert", ca, "--json"])
    assert code == 0, err
    assert json.loads(out)["result"]["ownership"] == {"node": "n1", "epoch": 2}


def test_plain_http_or_an_unknown_ca_gets_nothing_from_it(tls_live, tokens, tmp_path):  # noqa: F811
    live, _ca = tls_live
    code, _out, err = run(live, ["status", "--addr", f"127.0.0.1:{live.listener.port}"])
    assert code == 1
    assert "may have been received" in err or "cannot reach" in err
    other = pki.new_authority("other CA")
    pki.write_public(tmp_path / "other.pem", other.cert_pem())
    addr = f"https://127.0.0.1:{live.listener.port}"
    code, _out, err = run(live, ["status", "--addr", addr, "--cacert", str(tmp_path / "other.pem")])
    assert code == 1 and "nothing was sent" in err


def test_management_tls_needs_a_tls_section(tmp_path):
    doc = runner_doc("n1", {"n1": 7001, "n2": 7002, "n3": 7003}, tmp_path)
    doc["management"] = {"addr": "127.0.0.1:4601", "bearer_env": "OPERATOR_TOKEN", "tls": True}
    with pytest.raises(InvalidConfig) as refused:
        parse_runner_config(doc)
    assert "management.tls" in str(refused.value.problems)
    doc["tls"] = {"ca_file": "/ca.pem", "cert_file": "/c.pem", "key_file": "/k.pem"}
    assert parse_runner_config(doc).management.tls is True
