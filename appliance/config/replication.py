"""The runner config's optional ``replication`` object: which engine replicates the log.

Rule (unknown fields rejected at every level, every problem reported with its path):

- absent, or ``{"kind": "raft"}``: the built-in Raft over the fixed voters of SPEC §5;
- ``{"kind": "etcd", "endpoints": [...], "prefix": "...", "auth_env": "NAME",
  "lease_ttl_seconds": N}``: the log and the election live in etcd. ``endpoints`` are 1-16
  distinct ``http(s)://host:port`` URLs (no path, query or credentials); ``prefix`` is an absolute
  key path like ``/appliance/prod``; ``auth_env`` (optional) names an environment variable
  holding ``user:password`` for etcd authentication; ``lease_ttl_seconds`` is 2-60 (default 5).
  With etcd the runner's ``peers`` must be empty (``check_peers``).

``contract_entry`` is what the sealed contract records, so a store sealed for one backend refuses
the other. The etcd engine itself lives in appliance/replication/etcd*.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.config.addresses import bracket
from appliance.config.common import ENV_NAME
from appliance.config.urls import OriginError, parse_origin
from appliance.core.schema import (
    Choice,
    Custom,
    Field,
    Integer,
    ListOf,
    Obj,
    Problems,
    Text,
    join,
    show,
)

ENDPOINTS_MAX: Final = 16
ENDPOINT_BYTES_MAX: Final = 512
PREFIX_BYTES_MAX: Final = 128
LEASE_TTL_SECONDS_MIN: Final = 2
LEASE_TTL_SECONDS_MAX: Final = 60
LEASE_TTL_SECONDS_DEFAULT: Final = 5
PREFIX_PATTERN: Final = re.compile(r"(/[A-Za-z0-9_.-]+)+")


@dataclass(frozen=True)
class RaftBackend:
    kind: str = "raft"


@dataclass(frozen=True)
class EtcdBackend:
    endpoints: tuple[str, ...]
    prefix: str
    auth_env: str | None = None
    lease_ttl_seconds: int = LEASE_TTL_SECONDS_DEFAULT
    kind: str = "etcd"


RAFT: Final = RaftBackend()


def _endpoint(value: object, path: str, problems: Problems) -> Any:
    text = Text(ENDPOINT_BYTES_MAX, 1).check(value, path, problems)
    if not isinstance(text, str):
        return text
    try:
        origin = parse_origin(text, plain_http_anywhere=True)
    except OriginError as err:
        return problems.add(path, f"{err}, got {show(text)}")
    if text.endswith("/"):
        return problems.add(path, f"must be scheme://host:port only, got {show(text)}")
    return f"{origin.scheme}://{bracket(origin.host)}:{origin.port}"


_ETCD: Final = Obj(
    {
        "kind": Field(Choice({"etcd": "etcd"})),
        "endpoints": Field(
            ListOf(
                Custom(_endpoint), 1, ENDPOINTS_MAX, unique=lambda e: e, unique_says="a repeat of"
            )
        ),
        "prefix": Field(
            Text(PREFIX_BYTES_MAX, 2, PREFIX_PATTERN, "an absolute key path like /appliance/prod")
        ),
        "auth_env": Field(ENV_NAME, required=False),
        "lease_ttl_seconds": Field(
            Integer(LEASE_TTL_SECONDS_MIN, LEASE_TTL_SECONDS_MAX),
            required=False,
            default=LEASE_TTL_SECONDS_DEFAULT,
        ),
    },
    build=lambda **f: EtcdBackend(
        endpoints=f["endpoints"],
        prefix=f["prefix"],
        auth_env=f["auth_env"],
        lease_ttl_seconds=f["lease_ttl_seconds"],
    ),
)
_RAFT: Final = Obj({"kind": Field(Choice({"raft": "raft"}))}, build=lambda **_: RAFT)


def _replication(value: object, path: str, problems: Problems) -> Any:
    kind = value.get("kind") if isinstance(value, dict) else None
    if kind == "etcd":
        return _ETCD.check(value, path, problems)
    if kind == "raft":
        return _RAFT.check(value, path, problems)
    if not isinstance(value, dict):
        return problems.add(path, f"must be an object, got {show(value)}")
    return problems.add(join(path, "kind"), f'must be "raft" or "etcd", got {show(kind)}')


REPLICATION: Final = Custom(_replication)


def check_peers(values: Mapping[str, Any], path: str, problems: Problems) -> None:
    """CrossCheck(("replication", "peers")): etcd replaces the voters, so no peers."""
    if isinstance(values["replication"], EtcdBackend) and values["peers"]:
        problems.add(join(path, "peers"), 'must be empty when replication.kind is "etcd"')


def contract_entry(backend: RaftBackend | EtcdBackend) -> dict[str, Any]:
    """What the sealed contract records about the backend (per-node TTL is not sealed)."""
    if isinstance(backend, EtcdBackend):
        return {"kind": "etcd", "endpoints": list(backend.endpoints), "prefix": backend.prefix}
    return {"kind": "raft"}
