"""A voter starts with its genesis config or a config equal to any committed state of the
contract, and says which amendment it runs; a conflicting config is refused naming the fields
(appliance/runner/contract_startup.py). The store's minimum reader version is raised with the
first amendment."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.runner import parse_runner_config
from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.runner.contract_startup import ContractConflict, startup_contract
from appliance.runner.machine import Accepted, Machine, encode_command
from appliance.store.runner_store import RunnerStore
from appliance.store.versions import READER_VERSION_AMENDED
from tests.runner.test_startup import ENV, run, runner_doc

RENEWED = "2099-06-01T00:00:00Z"
AT_S = 1_800_000_000


def _amend(tmp_path: Path, *commands: Any) -> dict[str, Any]:
    """A store sealed with the genesis ``runner_doc`` and ``commands`` applied and checkpointed."""
    doc = runner_doc(tmp_path)
    cfg = parse_runner_config(doc)
    store = RunnerStore.create_or_open(
        cfg.data_dir, contract=sealed_contract(cfg), contract_digest=contract_digest(cfg)
    )
    machine = Machine(store, cfg.limits)
    for index, command in enumerate(commands, start=1):
        assert isinstance(machine.apply(index, encode_command(command)), Accepted)
    assert machine.close()
    assert store.min_reader_version() == (READER_VERSION_AMENDED if commands else 1)
    store.close()
    return doc


def _with(doc: dict[str, Any], **remote: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["remote"].update(remote)
    return out


def test_the_genesis_config_and_every_committed_state_start(tmp_path: Path) -> None:
    doc = _amend(
        tmp_path,
        core.RenewGrant(0, RENEWED, AT_S),
        core.AmendRemote(1, AT_S, worker_id="w2"),
    )
    genesis = startup_contract(parse_runner_config(doc))
    assert (genesis.config_amendment, genesis.in_force) == (0, 2)
    assert "amendment 2" in genesis.message()
    first = startup_contract(parse_runner_config(_with(doc, expires_at=RENEWED)))
    assert (first.config_amendment, first.in_force) == (1, 2)
    both = startup_contract(parse_runner_config(_with(doc, expires_at=RENEWED, worker_id="w2")))
    assert both.config_amendment == 2
    # The store is always opened with the genesis, whichever config matched.
    assert (
        first.digest == both.digest == genesis.digest == contract_digest(parse_runner_config(doc))
    )


def test_a_config_equal_to_no_committed_state_is_refused_naming_the_fields(
    tmp_path: Path,
) -> None:
    doc = _amend(tmp_path, core.RenewGrant(0, RENEWED, AT_S))
    # worker_id was never amended: w2 with the genesis expiry matches nothing.
    conflicting = _with(doc, worker_id="w2", heap_mb=128)
    with pytest.raises(ContractConflict) as refused:
        startup_contract(parse_runner_config(conflicting))
    message = str(refused.value)
    assert "remote.worker_id" in message and "remote.heap_mb" in message
    assert "remote.expires_at" in message  # it differs from the renewed one in force, too
    assert "amendment 1" in message
    code, err = run(tmp_path, conflicting, ENV)
    assert code == 1 and "remote.worker_id" in err


def test_a_limits_amendment_is_a_committed_state_too(tmp_path: Path) -> None:
    raised = Limits(records=8192, outstanding=256)
    doc = _amend(tmp_path, core.AmendLimits(0, raised, AT_S))
    amended = {**doc, "limits": {"records": 8192, "outstanding": 256}}
    assert startup_contract(parse_runner_config(amended)).config_amendment == 1
    lowered = {**doc, "limits": {"records": 200}}
    with pytest.raises(ContractConflict, match=r"limits\.records"):
        startup_contract(parse_runner_config(lowered))


def test_a_store_without_amendments_starts_only_with_its_genesis(tmp_path: Path) -> None:
    doc = _amend(tmp_path)
    assert startup_contract(parse_runner_config(doc)).in_force == 0
    with pytest.raises(ContractConflict, match=r"remote\.expires_at"):
        startup_contract(parse_runner_config(_with(doc, expires_at=RENEWED)))


def test_admin_store_inspect_shows_the_amendments(tmp_path: Path) -> None:
    from appliance.core.amendments import CONTRACT_PART
    from migrations_guard import inspect
    from migrations_guard.inspect import inspect_store

    assert inspect.CONTRACT_PART == CONTRACT_PART
    doc = _amend(tmp_path, core.RenewGrant(0, RENEWED, AT_S))
    summary = inspect_store(Path(doc["data_dir"])).summary
    assert summary["contract_amendment"] == 1
    assert summary["contract_amended"] == {"expires_at": RENEWED}
    assert [e["kind"] for e in summary["contract_amendments"]] == ["renew_grant"]
    assert (
        inspect_store(Path(_amend(tmp_path / "b")["data_dir"])).summary["contract_amendment"] == 0
    )
