"""``appliance cluster init`` makes a TLS cluster by default: a cluster CA, a certificate and key
per voter and for the worker (keys 0600 from creation, in a 0700 directory), wired into every
config; ``--no-tls`` keeps plain loopback HTTP."""

from __future__ import annotations

import json
import os
import ssl
import stat
from pathlib import Path

from cryptography import x509

from appliance.config.runner import load_runner_config
from appliance.config.worker import load_worker_config
from appliance.http.tls import client_context, server_context, voter_name

from .conftest import cluster_init

VOTERS = ("voter-1", "voter-2", "voter-3")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_default_is_a_tls_cluster_with_private_keys_under_any_umask(tmp_path: Path) -> None:
    out = tmp_path / "c"
    previous = os.umask(0)
    try:
        assert cluster_init("--out", str(out)) == 0
    finally:
        os.umask(previous)
    tls = out / "tls"
    assert mode_of(tls) == 0o700
    names = {p.name for p in tls.iterdir()}
    expected = {"ca.pem", "ca.key"} | {
        f"{n}{s}" for n in (*VOTERS, "worker-1") for s in (".pem", ".key")
    }
    assert names == expected
    for name in names:
        assert mode_of(tls / name) == (0o600 if name.endswith(".key") else 0o644), name


def test_every_config_is_wired_to_its_own_certificate_and_https(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out)) == 0
    for node_id in VOTERS:
        cfg = load_runner_config(out / f"{node_id}.json")
        assert cfg.tls is not None
        assert cfg.tls.cert_file == str(out / "tls" / f"{node_id}.pem")
        assert cfg.tls.ca_file == str(out / "tls" / "ca.pem")
        assert cfg.remote.url.url.startswith("https://127.0.0.1:")
        # The files load as a server and a client context, and the certificate names the voter.
        server_context(cfg.tls, require_client_cert=True)
        client_context(cfg.tls, check_hostname=False)
        cert = x509.load_pem_x509_certificate(Path(cfg.tls.cert_file).read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert voter_name(node_id) in san.get_values_for_type(x509.DNSName)
    worker = load_worker_config({}, out / "worker.json")
    assert worker.tls is not None
    assert all(str(url).startswith("https://127.0.0.1:") for url in worker.admission_urls)


def test_each_certificate_chains_to_the_generated_ca(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out)) == 0
    ca = x509.load_pem_x509_certificate((out / "tls" / "ca.pem").read_bytes())
    for name in (*VOTERS, "worker-1"):
        cert = x509.load_pem_x509_certificate((out / "tls" / f"{name}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
    store = ssl.create_default_context(cafile=str(out / "tls" / "ca.pem"))
    assert store.get_ca_certs()[0]["subject"] == ((("commonName", "appliance cluster CA"),),)


def test_no_tls_keeps_plain_loopback(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out), "--no-tls") == 0
    assert not (out / "tls").exists()
    doc = json.loads((out / "voter-1.json").read_text())
    assert "tls" not in doc
    assert doc["remote"]["url"].startswith("http://")
    assert json.loads((out / "worker.json").read_text())["admission_urls"][0].startswith("http://")


def test_two_inits_never_share_a_key(tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert cluster_init("--out", str(tmp_path / name)) == 0
    assert (tmp_path / "a/tls/ca.key").read_bytes() != (tmp_path / "b/tls/ca.key").read_bytes()
    assert (tmp_path / "a/tls/voter-1.key").read_bytes() != (
        tmp_path / "b/tls/voter-1.key"
    ).read_bytes()
