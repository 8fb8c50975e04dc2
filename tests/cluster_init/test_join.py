"""``appliance cluster init --join DIR --node-id ID``: the config of a node that joins a running
cluster seals the same genesis contract, takes the next free slot of the port plan and, with TLS,
gets a certificate from the same CA naming its node id (issue 20)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography import x509

from appliance.cluster_init.joiner import plan_joiner
from appliance.cluster_init.layout import InvalidLayout
from appliance.config.contract import contract_digest
from appliance.config.runner import load_runner_config
from appliance.http.tls import member_of

from .conftest import cluster_init


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out), "--base-port", "7300") == 0
    return out


def test_a_joining_config_seals_the_genesis_contract_on_the_next_free_ports(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cluster_init("--join", str(cluster), "--node-id", "voter-4") == 0
    said = capsys.readouterr().out
    genesis = load_runner_config(cluster / "voter-1.json")
    joiner = load_runner_config(cluster / "voter-4.json")
    assert joiner.join is True and joiner.node_id == "voter-4"
    assert joiner.voters == genesis.voters  # every genesis voter, not itself
    assert contract_digest(joiner) == contract_digest(genesis)
    assert (joiner.cluster_port, joiner.admission_addr.port) == (7303, 7313)
    assert joiner.management is not None and joiner.management.addr.port == 7323
    assert joiner.data_dir == str(cluster / "data" / "voter-4")
    assert "admin add-voter voter-4 127.0.0.1:7303" in said
    assert "promote-voter voter-4 --wait-s 60" in said
    assert "https://127.0.0.1:7313" in said  # the worker's admission_urls advice
    # The next one takes the slot after it.
    assert cluster_init("--join", str(cluster), "--node-id", "voter-5") == 0
    assert load_runner_config(cluster / "voter-5.json").cluster_port == 7304


def test_with_tls_the_new_node_gets_a_certificate_of_the_same_ca(cluster: Path) -> None:
    assert cluster_init("--join", str(cluster), "--node-id", "voter-4") == 0
    tls = cluster / "tls"
    assert stat.S_IMODE((tls / "voter-4.key").stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((tls / "voter-4.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = names.get_values_for_type(x509.DNSName)
    assert member_of({"subjectAltName": tuple(("DNS", n) for n in dns)}) == "voter-4"
    doc = json.loads((cluster / "voter-4.json").read_text())
    assert doc["tls"]["cert_file"] == str(tls / "voter-4.pem")


def test_without_tls_no_certificate_is_written(tmp_path: Path) -> None:
    out = tmp_path / "plain"
    assert cluster_init("--out", str(out), "--no-tls") == 0
    assert cluster_init("--join", str(out), "--node-id", "n4", "--cluster-port", "7199") == 0
    cfg = load_runner_config(out / "n4.json")
    assert cfg.tls is None and cfg.cluster_port == 7199
    assert not (out / "tls").exists()


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--node-id", "voter-2"], "is a genesis voter"),
        (["--node-id", "bad id"], "--node-id must be"),
        (["--node-id", "voter-4", "--cluster-port", "7301"], "--cluster-port 7301 is already used"),
        (["--node-id", "voter-4", "--admission-port", "80"], "--admission-port must be within"),
    ],
)
def test_a_join_that_cannot_be_laid_out_is_refused_and_writes_nothing(
    cluster: Path, argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in cluster.rglob("*"))
    assert cluster_init("--join", str(cluster), *argv) == 2
    assert problem in capsys.readouterr().err
    assert sorted(p.name for p in cluster.rglob("*")) == before


def test_an_existing_joiner_config_is_never_overwritten(cluster: Path) -> None:
    assert cluster_init("--join", str(cluster), "--node-id", "voter-4") == 0
    with pytest.raises(InvalidLayout, match="never overwrites"):
        plan_joiner(cluster, "voter-4")


def test_join_and_out_are_exclusive_and_join_needs_a_node_id(cluster: Path) -> None:
    assert cluster_init("--join", str(cluster), "--out", str(cluster)) == 2
    assert cluster_init("--join", str(cluster)) == 2
