"""Start-up fails closed with a message naming the problem (SPEC §2 "Fail closed", §6), the
testing clock is refused outside tests, and the grant expiry is warned about."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from appliance.clock import ScaledClock, SystemClock
from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.runner import parse_runner_config
from appliance.runner.process import EXPIRY_WARNING_S, expiry_warning, make_clock, run_runner
from appliance.store.runner_store import RunnerStore

ENV = {"A_TOKEN": "admission-aaaaaaaa", "C_TOKEN": "cluster-cccccccc", "W_TOKEN": "worker-wwwwwww"}


def runner_doc(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "node_id": "v1",
        "advertise_addr": "127.0.0.1",
        "cluster_port": 1,
        "peers": [],
        "data_dir": str(tmp_path / "data"),
        "admission_addr": "127.0.0.1:1",
        "admission_bearer_env": "A_TOKEN",
        "cluster_bearer_env": "C_TOKEN",
        "remote": {
            "url": "http://127.0.0.1:2",
            "bearer_env": "W_TOKEN",
            "expires_at": "2099-01-01T00:00:00Z",
            "session": "s",
            "timeout_seconds": 60,
            "heap_mb": 64,
            "namespace": "ns",
            "worker_id": "w1",
        },
    }
    doc.update(overrides)
    return doc


def run(
    tmp_path: Path, doc: dict[str, Any], env: dict[str, str], scale: float | None = None
) -> tuple[int, str]:
    path = tmp_path / "runner.json"
    path.write_text(json.dumps(doc))
    err = io.StringIO()
    code = run_runner(
        str(path),
        time_scale=scale,
        environ=env,
        stdin=io.StringIO(""),
        stdout=io.StringIO(),
        stderr=err,
    )
    return code, err.getvalue()


def test_an_unknown_config_field_exits_2_naming_the_field(tmp_path: Path) -> None:
    code, err = run(tmp_path, runner_doc(tmp_path, colour="blue"), ENV)
    assert code == 2
    assert "colour" in err


def test_a_missing_credential_variable_exits_2_naming_it(tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "W_TOKEN"}
    code, err = run(tmp_path, runner_doc(tmp_path), env)
    assert code == 2
    assert "W_TOKEN" in err and "remote.bearer_env" in err


def test_a_reused_credential_exits_2_without_printing_it(tmp_path: Path) -> None:
    env = {**ENV, "W_TOKEN": ENV["C_TOKEN"]}
    code, err = run(tmp_path, runner_doc(tmp_path), env)
    assert code == 2
    assert "must differ" in err
    assert ENV["C_TOKEN"] not in err


def test_the_time_scale_is_refused_without_appliance_testing(tmp_path: Path) -> None:
    code, err = run(tmp_path, runner_doc(tmp_path), ENV, scale=10.0)
    assert code == 2
    assert "APPLIANCE_TESTING=1" in err
    with pytest.raises(ValueError):
        make_clock(10.0, {"APPLIANCE_TESTING": "0"})
    assert isinstance(make_clock(10.0, {"APPLIANCE_TESTING": "1"}), ScaledClock)
    assert isinstance(make_clock(None, {}), SystemClock)


def test_a_store_sealed_with_another_contract_is_refused_with_exit_1(tmp_path: Path) -> None:
    other = parse_runner_config(
        runner_doc(tmp_path, limits={"records": 10, "outstanding": 5, "running": 2})
    )
    RunnerStore.create_or_open(
        other.data_dir, contract=sealed_contract(other), contract_digest=contract_digest(other)
    ).close()
    before = sorted(p.name for p in (tmp_path / "data").iterdir())
    code, err = run(tmp_path, runner_doc(tmp_path), ENV)
    assert code == 1
    assert "cannot open the store" in err
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == before


def test_the_grant_expiry_warning_starts_exactly_24_hours_before() -> None:
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    cfg = parse_runner_config(
        runner_doc(
            Path("/x"),
            remote={**runner_doc(Path("/x"))["remote"], "expires_at": "2030-01-01T00:00:00Z"},
        )
    )
    at = expires.timestamp()
    assert expiry_warning(cfg, at - EXPIRY_WARNING_S - 1) is None
    assert "less than 24 hours" in (expiry_warning(cfg, at - EXPIRY_WARNING_S) or "")
    assert "has passed" in (expiry_warning(cfg, at) or "")
    assert "has passed" in (expiry_warning(cfg, (expires + timedelta(days=1)).timestamp()) or "")


def test_the_scaled_clock_runs_n_times_faster_from_its_start() -> None:
    clock = ScaledClock(100.0, start_wall_s=1_000.0)
    first = clock.now_s()
    time.sleep(0.05)
    elapsed = clock.now_s() - first
    assert 4.0 <= elapsed <= 50.0  # 0.05 s real is ~5 s scaled (generous for a loaded machine)
    assert 1_000.0 <= first < 1_010.0
    with pytest.raises(ValueError):
        ScaledClock(0.5)
