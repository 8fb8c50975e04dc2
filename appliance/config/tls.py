"""The per-node ``tls`` section of a runner or worker config (transport only: never sealed).

``{"ca_file", "cert_file", "key_file", "client_cert_required"}``: PEM files of the cluster CA,
this node's certificate (chain) and its private key. Like ``management`` it is outside the
contract digest, so a certificate can be rotated without new stores. What each listener and
client does with it is in docs/security.md: the cluster listener always requires a client
certificate from the CA (mutual TLS between voters); ``client_cert_required`` makes the admission
(runner) or scheduled-routes (worker) listener require one too. The files are read when the
process starts; a missing or unreadable file, or a key that does not match its certificate, is a
start-up error naming the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from appliance.core.schema import Custom, Field, Obj, Problems, Text, show

PATH: Final = Text(4096, 1, re.compile(r"[^\x00]+"), "a path without NUL bytes")


@dataclass(frozen=True)
class TlsConfig:
    ca_file: str
    cert_file: str
    key_file: str
    client_cert_required: bool = False


def boolean_rule(value: object, path: str, problems: Problems) -> object:
    if isinstance(value, bool):
        return value
    return problems.add(path, f"must be true or false, got {show(value)}")


TLS_RULE: Final = Obj(
    fields={
        "ca_file": Field(PATH, doc="PEM: the cluster CA every peer's certificate must chain to"),
        "cert_file": Field(PATH, doc="PEM: this node's certificate (and chain)"),
        "key_file": Field(PATH, doc="PEM: this node's private key (keep it 0600)"),
        "client_cert_required": Field(Custom(boolean_rule), required=False, default=False),
    },
    build=TlsConfig,
)
