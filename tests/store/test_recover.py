"""``appliance admin store recover``: a fresh runner store, sealed with the cluster's contract,
marked recovering (with its creation time) until the voter has caught up; it refuses to touch a
data_dir that still holds a store, a single-voter config and a config of another voter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.runner import load_runner_config
from appliance.store.errors import StoreRefused
from appliance.store.runner_store import RunnerStore
from appliance.store.versions import RUNNER_FILE_NAME
from migrations_guard import decide, inspect_store


def write_config(root: Path, *, peers: int = 2, data_dir: Path | None = None) -> Path:
    doc = {
        "node_id": "v1",
        "advertise_addr": "127.0.0.1",
        "cluster_port": 7001,
        "peers": [f"v{i}@127.0.0.1:{7000 + i}" for i in range(2, 2 + peers)],
        "data_dir": str(data_dir or root / "v1"),
        "admission_addr": "127.0.0.1:8001",
        "admission_bearer_env": "RUNNER_ADMISSION_TOKEN",
        "cluster_bearer_env": "RUNNER_CLUSTER_TOKEN",
        "schedules": [],
        "remote": {
            "url": "http://127.0.0.1:9000",
            "bearer_env": "RUNNER_WORKER_TOKEN",
            "expires_at": "2099-01-01T00:00:00Z",
            "session": "tests",
            "timeout_seconds": 60,
            "heap_mb": 64,
            "namespace": "ns-test",
            "worker_id": "worker-1",
        },
    }
    path = root / "v1.json"
    path.write_text(json.dumps(doc))
    return path


def open_store(config: Path) -> RunnerStore:
    cfg = load_runner_config(config)
    return RunnerStore.create_or_open(
        cfg.data_dir, contract=sealed_contract(cfg), contract_digest=contract_digest(cfg)
    )


def test_recover_creates_an_empty_sealed_store_marked_recovering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    data_dir = tmp_path / "v1"
    assert (
        main(["admin", "store", "recover", "--config", str(config), "--data-dir", str(data_dir)])
        == 0
    )
    out = capsys.readouterr().out
    assert "RECOVERING since" in out and "watch" in out.lower()
    # The guard accepts it for this voter's contract: the runner will open it as usual.
    cfg = load_runner_config(config)
    facts = inspect_store(data_dir / RUNNER_FILE_NAME)
    assert decide(facts, contract_digest(cfg), 2).allowed
    with open_store(config) as store:
        assert store.recovering()
        since = store.recovering_since()
        assert since is not None and since.endswith("Z") and since in out
        assert store.hard_state() == (0, None) and store.last_index() == 0
        assert not store.created  # recover made it; the runner only opens it


def test_inspect_shows_when_a_store_is_recovering_and_when_it_no_longer_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    data_dir = tmp_path / "v1"
    assert main(["admin", "store", "recover", "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["admin", "store", "inspect", str(data_dir), "--json"]) == 0
    since = json.loads(capsys.readouterr().out)["recovering_since"]
    assert isinstance(since, str) and since.endswith("Z")
    with open_store(config) as store:
        store.clear_recovering()
    assert main(["admin", "store", "inspect", str(data_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recovering_since"] is None


def test_clearing_the_flag_is_durable_and_idempotent(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert main(["admin", "store", "recover", "--config", str(config)]) == 0
    with open_store(config) as store:
        store.clear_recovering()
        store.clear_recovering()
        assert not store.recovering()
    with open_store(config) as store:
        assert not store.recovering() and store.recovering_since() is None


def test_the_flag_survives_reopening_until_cleared(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert main(["admin", "store", "recover", "--config", str(config)]) == 0
    with open_store(config) as store:
        store.persist(term=3, voted_for=None, entries=[(1, 3, b"\x01a")])
    with open_store(config) as store:
        assert store.recovering() and store.hard_state() == (3, None) and store.last_index() == 1


def test_a_store_created_by_a_normal_start_is_not_recovering(tmp_path: Path) -> None:
    with open_store(write_config(tmp_path)) as store:
        assert store.created and not store.recovering()


@pytest.mark.parametrize(
    "leftover", [RUNNER_FILE_NAME, RUNNER_FILE_NAME + "-wal", "worker.sqlite3"]
)
def test_recover_refuses_while_the_damaged_store_is_still_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], leftover: str
) -> None:
    config = write_config(tmp_path)
    data_dir = tmp_path / "v1"
    data_dir.mkdir()
    (data_dir / leftover).write_bytes(b"damaged")
    assert main(["admin", "store", "recover", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "move the damaged store aside first" in err and leftover in err
    assert (data_dir / leftover).read_bytes() == b"damaged"  # untouched
    assert sorted(p.name for p in data_dir.iterdir()) == [leftover]


def test_recover_refuses_a_healthy_store_too(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    open_store(config).close()
    cfg = load_runner_config(config)
    with pytest.raises(StoreRefused, match="move the damaged store aside"):
        RunnerStore.create_recovering(
            cfg.data_dir,
            contract=sealed_contract(cfg),
            contract_digest=contract_digest(cfg),
            created_at="2026-01-01T00:00:00Z",
        )


def test_recover_accepts_an_empty_data_dir_left_by_moving_the_store_aside(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "LOCK").write_text("")
    assert main(["admin", "store", "recover", "--config", str(config)]) == 0


def test_recover_refuses_a_data_dir_that_is_not_the_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    other = tmp_path / "elsewhere"
    assert (
        main(["admin", "store", "recover", "--config", str(config), "--data-dir", str(other)]) == 1
    )
    assert "not the config's data_dir" in capsys.readouterr().err
    assert not other.exists() and not (tmp_path / "v1").exists()


@pytest.mark.parametrize("peers", [0, 1])
def test_recover_needs_at_least_three_voters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], peers: int
) -> None:
    config = write_config(tmp_path, peers=peers)
    assert main(["admin", "store", "recover", "--config", str(config)]) == 1
    assert "3 or more voters" in capsys.readouterr().err
    assert not (tmp_path / "v1").exists()


def test_recover_reports_an_invalid_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.json"
    config.write_text("{}")
    assert main(["admin", "store", "recover", "--config", str(config)]) == 1
    assert "config:" in capsys.readouterr().err
