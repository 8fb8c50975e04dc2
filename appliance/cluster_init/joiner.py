"""``appliance cluster init --join DIR --node-id ID``: the config of a node joining DIR's cluster.

Theory of operation (issue 20, docs/cluster.md "Changing the voters"): the new node seals the
*genesis* contract of the running cluster, so its config is a copy of a genesis voter's config
(every sealed field unchanged) with its own per-node fields: ``node_id``, ``join: true``,
``peers`` = every genesis voter (``cfg.voters`` of the template), its own ``data_dir``, cluster,
admission and management ports. Ports default to the first free slot of the cluster's port plan
(``layout.plan_ports``: base + i, base + 10 + i, base + 20 + i) that no config in DIR uses. With
TLS (the template has a ``tls`` section) the node gets a certificate from the same CA
(``tls/ca.pem``, ``tls/ca.key``) naming ``<id>.voter.appliance``, which the cluster listeners
accept from any node id the CA named. The document is validated and its contract digest compared
with the template's before anything is written; nothing is ever overwritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from appliance.cluster_init import pki
from appliance.cluster_init.layout import CA_CERT_FILE, CA_KEY_FILE, InvalidLayout
from appliance.config.common import read_json_file
from appliance.config.contract import contract_digest
from appliance.config.loopback import LOOPBACK
from appliance.config.runner import (
    CONFIG_FILE_BYTES_MAX,
    NAME_PATTERN,
    RunnerConfig,
    parse_runner_config,
)
from appliance.core.errors import InvalidConfig
from appliance.http.tls import voter_name

SLOTS: Final = 10  # the port plan reserves ten of each kind


@dataclass(frozen=True)
class JoinerFiles:
    node_id: str
    config_name: str  # "voter-4.json"
    config: dict[str, Any]
    cluster_addr: str  # what add_voter is given
    management_addrs: tuple[str, ...]  # every voter's and the new node's, for --addr
    tls_files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # under the tls dir
    tls_dir: Path | None = None
    # The cluster's configs name the admin credential (add-voter and promote-voter need it).
    admin_credential: bool = True


def _runner_configs(cluster_dir: Path) -> list[tuple[Path, dict[str, Any], RunnerConfig]]:
    found = []
    for path in sorted(cluster_dir.glob("*.json")):
        try:
            document = read_json_file(path, CONFIG_FILE_BYTES_MAX)
            cfg = parse_runner_config(document)
        except InvalidConfig:
            continue  # the worker's config, or not a runner config
        found.append((path, document, cfg))
    if not found:
        raise InvalidLayout(f"--join: {cluster_dir} holds no runner config (voter-N.json)")
    return found


def _port(value: int | None, default: int, used: set[int], flag: str) -> int:
    port = default if value is None else value
    if not 1024 <= port <= 65535:
        raise InvalidLayout(f"{flag} must be within 1024..65535, got {port}")
    if port in used:
        raise InvalidLayout(f"{flag} {port} is already used by a config in the cluster directory")
    return port


def plan_joiner(
    cluster_dir: Path,
    node_id: str,
    *,
    cluster_port: int | None = None,
    admission_port: int | None = None,
    management_port: int | None = None,
) -> JoinerFiles:
    """The new node's config (and certificate); raises ``InvalidLayout`` naming the problem."""
    if NAME_PATTERN.fullmatch(node_id) is None:
        raise InvalidLayout("--node-id must be 1 to 64 characters of A-Z a-z 0-9 _ -")
    configs = _runner_configs(cluster_dir)
    genesis_configs = [c for c in configs if not c[2].join] or configs
    template_path, template_doc, template = genesis_configs[0]
    genesis = template.voters
    config_name = f"{node_id}.json"
    if node_id in genesis:
        raise InvalidLayout(
            f"--node-id {node_id} is a genesis voter of this cluster; a node that joins needs "
            "a new id (a removed id's old store would make it an unknown voter)"
        )
    if any(cfg.node_id == node_id for _, _, cfg in configs) or (cluster_dir / config_name).exists():
        raise InvalidLayout(f"{cluster_dir / config_name} exists; cluster init never overwrites")
    used: set[int] = set()
    for _, _, cfg in configs:
        used |= {cfg.cluster_port, cfg.admission_addr.port}
        used |= {addr.port for addr in cfg.voters.values()}
        if cfg.management is not None:
            used.add(cfg.management.addr.port)
    base = min(addr.port for addr in genesis.values())
    free = [
        i
        for i in range(SLOTS)
        if not {base + i, base + 10 + i, base + 20 + i} & used and base + 20 + i <= 65535
    ]
    slot = free[0] if free else SLOTS  # past the plan: explicit ports are then required
    cluster = _port(cluster_port, base + slot, used, "--cluster-port")
    admission = _port(admission_port, base + 10 + slot, used | {cluster}, "--admission-port")
    management = _port(
        management_port, base + 20 + slot, used | {cluster, admission}, "--management-port"
    )
    document = json.loads(json.dumps(template_doc))  # every sealed field exactly as sealed
    document.update(
        node_id=node_id,
        cluster_port=cluster,
        peers=[f"{peer}@{addr}" for peer, addr in genesis.items()],
        data_dir=str(Path(template.data_dir).parent / node_id),
        admission_addr=f"{template.admission_addr.host}:{admission}",
        join=True,
    )
    if template.management is not None and isinstance(document.get("management"), dict):
        document["management"]["addr"] = f"{template.management.addr.host}:{management}"
    tls_files: dict[str, tuple[bytes, int]] = {}
    tls_dir: Path | None = None
    if template.tls is not None:
        tls_dir = Path(template.tls.ca_file).parent
        tls_files = _certificate(tls_dir, node_id)
        document["tls"] = {
            **document["tls"],
            "cert_file": str(tls_dir / f"{node_id}.pem"),
            "key_file": str(tls_dir / f"{node_id}.key"),
        }
    try:
        joiner = parse_runner_config(document)
    except InvalidConfig as exc:
        path, message = exc.problems[0]
        raise InvalidLayout(f"the joining config would be invalid: {path}: {message}") from None
    if contract_digest(joiner) != contract_digest(template):  # cannot happen: said loudly
        raise InvalidLayout(f"the joining config's contract differs from {template_path.name}'s")
    addrs = [str(c.management.addr) for _, _, c in configs if c.management is not None]
    if joiner.management is not None:
        addrs.append(str(joiner.management.addr))
    return JoinerFiles(
        node_id=node_id,
        config_name=config_name,
        config=document,
        cluster_addr=str(joiner.own_addr),
        management_addrs=tuple(addrs),
        tls_files=tls_files,
        tls_dir=tls_dir,
        admin_credential=joiner.management is not None
        and joiner.management.admin_bearer_env is not None,
    )


