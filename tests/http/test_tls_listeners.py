"""TLS on a listener (stdlib ``ssl`` inside the waitress channel, or on a ``DirectServer``
connection's own thread) and mutual TLS between voters:
only a client with a certificate from the cluster CA naming a voter completes a request on the
cluster port; the bearer still applies on top; the Raft client accepts only the peer it dialled."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import ssl
import time
from pathlib import Path

import pytest

from appliance.cluster_init import pki
from appliance.config.credentials import Secret
from appliance.config.tls import TlsConfig
from appliance.http.app import create_app
from appliance.http.auth import BearerAuth
from appliance.http.client import AmbiguousSend, ClientError, ConnectFailed, HttpClient
from appliance.http.connections import ConnectionPolicy
from appliance.http.direct_server import DirectReply, DirectRequest, DirectServer
from appliance.http.limits import read_body
from appliance.http.peer_connection import PeerConnection
from appliance.http.server import HttpServer
from appliance.http.tls import (
    TLS_PEER_ID_ENV,
    TlsSetupError,
    client_context,
    listener_context,
    origin_client_context,
    server_context,
    voter_name,
    voter_of,
)

TOKEN = "cluster-token-1234567"
VOTERS = ("n1", "n2", "n3")


class Echo:
    def on_get(self, req, resp):
        resp.media = {"role": req.context.auth_role, "peer": req.env.get(TLS_PEER_ID_ENV)}

    def on_post(self, req, resp):
        resp.media = {"bytes": len(read_body(req))}


def _node(directory: Path, authority: pki.Issued, name: str, dns: list[str]) -> TlsConfig:
    issued = pki.issue(authority, name, dns_names=dns, ip_addresses=["127.0.0.1"])
    directory.mkdir(parents=True, exist_ok=True)
    ca = directory / "ca.pem"
    if not ca.exists():
        pki.write_public(ca, authority.cert_pem())
    pki.write_public(directory / f"{name}.pem", issued.cert_pem())
    pki.write_private(directory / f"{name}.key", issued.key_pem())
    return TlsConfig(str(ca), str(directory / f"{name}.pem"), str(directory / f"{name}.key"))


@pytest.fixture(scope="module")
def pki_dir(tmp_path_factory) -> dict[str, TlsConfig]:
    root = tmp_path_factory.mktemp("pki")
    cluster = pki.new_authority("test cluster CA")
    rogue = pki.new_authority("rogue CA")
    nodes = {
        node_id: _node(root / "cluster", cluster, node_id, ["localhost", voter_name(node_id)])
        for node_id in VOTERS
    }
    nodes["worker"] = _node(root / "cluster", cluster, "worker", ["localhost"])
    nodes["rogue-n2"] = _node(root / "rogue", rogue, "n2", ["localhost", voter_name("n2")])
    return nodes


def _direct_echo(request: DirectRequest) -> DirectReply:
    if request.method == "GET":
        document: dict[str, object] = {"role": request.role, "peer": request.peer_id}
    else:
        document = {"bytes": len(request.body)}
    return DirectReply(200, json.dumps(document).encode(), "application/json")


def _echo_app():
    return create_app(
        routes={"/echo": Echo()},
        credentials={"cluster": Secret(TOKEN)},
        accepted_roles={"cluster"},
        body_bytes_max=2 * 1024 * 1024,
        surface="cluster",
    )


def _cluster_server(tls: TlsConfig, kind: str = "waitress", **kwargs) -> HttpServer | DirectServer:
    """The cluster port's TLS rules on either listener: waitress (``HttpServer``) or the
    ``DirectServer`` a voter's cluster listener runs on."""
    context = server_context(tls, require_client_cert=True)
    peer_check = lambda cert: voter_of(cert, VOTERS) is not None  # noqa: E731
    if kind == "direct_app":  # a create_app surface on a DirectServer (admission, the worker)
        return DirectServer.for_app(
            _echo_app(),
            host="127.0.0.1",
            port=0,
            name="tls",
            body_bytes_max=2 * 1024 * 1024,
            ssl_context=context,
            peer_check=peer_check,
            **kwargs,
        )
    if kind == "direct":
        return DirectServer(
            {"/echo": {"GET": _direct_echo, "POST": _direct_echo}},
            gate=BearerAuth({"cluster": Secret(TOKEN)}, {"cluster"}),
            host="127.0.0.1",
            port=0,
            name="tls",
            body_bytes_max=2 * 1024 * 1024,
            ssl_context=context,
            peer_check=peer_check,
            **kwargs,
        )
    return HttpServer(
        _echo_app(),
        host="127.0.0.1",
        port=0,
        name="tls",
        body_bytes_max=2 * 1024 * 1024,
        ssl_context=context,
        peer_check=peer_check,
        **kwargs,
    )


KINDS = pytest.mark.parametrize("kind", ["waitress", "direct"])


def _get(context: ssl.SSLContext | None, port: int, bearer: str = TOKEN):
    scheme = "https" if context is not None else "http"
    with HttpClient(ssl_context=context, read_timeout_ms=3000, connect_timeout_ms=3000) as http:
        return http.get(f"{scheme}://127.0.0.1:{port}/echo", bearer=bearer, fresh_connection=True)


