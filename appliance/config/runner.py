"""The runner (voter) configuration: exactly the fields of SPEC §6, plus per-node ``raft`` timings.

Theory of operation: one rule table (``RUNNER_RULE``) states every field once;
``parse_runner_config`` walks it and reports every problem with its JSON path
(``InvalidConfig.problems``). Fields that fail open if defaulted are required: ``peers`` in
particular has no default, because a voter that forgot its peers would elect itself and split
the cluster. Credentials are only *named* here (environment variable names);
``appliance.config.credentials`` resolves them, so a config can be checked offline without any
secret.

Cross-field rules: peers have distinct ids, none equal to ``node_id``, and distinct addresses,
none equal to this node's own ``advertise_addr:cluster_port``; with ``join: true`` (a node added to
a running cluster, issue 20) ``peers`` lists every *genesis* voter (up to ``PEERS_MAX + 1``), this
node is not one of them, and the backend is the built-in Raft; initial ``schedules`` are checked
against the configured ``limits`` (their count and every ``CatchUp`` cap); ``raft`` timings keep
``heartbeat_ms < election_timeout_min_ms <= election_timeout_max_ms``.

``raft`` is a documented extension: per-node transport tuning, not part of the sealed contract.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from appliance.config.addresses import (
    AddressError,
    HostPort,
    host_rule,
    is_unspecified_host,
    listen_addr_rule,
    loopback_addr_rule,
    parse_host_port,
)
from appliance.config.common import (
    DATA_DIR,
    ENV_NAME,
    HEAP_MB_MAX,
    HEAP_MB_MIN,
    IDENT,
    TIMEOUT_SECONDS_MAX,
    read_json_file,
)
from appliance.config.replication import (
    RAFT,
    REPLICATION,
    EtcdBackend,
    RaftBackend,
    check_peers,
)
from appliance.config.rfc3339 import rfc3339_rule
from appliance.config.tls import TLS_RULE, TlsConfig, boolean_rule
from appliance.config.urls import Origin, origin_rule
from appliance.core.definition import Definition, definition_rule
from appliance.core.errors import InvalidConfig
from appliance.core.limits import LIMITS_RULE, SCHEDULES_MAX, Limits
from appliance.core.placement import Labels, labels_rule
from appliance.core.schema import (
    INVALID,
    CrossCheck,
    Custom,
    Field,
    Integer,
    ListOf,
    Obj,
    Problems,
    Text,
    check_not_above,
    index,
    join,
    show,
    validate,
)

CONFIG_FILE_BYTES_MAX: Final = 128 * 1024 * 1024  # 1,024 definitions of 64 KiB, escaped, fit
PEERS_MAX: Final = 8  # at most 9 genesis voters: Raft gains nothing from more
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
SESSION_PATTERN: Final = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces: a log tag
SESSION_BYTES_MAX: Final = 128
WORKERS_MAX: Final = 64  # remote.workers: the fleet's size limit (issue 33)


@dataclass(frozen=True)
class Peer:
    node_id: str
    addr: HostPort

    def __str__(self) -> str:
        return f"{self.node_id}@{self.addr}"


@dataclass(frozen=True)
class WorkerSpec:
    """One worker of the fleet (issue 33): its identity, origin, labels and credentials' names."""

    worker_id: str
    url: Origin
    labels: Labels = ()  # sorted (name, value) pairs (appliance/core/placement.py)
    bearer_env: str | None = None  # None: remote.bearer_env
    admission_bearer_env: str | None = None  # None: the runner's admission_bearer_env