def _certificate(tls_dir: Path, node_id: str) -> dict[str, tuple[bytes, int]]:
    try:
        authority = pki.load_authority(
            (tls_dir / CA_CERT_FILE).read_bytes(), (tls_dir / CA_KEY_FILE).read_bytes()
        )
    except (OSError, ValueError) as exc:
        raise InvalidLayout(
            f"--join: cannot issue a certificate from the cluster CA in {tls_dir} "
            f"({CA_CERT_FILE}, {CA_KEY_FILE}): {exc}"
        ) from None
    for name in (f"{node_id}.pem", f"{node_id}.key"):
        if (tls_dir / name).exists():
            raise InvalidLayout(f"{tls_dir / name} exists; cluster init never overwrites")
    issued = pki.issue(
        authority, node_id, dns_names=["localhost", voter_name(node_id)], ip_addresses=[LOOPBACK]
    )
    return {
        f"{node_id}.pem": (issued.cert_pem(), pki.CERT_MODE),
        f"{node_id}.key": (issued.key_pem(), pki.KEY_MODE),
    }


def write_joiner(files: JoinerFiles, cluster_dir: Path) -> list[Path]:
    """Write the certificate (if any), then the config; never over an existing file."""
    from appliance.cluster_init.writer import CONFIG_FILE_MODE, _create, _json_text

    written: list[Path] = []
    if files.tls_dir is not None:
        for name, (data, mode) in files.tls_files.items():
            write = pki.write_private if mode == pki.KEY_MODE else pki.write_public
            write(files.tls_dir / name, data)
            written.append(files.tls_dir / name)
    path = cluster_dir / files.config_name
    _create(path, _json_text(files.config), CONFIG_FILE_MODE)
    written.append(path)
    return written
