"""TLS contexts for listeners and clients, from a node's ``tls`` config (stdlib ``ssl`` only).

Theory of operation. Every context is TLS 1.2 or newer with the ``ssl`` module's default
ciphers. A *server* context presents the node's certificate and, when asked to, requires a
client certificate that chains to the configured CA. A *client* context verifies the server
against that CA (never the system store: the CA of a cluster is its own) and presents the node's
certificate when the server asks for one.

Voter identity. A voter's certificate names its node id as a DNS subjectAltName of the form
``<node_id>.voter.appliance`` (``voter_name``); node ids are ``A-Za-z0-9_-`` and the name is
compared exactly by our code, never by hostname rules. The cluster listener's handshake admits a
client certificate from the cluster CA that names exactly one node id (a genesis voter or a member
added at run time: the membership lives in the Raft log), and hands that id to the request
(``TLS_PEER_ID_ENV``); the Raft routes then refuse a message whose sender is another node, and a
sender that is not a member of the configuration in force (appliance/raft/sender_rule.py). The
Raft client accepts only the certificate of the peer it dialled.
Loading failures (missing file, wrong password-less key, key not matching the certificate) are
``TlsSetupError`` naming the file.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable
from typing import Any, Protocol


class TlsConfig(Protocol):
    """What this layer reads of a node's ``tls`` section (appliance/config/tls.py builds it; the
    http layer does not import config, so it names only the fields it uses)."""

    @property
    def ca_file(self) -> str: ...

    @property
    def cert_file(self) -> str: ...

    @property
    def key_file(self) -> str: ...

    @property
    def client_cert_required(self) -> bool: ...


VOTER_NAME_SUFFIX = ".voter.appliance"
# The WSGI environment key carrying the node id a request's TLS client certificate names.
TLS_PEER_ID_ENV = "appliance.tls_peer_id"


class TlsSetupError(ValueError):
    """A TLS file could not be loaded (the message names the file and the problem)."""


class PeerIdentityError(ssl.SSLError):
    """The peer's certificate chains to the CA but does not name the expected identity."""


def voter_name(node_id: str) -> str:
    return f"{node_id}{VOTER_NAME_SUFFIX}"


def _load_chain(context: ssl.SSLContext, tls: TlsConfig) -> None:
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except FileNotFoundError as exc:
        raise TlsSetupError(f"tls: cannot read {exc.filename}: no such file") from None
    except ssl.SSLError as exc:
        raise TlsSetupError(
            f"tls: cert_file {tls.cert_file} and key_file {tls.key_file} do not load as a "
            f"certificate and its private key ({exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise TlsSetupError(f"tls: cannot read {exc.filename}: {exc.strerror}") from None


def _load_ca(context: ssl.SSLContext, tls: TlsConfig) -> None:
    try:
        context.load_verify_locations(cafile=tls.ca_file)
    except FileNotFoundError:
        raise TlsSetupError(f"tls: cannot read ca_file {tls.ca_file}: no such file") from None
    except ssl.SSLError as exc:
        raise TlsSetupError(
            f"tls: ca_file {tls.ca_file} holds no usable CA certificate ({exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise TlsSetupError(f"tls: cannot read ca_file {tls.ca_file}: {exc.strerror}") from None


def server_context(tls: TlsConfig, *, require_client_cert: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # No TLS 1.3 session tickets: our clients never resume, and a ticket arriving after the
    # handshake would make an idle kept-alive connection look as if the server had written.
    context.num_tickets = 0
    _load_chain(context, tls)
    if require_client_cert:
        _load_ca(context, tls)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(tls: TlsConfig, *, check_hostname: bool = True) -> ssl.SSLContext:
    """Verifies the server against ``tls.ca_file``; presents ``tls.cert_file`` when asked.

    ``check_hostname=False`` only for voters, whose identity ``check_voter`` checks instead."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    _load_ca(context, tls)
    _load_chain(context, tls)
    return context


def dns_names(cert: dict[str, Any] | None) -> set[str]:
    """The DNS subjectAltNames of a verified peer certificate (``getpeercert()``)."""
    if not cert:
        return set()
    return {value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"}


def voter_of(cert: dict[str, Any] | None, voters: Iterable[str]) -> str | None:
    """The voter this certificate names, if it names exactly one of ``voters``."""
    names = dns_names(cert)
    matches = [node_id for node_id in voters if voter_name(node_id) in names]
    return matches[0] if len(matches) == 1 else None


_NODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the node id rule (config, Raft wire)


def member_of(cert: dict[str, Any] | None) -> str | None:
    """The node id this certificate names (``<id>.voter.appliance``), if it names exactly one."""
    ids = [
        name.removesuffix(VOTER_NAME_SUFFIX)
        for name in dns_names(cert)
        if name.endswith(VOTER_NAME_SUFFIX)
    ]
    valid = [node_id for node_id in ids if _NODE_ID.fullmatch(node_id)]
    return valid[0] if len(ids) == 1 and len(valid) == 1 else None


def check_voter(sock: ssl.SSLSocket, node_id: str) -> None:
    """Raise ``PeerIdentityError`` unless the (verified) peer certificate names ``node_id``."""
    if voter_name(node_id) not in dns_names(sock.getpeercert()):
        raise PeerIdentityError(
            f"the peer's certificate is from the cluster CA but does not name voter {node_id}"
        )


# --- what each process builds from its ``tls`` section (None: plain HTTP, as before) --------


def cluster_listener_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """The cluster port: always mutual TLS with the cluster CA."""
    return None if tls is None else server_context(tls, require_client_cert=True)


def cluster_peer_check(voters: Iterable[str] | None = None) -> Any:
    """The cluster port admits a client certificate (already verified against the cluster CA)
    only if it names one node id: of ``voters`` when given, else any (members come and go by
    membership change; the CA issues these names only to nodes of this cluster)."""
    if voters is None:
        return lambda cert: member_of(cert) is not None
    known = tuple(voters)
    return lambda cert: voter_of(cert, known) is not None


def cluster_client_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """Raft to peers: the CA, our certificate, and the peer's identity checked by name."""
    return None if tls is None else client_context(tls, check_hostname=False)


def listener_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """Admission, the worker's routes: TLS; a client certificate if ``client_cert_required``."""
    return (
        None if tls is None else server_context(tls, require_client_cert=tls.client_cert_required)
    )


def plain_listener_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """Metrics: TLS, never a client certificate (a scraper presents only the bearer)."""
    return None if tls is None else server_context(tls, require_client_cert=False)


def origin_client_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """Runner → worker, worker → admission: the server verified against the CA, by hostname;
    None keeps the client's default (system CAs for https)."""
    return None if tls is None else client_context(tls)
