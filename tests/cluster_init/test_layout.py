"""The cluster layout: one port plan, valid configs, one contract, five distinct credentials."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from appliance.cluster_init.layout import (
    BASE_PORT_MAX,
    BASE_PORT_MIN,
    ENV_NAMES,
    PORT_SPAN,
    InvalidLayout,
    fresh_credentials,
    lay_out,
    plan_ports,
)
from appliance.config.contract import contract_digest
from appliance.config.credentials import resolve_runner_credentials, resolve_worker_credentials
from appliance.config.runner import RunnerConfig, parse_runner_config
from appliance.config.worker import parse_worker_config

NOW = datetime(2026, 11, 29, 20, 0, 0, 123456, tzinfo=UTC)
OUT = Path("/srv/cluster")


def parsed_runners(voters: int, base_port: int = 7100) -> list[RunnerConfig]:
    files = lay_out(voters, base_port, OUT, NOW)
    return [parse_runner_config(doc) for doc in files.runner_configs.values()]


def all_ports(voters: int, base_port: int) -> list[int]:
    plan = plan_ports(voters, base_port)
    ports = [plan.worker_port]
    for voter in plan.voters:
        ports += [voter.cluster_port, voter.admission_port, voter.management_port]
    return ports


@pytest.mark.parametrize("voters", [1, 3, 5, 7, 9])
def test_every_listener_gets_its_own_port_within_the_announced_span(voters: int) -> None:
    ports = all_ports(voters, 20000)
    assert len(set(ports)) == len(ports) == 3 * voters + 1
    assert min(ports) == 20000
    assert max(ports) == 20000 + PORT_SPAN - 1


@pytest.mark.parametrize("voters", [1, 3, 5, 7, 9])
def test_odd_voter_counts_up_to_nine_are_laid_out(voters: int) -> None:
    assert len(plan_ports(voters, 7100).voters) == voters


@pytest.mark.parametrize("voters", [0, 2, 4, 10, -1])
def test_even_or_out_of_range_voter_counts_are_refused(voters: int) -> None:
    with pytest.raises(InvalidLayout, match="--voters"):
        plan_ports(voters, 7100)


def test_base_port_at_the_lower_limit_starts_at_the_first_unprivileged_port() -> None:
    assert min(all_ports(9, BASE_PORT_MIN)) == 1024


def test_base_port_at_the_upper_limit_ends_at_the_last_port() -> None:
    assert max(all_ports(9, BASE_PORT_MAX)) == 65535


@pytest.mark.parametrize("base_port", [BASE_PORT_MIN - 1, BASE_PORT_MAX + 1])
def test_base_port_one_beyond_either_limit_is_refused(base_port: int) -> None:
    with pytest.raises(InvalidLayout, match="--base-port"):
        plan_ports(3, base_port)


@pytest.mark.parametrize("voters", [1, 3, 9])
def test_every_generated_runner_config_is_valid_and_names_the_others_as_peers(
    voters: int,
) -> None:
    runners = parsed_runners(voters)
    ids = {cfg.node_id for cfg in runners}
    assert len(ids) == voters
    for cfg in runners:
        assert {peer.node_id for peer in cfg.peers} == ids - {cfg.node_id}
        assert cfg.management is not None
        assert cfg.management.addr.host == "127.0.0.1"
        assert cfg.data_dir == str(OUT / "data" / cfg.node_id)


@pytest.mark.parametrize("voters", [3, 5])
def test_contract_digest_is_identical_across_the_generated_voters(voters: int) -> None:
    digests = {contract_digest(cfg) for cfg in parsed_runners(voters)}
    assert len(digests) == 1


def test_contract_digest_differs_between_two_clusters_on_other_ports() -> None:
    assert contract_digest(parsed_runners(3, 7100)[0]) != contract_digest(
        parsed_runners(3, 7200)[0]
    )


def test_worker_config_is_valid_and_points_at_every_voters_admission_route() -> None:
    files = lay_out(3, 7100, OUT, NOW)
    worker = parse_worker_config(files.worker_config)
    runners = [parse_runner_config(doc) for doc in files.runner_configs.values()]
    assert [origin.url for origin in worker.admission_urls] == [
        f"http://{cfg.admission_addr}" for cfg in runners
    ]
    for cfg in runners:
        assert cfg.remote.namespace == worker.namespace
        assert cfg.remote.worker_id == worker.worker_id
        assert cfg.remote.url.url == f"http://{worker.listen_addr}"
        assert cfg.remote.bearer_env == worker.bearer_env
        assert cfg.admission_bearer_env == worker.admission_bearer_env


def test_grant_expiry_is_a_whole_second_a_year_ahead() -> None:
    cfg = parsed_runners(3)[0]
    assert cfg.remote.expires_at == datetime(2027, 11, 29, 20, 0, 0, tzinfo=UTC)


def test_demo_schedule_can_be_left_out() -> None:
    files = lay_out(3, 7100, OUT, NOW, demo=False)
    assert all(doc["schedules"] == [] for doc in files.runner_configs.values())
    assert len(parsed_runners(3)[0].schedules) == 1


def test_six_fresh_credentials_are_distinct_and_change_every_time() -> None:
    first, second = fresh_credentials(), fresh_credentials()
    assert set(first) == set(ENV_NAMES.values())
    assert len(set(first.values())) == 6
    assert not set(first.values()) & set(second.values())
    assert all(len(value) >= 43 for value in first.values())  # 32 random bytes, base64url


def test_a_token_source_that_repeats_itself_is_refused() -> None:
    with pytest.raises(InvalidLayout, match="same credential"):
        fresh_credentials(lambda _bytes: "always-the-same")


def test_generated_credentials_satisfy_the_runner_and_worker_credential_rules() -> None:
    files = lay_out(3, 7100, OUT, NOW)
    for doc in files.runner_configs.values():
        credentials = resolve_runner_credentials(parse_runner_config(doc), files.credentials)
        assert credentials.operator is not None
        assert credentials.recovery is not None
    resolve_worker_credentials(parse_worker_config(files.worker_config), files.credentials)