@dataclass(frozen=True)
class RemoteConfig:
    """The workers and their execution authority (sealed: identical on every voter).

    Exactly one of ``url`` + ``worker_id`` (one worker, as before the fleet) or ``workers`` (a
    fleet of 1-64) is given; :attr:`fleet` is the worker list either way."""

    url: Origin | None
    bearer_env: str
    expires_at: datetime  # aware, UTC
    session: str
    timeout_seconds: int
    heap_mb: int
    namespace: str
    worker_id: str | None
    workers: tuple[WorkerSpec, ...] = ()

    @property
    def fleet(self) -> tuple[WorkerSpec, ...]:
        """Every worker, in configuration order (one for the ``url`` + ``worker_id`` form)."""
        if self.workers:
            return self.workers
        if self.url is None or self.worker_id is None:
            raise ValueError("remote: neither url + worker_id nor workers")
        return (WorkerSpec(self.worker_id, self.url),)

    def worker(self, worker_id: str) -> WorkerSpec | None:
        return next((w for w in self.fleet if w.worker_id == worker_id), None)


@dataclass(frozen=True)
class ManagementConfig:
    """The optional loopback operator listener (per node, not sealed)."""

    addr: HostPort
    bearer_env: str
    recovery_bearer_env: str | None = None
    # Extension (issue 20): the credential of the contract amendments (renew_grant, amend_remote,
    # amend_limits). Optional; without it nobody can amend through this listener.
    admin_bearer_env: str | None = None
    tls: bool = False  # serve it over TLS with this voter's `tls` certificate


@dataclass(frozen=True)
class ConsoleConfig:
    """Extension (issue 34): the optional loopback web console (per node, not sealed).

    Its own listener and credential (never management's: seeds/001 keeps "no browser flow"
    there); ``actions`` opts into the write buttons (run now, enable/disable, pause/resume,
    cancel); ``tls`` serves it with this voter's certificate and marks the cookie ``Secure``.
    """

    addr: HostPort
    bearer_env: str
    tls: bool = False
    actions: bool = False


# Log compaction defaults (docs/raft.md, "Snapshots and log compaction"): etcd's 10,000 applied
# entries per snapshot and 5,000 kept for slow followers; a byte trigger for large entries.
SNAPSHOT_ENTRIES_DEFAULT: Final = 10_000
TRAILING_ENTRIES_DEFAULT: Final = 5_000
SNAPSHOT_BYTES_DEFAULT: Final = 64 * 1024 * 1024


@dataclass(frozen=True)
class RaftTimings:
    """Extension: per-node Raft timer and compaction settings (not sealed; voters may differ)."""

    heartbeat_ms: int = 100
    election_timeout_min_ms: int = 1000
    election_timeout_max_ms: int = 2000
    snapshot_entries: int = SNAPSHOT_ENTRIES_DEFAULT
    trailing_entries: int = TRAILING_ENTRIES_DEFAULT
    snapshot_bytes: int = SNAPSHOT_BYTES_DEFAULT


@dataclass(frozen=True)
class RunnerConfig:
    node_id: str
    advertise_addr: str
    cluster_port: int
    peers: tuple[Peer, ...]
    data_dir: str
    admission_addr: HostPort
    admission_bearer_env: str
    cluster_bearer_env: str
    remote: RemoteConfig
    limits: Limits = field(default_factory=Limits)
    schedules: tuple[Definition, ...] = ()
    management: ManagementConfig | None = None
    console: ConsoleConfig | None = None  # extension (issue 34), per node, not sealed
    raft: RaftTimings = field(default_factory=RaftTimings)
    replication: RaftBackend | EtcdBackend = RAFT
    tls: TlsConfig | None = None  # per node, not sealed (appliance/config/tls.py)
    # Extension (issue 20): this node joins a running cluster. It is not a genesis voter:
    # ``peers`` lists every genesis voter, so ``voters`` (the sealed mapping) is the genesis one
    # and the store seals the same digest. It starts as a learner with an empty store; the
    # leader adds it with ``add_voter`` (id, advertise_addr:cluster_port). Per node, not sealed.
    join: bool = False

    @property
    def own_addr(self) -> HostPort:
        return HostPort(self.advertise_addr, self.cluster_port)

    @property
    def voters(self) -> dict[str, HostPort]:
        """The genesis voters, id → cluster address: this node and its peers, or, for a node
        that joins, its peers only. After a membership change this is history, not the
        configuration in force (that lives in the Raft log: ``status`` shows it)."""
        mapping = {peer.node_id: peer.addr for peer in self.peers}
        if not self.join:
            mapping[self.node_id] = self.own_addr
        return dict(sorted(mapping.items()))