@KINDS
def test_a_voter_with_a_cluster_certificate_completes_a_request(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        response = _get(client_context(pki_dir["n2"], check_hostname=False), server.port)
        assert response.status == 200
        assert response.json() == {"role": "cluster", "peer": "n2"}


@pytest.mark.parametrize("kind", ["waitress", "direct", "direct_app"])
def test_each_request_carries_the_node_id_its_client_certificate_names(pki_dir, kind):
    """What the Raft routes hold a message's sender to (issue 36): waitress's environ
    (TLS_PEER_ID_ENV), a DirectServer handler's ``peer_id``, a WSGI app's environ behind a
    DirectServer. One connection per certificate; each request on it names that node."""
    with _cluster_server(pki_dir["n1"], kind) as server:
        for node_id in ("n3", "n2"):
            context = client_context(pki_dir[node_id], check_hostname=False)
            with HttpClient(ssl_context=context, read_timeout_ms=3000) as http:
                for _ in range(2):  # a kept-alive connection's second request too
                    answer = http.get(f"https://127.0.0.1:{server.port}/echo", bearer=TOKEN)
                    assert answer.json() == {"role": "cluster", "peer": node_id}
    # Without TLS no certificate names anyone.
    plain = (
        HttpServer(_echo_app(), host="127.0.0.1", port=0, name="p", body_bytes_max=4096)
        if kind == "waitress"
        else DirectServer.for_app(
            _echo_app(), host="127.0.0.1", port=0, name="p", body_bytes_max=4096
        )
        if kind == "direct_app"
        else DirectServer(
            {"/echo": {"GET": _direct_echo}},
            gate=BearerAuth({"cluster": Secret(TOKEN)}, {"cluster"}),
            host="127.0.0.1",
            port=0,
            name="p",
            body_bytes_max=4096,
        )
    )
    with plain:
        assert _get(None, plain.port).json() == {"role": "cluster", "peer": None}


@KINDS
def test_a_plaintext_client_cannot_complete_a_request_on_the_cluster_port(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        with pytest.raises(ClientError):
            _get(None, server.port)
        # Raw: an HTTP request where a ClientHello belongs is never answered in HTTP.
        with socket.create_connection(("127.0.0.1", server.port), timeout=3) as sock:
            sock.sendall(
                f"GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
            )
            sock.settimeout(3)
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                data = b""
            assert not data.startswith(b"HTTP/")


@pytest.mark.parametrize("who", ["rogue-n2", "worker", "none"])
@KINDS
def test_a_certificate_not_from_the_cluster_ca_or_naming_no_voter_is_refused(pki_dir, who, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        if who == "none":
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.load_verify_locations(pki_dir["n1"].ca_file)
        else:
            context = client_context(pki_dir[who], check_hostname=False)
            if who == "rogue-n2":  # trusts the real CA, presents the rogue certificate
                context.load_verify_locations(pki_dir["n1"].ca_file)
        with pytest.raises(ClientError):
            _get(context, server.port)


@KINDS
def test_the_bearer_still_applies_over_mutual_tls(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        response = _get(client_context(pki_dir["n2"], check_hostname=False), server.port, "wrong")
        assert response.status == 401


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")  # on purpose: old TLS
@KINDS
def test_tls_below_1_2_is_refused(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        context = client_context(pki_dir["n2"], check_hostname=False)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ClientError):
            _get(context, server.port)


@KINDS
def test_a_large_body_crosses_tls_whole(pki_dir, kind):
    body = bytes(range(256)) * 4096  # 1 MiB: many TLS records, some left pending in OpenSSL
    with _cluster_server(pki_dir["n1"], kind) as server:
        context = client_context(pki_dir["n2"], check_hostname=False)
        with HttpClient(ssl_context=context, read_timeout_ms=5000) as http:
            for _ in range(3):
                response = http.post(f"https://127.0.0.1:{server.port}/echo", body, bearer=TOKEN)
                assert response.status == 200
                assert response.json() == {"bytes": len(body)}


@KINDS
def test_a_stalled_handshake_is_closed_at_the_header_deadline(pki_dir, kind):
    server = _cluster_server(pki_dir["n1"], kind, policy=ConnectionPolicy(header_deadline_s=0.5))
    with server, socket.create_connection(("127.0.0.1", server.port), timeout=3) as sock:
        sock.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        started = time.monotonic()
        sock.settimeout(3)
        with contextlib.suppress(ConnectionResetError):  # closed with our bytes unread
            assert sock.recv(1) == b""
        assert time.monotonic() - started < 2.0
        assert server.connection_counts.header_deadline_closed == 1


@KINDS
def test_the_raft_client_accepts_only_the_peer_it_dialled(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        context = client_context(pki_dir["n2"], check_hostname=False)
        right = PeerConnection(
            "127.0.0.1",
            server.port,
            connect_timeout_ms=3000,
            read_timeout_ms=3000,
            response_bytes_max=4096,
            ssl_context=context,
            peer_identity="n1",
        )
        try:
            for _ in range(3):  # kept alive across requests (no session ticket looks stale)
                response = right.post("/echo", b"x" * 10, bearer=TOKEN)
                assert response.status == 200
            assert right.connections_opened == 1
        finally:
            right.close()
        wrong = PeerConnection(
            "127.0.0.1",
            server.port,
            connect_timeout_ms=3000,
            read_timeout_ms=3000,
            response_bytes_max=4096,
            ssl_context=context,
            peer_identity="n3",
        )
        with pytest.raises(ConnectFailed, match="TLS handshake failed"):
            wrong.post("/echo", b"x", bearer=TOKEN)


@KINDS
def test_the_raft_client_writes_without_blocking_over_tls(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        connection = PeerConnection(
            "127.0.0.1",
            server.port,
            connect_timeout_ms=3000,
            read_timeout_ms=3000,
            response_bytes_max=4096,
            ssl_context=client_context(pki_dir["n2"], check_hostname=False),
            peer_identity="n1",
        )
        try:
            assert connection.post("/echo", b"a", bearer=TOKEN).status == 200
            for size in (10, 100_000):
                assert connection.begin_nowait("/echo", b"b" * size, bearer=TOKEN)
                response = connection.finish()
                assert response.json() == {"bytes": size}
        finally:
            connection.close()


@KINDS
def test_a_tls_client_verifies_the_server_name(pki_dir, kind):
    with _cluster_server(pki_dir["n1"], kind) as server:
        context = client_context(pki_dir["n2"])  # check_hostname: 127.0.0.1 is in the cert
        assert _get(context, server.port).status == 200
        # The certificate names localhost and 127.0.0.1, not 127.0.0.2.
        with pytest.raises(ClientError), HttpClient(ssl_context=context) as http:
            http.get(f"https://127.0.0.2:{server.port}/echo", bearer=TOKEN)


def test_tls_files_that_do_not_load_are_named(tmp_path, pki_dir):
    missing = TlsConfig(str(tmp_path / "ca.pem"), pki_dir["n1"].cert_file, pki_dir["n1"].key_file)
    with pytest.raises(TlsSetupError, match=r"ca\.pem"):
        client_context(missing)
    mismatched = TlsConfig(pki_dir["n1"].ca_file, pki_dir["n1"].cert_file, pki_dir["n2"].key_file)
    with pytest.raises(TlsSetupError, match="do not load"):
        server_context(mismatched, require_client_cert=False)


def test_keys_are_written_owner_only(pki_dir):
    assert Path(pki_dir["n1"].key_file).stat().st_mode & 0o777 == 0o600


@KINDS
def test_an_ambiguous_send_is_possible_only_after_the_handshake(pki_dir, kind):
    """A refused client certificate under TLS 1.3 shows only after the client's handshake: the
    client cannot tell it from a dropped answer (documented in docs/security.md)."""
    with _cluster_server(pki_dir["n1"], kind) as server:
        context = client_context(pki_dir["worker"], check_hostname=False)
        with pytest.raises((ConnectFailed, AmbiguousSend)):
            _get(context, server.port)


def test_a_listener_requiring_client_certificates_admits_the_cluster_clients(pki_dir):
    """Admission and the worker's routes with client_cert_required: the runner's and the
    worker's clients (origin_client_context) present their certificates; others cannot."""
    tls = dataclasses.replace(pki_dir["worker"], client_cert_required=True)
    app = create_app(
        routes={"/echo": Echo()},
        credentials={"cluster": Secret(TOKEN)},
        accepted_roles={"cluster"},
        body_bytes_max=4096,
        surface="worker",
    )
    server = HttpServer(
        app,
        host="127.0.0.1",
        port=0,
        name="w",
        body_bytes_max=4096,
        ssl_context=listener_context(tls),
    )
    with server:
        assert _get(origin_client_context(pki_dir["n1"]), server.port).status == 200
        anonymous = ssl.create_default_context(cafile=pki_dir["n1"].ca_file)
        with pytest.raises(ClientError):
            _get(anonymous, server.port)
        # Without client_cert_required the same listener serves a client with no certificate.
        plain_tls = HttpServer(
            app,
            host="127.0.0.1",
            port=0,
            name="w2",
            body_bytes_max=4096,
            ssl_context=listener_context(pki_dir["worker"]),
        )
        with plain_tls:
            assert _get(anonymous, plain_tls.port).status == 200


@KINDS
def test_the_bearer_comes_before_the_body_over_tls_too(pki_dir, kind):
    """A wrong bearer with a declared 70,000-byte body that never comes: 401 within 100 ms."""
    with _cluster_server(pki_dir["n1"], kind) as server:
        context = client_context(pki_dir["n2"], check_hostname=False)
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        with context.wrap_socket(raw) as sock:
            sock.sendall(
                b"POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                b"Content-Length: 70000\r\n\r\n"
            )
            started = time.monotonic()
            sock.settimeout(2)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                assert chunk
                data += chunk
            assert time.monotonic() - started < 0.1
            assert data.startswith(b"HTTP/1.1 401 ")
