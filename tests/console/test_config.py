"""The runner config's ``console`` section: loopback only, its own credential, never sealed."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.config.contract import contract_digest
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import parse_runner_config
from appliance.core.errors import InvalidConfig
from tests.config.conftest import runner_dict

ENV = {
    "ADMISSION_TOKEN": "admission-secret-value",
    "CLUSTER_TOKEN": "cluster-secret-value",
    "WORKER_TOKEN": "worker-secret-value",
    "OPERATOR_TOKEN": "operator-secret-value",
    "RECOVERY_TOKEN": "recovery-secret-value",
    "CONSOLE_TOKEN": "console-secret-value",
}


def with_console(**console: Any) -> dict[str, Any]:
    doc = runner_dict()
    doc["console"] = {"addr": "127.0.0.1:4700", "bearer_env": "CONSOLE_TOKEN", **console}
    return doc


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(InvalidConfig) as err:
        parse_runner_config(doc)
    return err.value.problems


def test_a_console_section_parses_with_actions_and_tls_off_by_default() -> None:
    cfg = parse_runner_config(with_console())
    assert cfg.console is not None
    assert str(cfg.console.addr) == "127.0.0.1:4700"
    assert cfg.console.bearer_env == "CONSOLE_TOKEN"
    assert cfg.console.actions is False and cfg.console.tls is False
    assert parse_runner_config(with_console(actions=True)).console.actions is True


def test_without_a_console_section_there_is_no_console() -> None:
    assert parse_runner_config(runner_dict()).console is None


@pytest.mark.parametrize("addr", ["0.0.0.0:4700", "10.0.0.1:4700", "localhost:4700"])
def test_a_console_address_that_is_not_loopback_is_refused(addr: str) -> None:
    found = problems(with_console(addr=addr))
    assert [path for path, _ in found] == ["console.addr"]
    assert "loopback" in found[0][1]


def test_an_unknown_console_field_is_refused_by_name() -> None:
    found = problems(with_console(theme="dark"))
    assert any(path == "console.theme" for path, _ in found)


@pytest.mark.parametrize("field", ["actions", "tls"])
def test_console_switches_must_be_booleans(field: str) -> None:
    found = problems(with_console(**{field: "yes"}))
    assert [path for path, _ in found] == [f"console.{field}"]


def test_console_tls_needs_the_voters_tls_section() -> None:
    found = problems(with_console(tls=True))
    assert [path for path, _ in found] == ["console.tls"]


def test_the_console_cannot_share_the_management_address() -> None:
    doc = with_console(addr=runner_dict()["management"]["addr"])
    found = problems(doc)
    assert [path for path, _ in found] == ["console.addr"]


def test_the_console_is_not_part_of_the_sealed_contract() -> None:
    plain = parse_runner_config(runner_dict())
    consoled = parse_runner_config(with_console(actions=True))
    assert contract_digest(plain) == contract_digest(consoled)


def test_the_console_credential_resolves_from_its_variable() -> None:
    credentials = resolve_runner_credentials(parse_runner_config(with_console()), ENV)
    assert credentials.console is not None
    assert credentials.console.reveal() == "console-secret-value"


OTHERS = ["ADMISSION_TOKEN", "CLUSTER_TOKEN", "WORKER_TOKEN", "OPERATOR_TOKEN", "RECOVERY_TOKEN"]


@pytest.mark.parametrize("other", OTHERS)
def test_the_console_credential_must_differ_from_every_other(other: str) -> None:
    env = {**ENV, "CONSOLE_TOKEN": ENV[other]}
    with pytest.raises(InvalidConfig) as err:
        resolve_runner_credentials(parse_runner_config(with_console()), env)
    text = repr(err.value.problems)
    assert "must differ" in text and "console" in text
    assert ENV[other] not in text  # the value is never shown


def test_a_missing_console_variable_is_named() -> None:
    env = {k: v for k, v in ENV.items() if k != "CONSOLE_TOKEN"}
    with pytest.raises(InvalidConfig) as err:
        resolve_runner_credentials(parse_runner_config(with_console()), env)
    assert err.value.problems == [
        ("console.bearer_env", "environment variable CONSOLE_TOKEN is not set")
    ]