# ---- rules -------------------------------------------------------------------------------------

NODE_ID: Final = Text(64, 1, NAME_PATTERN, "1 to 64 characters of A-Z a-z 0-9 _ -")


def _peer(value: object, path: str, problems: Problems) -> Any:
    if not isinstance(value, str):
        return problems.add(path, f'must be a string "id@host:port", got {show(value)}')
    node_id, at, addr_text = value.partition("@")
    if not at:
        return problems.add(path, f'must be "id@host:port", got {show(value)}')
    if not NAME_PATTERN.fullmatch(node_id):
        return problems.add(
            path, f"id must be 1 to 64 characters of A-Z a-z 0-9 _ -, got {show(node_id)}"
        )
    try:
        addr = parse_host_port(addr_text)
    except AddressError as err:
        return problems.add(path, str(err))
    if is_unspecified_host(addr.host):
        return problems.add(path, f"must name an address others can reach, got {show(value)}")
    return Peer(node_id, addr)


def _check_peers(values: Any, path: str, problems: Problems) -> None:
    peers_path = join(path, "peers")
    own = HostPort(values["advertise_addr"], values["cluster_port"])
    seen_ids: dict[str, int] = {}
    seen_addrs: dict[HostPort, int] = {}
    for i, peer in enumerate(values["peers"]):
        here = index(peers_path, i)
        if peer.node_id == values["node_id"]:
            problems.add(
                here, f"must not name this node ({values['node_id']}); list only the others"
            )
        elif peer.node_id in seen_ids:
            problems.add(here, f"repeats the id {peer.node_id} of item {seen_ids[peer.node_id]}")
        if peer.addr == own:
            problems.add(here, f"has this node's own address {own} (advertise_addr:cluster_port)")
        elif peer.addr in seen_addrs:
            problems.add(here, f"repeats the address {peer.addr} of item {seen_addrs[peer.addr]}")
        seen_ids.setdefault(peer.node_id, i)
        seen_addrs.setdefault(peer.addr, i)


def _check_join(values: Any, path: str, problems: Problems) -> None:
    """A joining node names every genesis voter and uses the built-in Raft; a genesis voter
    has at most ``PEERS_MAX`` peers (the peers list may hold one more for a joiner)."""
    peers_path = join(path, "peers")
    if not values["join"]:
        if len(values["peers"]) > PEERS_MAX:
            problems.add(
                peers_path,
                f"must hold from 0 to {PEERS_MAX} items (a joining node may list "
                f"{PEERS_MAX + 1}), got {len(values['peers'])}",
            )
        return
    if isinstance(values["replication"], EtcdBackend):
        problems.add(
            join(path, "join"),
            "is for the built-in Raft only: on the etcd backend membership is etcd's business",
        )
    elif not values["peers"]:
        problems.add(peers_path, "must list every genesis voter of the cluster this node joins")


def _worker_rule() -> Obj:
    return Obj(
        fields={
            "worker_id": Field(IDENT, doc="the identity claims bind; the worker's own worker_id"),
            "url": Field(Custom(origin_rule), doc="this worker's origin (same rules as url)"),
            "labels": Field(
                Custom(labels_rule), required=False, default=(), doc="placement labels"
            ),
            "bearer_env": Field(
                ENV_NAME, required=False, default=None, doc="default: remote.bearer_env"
            ),
            "admission_bearer_env": Field(
                ENV_NAME,
                required=False,
                default=None,
                doc="default: the runner's admission_bearer_env",
            ),
        },
        build=WorkerSpec,
    )


