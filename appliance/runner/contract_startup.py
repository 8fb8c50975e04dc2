"""Which contract a voter starts with: its config against the genesis and the committed amendments.

Theory of operation: a store is sealed with the genesis contract; amendments are committed later
(appliance/core/amendments.py) and the checkpoint remembers them. At start, before the guard opens
the store, the config's sealed-contract JSON is compared with every committed state of the
contract the checkpoint holds (the genesis, each remembered amendment, the one in force):

- equal to one of them: the voter starts, opens the store with the *genesis* contract (so the
  guard's digest check and the digest on every message between voters stay the genesis one), and
  says which amendment its config equals and which one it runs (always the one in force: the
  owner reads remote and limits from the committed state, never from the file);
- equal to none: refused, naming every field in which the config differs from the contract in
  force (``remote.url``, ``limits.records``, ``voters`` …).

A store that does not exist yet is created from the config, which is then the genesis. Reading is
read-only and happens before the store is locked; the guard then verifies every checksum.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from appliance.config.contract import contract_digest, remote_from_json, sealed_contract
from appliance.config.runner import RunnerConfig
from appliance.core.amendments import CONTRACT_PART
from appliance.core.canonical import canonical_digest
from appliance.core.limits import Limits
from appliance.owner.contract_state import committed_contracts, differing_fields
from appliance.store import schema
from appliance.store.readonly import open_readonly
from appliance.store.versions import RUNNER_FILE_NAME


class ContractConflict(ValueError):
    """The config equals no committed state of the contract; the message names the fields."""


@dataclass(frozen=True)
class StartupContract:
    contract: dict[str, Any]  # the genesis: what the store is opened (or sealed) with
    digest: str
    config_amendment: int  # the committed state the config equals (0: the genesis)
    in_force: int  # the amendment the voter runs

    def message(self) -> str:
        if self.in_force == 0:
            return "the contract in force is the genesis (no amendment committed)"
        said = "the genesis" if self.config_amendment == 0 else f"amendment {self.config_amendment}"
        return (
            f"the config equals {said} of the contract; this voter runs the contract in force, "
            f"amendment {self.in_force} (remote and limits are read from the committed state)"
        )


def _read_parts(path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Any]:
    """(the sealed genesis contract, the amendments part, the limits in the checkpoint meta)."""
    conn = open_readonly(path)
    try:
        _canonical, _digest, genesis, _problems = schema.read_contract(conn)
        parts: dict[str, Any] = {}
        for name, data in conn.execute(
            "SELECT name, data FROM checkpoint_part WHERE name IN (?, 'meta')", (CONTRACT_PART,)
        ):
            parts[name] = json.loads(data)
    finally:
        conn.close()
    meta = parts.get("meta")
    return genesis, parts.get(CONTRACT_PART), None if meta is None else meta.get("limits")


def startup_contract(cfg: RunnerConfig) -> StartupContract:
    """The contract to open the store with, or ``ContractConflict`` naming the fields."""
    given = sealed_contract(cfg)
    path = Path(cfg.data_dir) / RUNNER_FILE_NAME
    if not path.exists():
        return StartupContract(given, contract_digest(cfg), 0, 0)
    try:
        genesis, part, limits_now = _read_parts(path)
    except (apsw.Error, ValueError):
        genesis, part, limits_now = None, None, None
    if genesis is None:  # unreadable: the guard explains the damage
        return StartupContract(given, contract_digest(cfg), 0, 0)
    states = committed_contracts(genesis, part, limits_now or genesis["limits"])
    in_force_index, in_force = states[-1]
    for index, contract in states:
        if contract == given:
            return StartupContract(genesis, canonical_digest(genesis), index, in_force_index)
    fields = differing_fields(in_force, given)
    raise ContractConflict(
        f"the config's contract equals neither the genesis sealed in {path} nor any committed "
        f"amendment; it differs from the contract in force (amendment {in_force_index}) in: "
        f"{', '.join(fields) or 'none'}. Start this voter with its genesis config (it then runs "
        "the amended contract) or with a config equal to the contract in force "
        '(docs/cluster.md, "Renewing the grant and changing the remote")'
    )


def genesis_config(cfg: RunnerConfig, genesis: dict[str, Any]) -> RunnerConfig:
    """``cfg`` with the genesis remote and limits (the owner folds the amendments in)."""
    from dataclasses import replace

    genesis_remote = remote_from_json(genesis["remote"])
    return replace(cfg, remote=genesis_remote, limits=Limits(**genesis["limits"]))