def _check_remote_form(values: Any, path: str, problems: Problems) -> None:
    """Exactly one of ``url`` + ``worker_id`` or ``workers``; the fleet's URLs are distinct."""
    single = values["url"] is not None or values["worker_id"] is not None
    if values["workers"]:
        if single:
            given = "url" if values["url"] is not None else "worker_id"
            problems.add(
                join(path, given),
                "give either url and worker_id (one worker) or workers (a fleet), not both",
            )
        seen: dict[Origin, int] = {}
        for i, worker in enumerate(values["workers"]):
            if worker.url in seen:
                problems.add(
                    join(index(join(path, "workers"), i), "url"),
                    f"repeats the url {worker.url} of item {seen[worker.url]}",
                )
            seen.setdefault(worker.url, i)
        return
    for name in ("url", "worker_id"):
        if values[name] is None:
            # Worded as for any required field (url and worker_id, or workers: docs).
            problems.add(join(path, name), "is required")


def _remote_rule() -> Obj:
    return Obj(
        fields={
            "url": Field(
                Custom(origin_rule), required=False, default=None, doc="worker origin (one worker)"
            ),
            "bearer_env": Field(ENV_NAME, doc="names the variable holding the worker credential"),
            "expires_at": Field(Custom(rfc3339_rule), doc="grant expiry, RFC 3339 with offset"),
            "session": Field(
                Text(SESSION_BYTES_MAX, 1, SESSION_PATTERN, "printable ASCII without spaces")
            ),
            "timeout_seconds": Field(Integer(1, TIMEOUT_SECONDS_MAX)),
            "heap_mb": Field(Integer(HEAP_MB_MIN, HEAP_MB_MAX)),
            "namespace": Field(IDENT),
            "worker_id": Field(IDENT, required=False, default=None, doc="with url: one worker"),
            "workers": Field(
                ListOf(
                    _worker_rule(),
                    min_items=1,
                    max_items=WORKERS_MAX,
                    unique=lambda w: w.worker_id,
                    unique_says="a repeat of the worker_id of",
                ),
                required=False,
                default=(),
                doc=f"a fleet of 1 to {WORKERS_MAX} workers (instead of url and worker_id)",
            ),
        },
        build=RemoteConfig,
        checks=(CrossCheck(("url", "worker_id", "workers"), _check_remote_form),),
    )


def _management_rule() -> Obj:
    return Obj(
        fields={
            "addr": Field(Custom(loopback_addr_rule), doc="loopback host:port"),
            "bearer_env": Field(ENV_NAME),
            "recovery_bearer_env": Field(ENV_NAME, required=False, default=None),
            "admin_bearer_env": Field(ENV_NAME, required=False, default=None),
            "tls": Field(Custom(boolean_rule), required=False, default=False),
        },
        build=ManagementConfig,
    )


def _console_rule() -> Obj:
    return Obj(
        fields={
            "addr": Field(Custom(loopback_addr_rule), doc="loopback host:port"),
            "bearer_env": Field(ENV_NAME, doc="names the dashboard credential variable"),
            "tls": Field(Custom(boolean_rule), required=False, default=False),
            "actions": Field(Custom(boolean_rule), required=False, default=False),
        },
        build=ConsoleConfig,
    )


def _check_listener_tls(values: Any, path: str, problems: Problems) -> None:
    """``management.tls`` and ``console.tls`` serve this voter's certificate: it must exist."""
    for name in ("management", "console"):
        section = values[name]
        if section is not None and section.tls and values["tls"] is None:
            problems.add(
                join(join(path, name), "tls"),
                "needs a tls section (the listener serves this voter's certificate)",
            )


def _check_console_addr(values: Any, path: str, problems: Problems) -> None:
    """The console and management listeners cannot share an address."""
    console, management = values["console"], values["management"]
    if console is not None and management is not None and console.addr == management.addr:
        problems.add(
            join(join(path, "console"), "addr"),
            f"must differ from management.addr ({management.addr}): the console is its own "
            "listener",
        )


def _check_raft(values: Any, path: str, problems: Problems) -> None:
    if values["heartbeat_ms"] >= values["election_timeout_min_ms"]:
        problems.add(
            join(path, "heartbeat_ms"),
            f"must be less than election_timeout_min_ms ({values['election_timeout_min_ms']}), "
            f"got {values['heartbeat_ms']}",
        )
    check_not_above(values, path, problems, "election_timeout_min_ms", "election_timeout_max_ms")


RAFT_RULE: Final = Obj(
    fields={
        "heartbeat_ms": Field(Integer(10, 5_000), required=False, default=100),
        "election_timeout_min_ms": Field(Integer(50, 60_000), required=False, default=1000),
        "election_timeout_max_ms": Field(Integer(50, 60_000), required=False, default=2000),
        "snapshot_entries": Field(
            Integer(1, 10_000_000), required=False, default=SNAPSHOT_ENTRIES_DEFAULT
        ),
        "trailing_entries": Field(
            Integer(0, 10_000_000), required=False, default=TRAILING_ENTRIES_DEFAULT
        ),
        "snapshot_bytes": Field(
            Integer(1024 * 1024, 1024**4), required=False, default=SNAPSHOT_BYTES_DEFAULT
        ),
    },
    build=RaftTimings,
    checks=(
        CrossCheck(
            ("heartbeat_ms", "election_timeout_min_ms", "election_timeout_max_ms"), _check_raft
        ),
    ),
)

# When the limits themselves are invalid their problems are already reported; check schedules
# against the widest limits so only the schedules' own problems are added.
_WIDEST_LIMITS: Final = Limits(SCHEDULES_MAX, 65536, 65536, 65536, 59)


def _schedules_rule(parsed: Any) -> ListOf:
    limits = parsed["limits"] if isinstance(parsed["limits"], Limits) else _WIDEST_LIMITS
    return ListOf(
        definition_rule(limits), max_items=limits.schedules, bound_note="(limits.schedules)"
    )


RUNNER_RULE: Final = Obj(
    fields={
        "node_id": Field(NODE_ID, doc="stable unique voter id"),
        "advertise_addr": Field(Custom(host_rule), doc="host others dial for Raft"),
        "cluster_port": Field(Integer(1, 65535)),
        "peers": Field(
            ListOf(Custom(_peer), max_items=PEERS_MAX + 1), doc="other voters, id@host:port"
        ),
        "data_dir": Field(DATA_DIR),
        "admission_addr": Field(Custom(listen_addr_rule), doc="admission listener host:port"),
        "admission_bearer_env": Field(ENV_NAME),
        "cluster_bearer_env": Field(ENV_NAME),
        "limits": Field(LIMITS_RULE, required=False, default=Limits()),
        "schedules": Field(_schedules_rule, required=False, default=()),
        "remote": Field(_remote_rule()),
        "management": Field(_management_rule(), required=False, default=None),
        "console": Field(_console_rule(), required=False, default=None),
        "raft": Field(RAFT_RULE, required=False, default=RaftTimings()),
        "replication": Field(REPLICATION, required=False, default=RAFT),
        "tls": Field(TLS_RULE, required=False, default=None),
        "join": Field(Custom(boolean_rule), required=False, default=False),
    },
    build=RunnerConfig,
    checks=(
        CrossCheck(("node_id", "advertise_addr", "cluster_port", "peers"), _check_peers),
        CrossCheck(("join", "peers", "replication"), _check_join),
        CrossCheck(("replication", "peers"), check_peers),
        CrossCheck(("management", "console", "tls"), _check_listener_tls),
        CrossCheck(("management", "console"), _check_console_addr),
    ),
)


def parse_runner_config(obj: object) -> RunnerConfig:
    """Validate a decoded runner config; raise InvalidConfig listing every problem."""
    parsed, problems = validate(RUNNER_RULE, obj)
    if parsed is INVALID:
        raise InvalidConfig(problems)
    return parsed


def load_runner_config(path: str | Path) -> RunnerConfig:
    """Read, decode (strictly: duplicate keys refused) and validate a runner config file."""
    return parse_runner_config(read_json_file(path, CONFIG_FILE_BYTES_MAX, regular_only=True))
