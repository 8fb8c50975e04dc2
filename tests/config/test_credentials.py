"""Credentials: every named variable resolved, none missing or reused, values never shown."""

from __future__ import annotations

import copy
import pickle

import pytest

from appliance.config.credentials import (
    CREDENTIAL_BYTES_MAX,
    Secret,
    matches,
    resolve_runner_credentials,
    resolve_worker_credentials,
)
from appliance.config.runner import parse_runner_config
from appliance.config.worker import parse_worker_config
from appliance.core.errors import InvalidConfig
from tests.config.conftest import runner_dict, worker_dict

ENV = {
    "ADMISSION_TOKEN": "admission-secret-value",
    "CLUSTER_TOKEN": "cluster-secret-value",
    "WORKER_TOKEN": "worker-secret-value",
    "OPERATOR_TOKEN": "operator-secret-value",
    "RECOVERY_TOKEN": "recovery-secret-value",
}


@pytest.fixture(scope="module")
def cfg():  # type: ignore[no-untyped-def]
    return parse_runner_config(runner_dict())


def problems_of(cfg, environ) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfig) as err:
        resolve_runner_credentials(cfg, environ)
    text = f"{err.value} {err.value!r} {err.value.problems}"
    for value in environ.values():
        assert value not in text or value == "", "a credential value leaked into an error"
    return err.value.problems


def test_all_five_runner_credentials_resolve(cfg) -> None:  # type: ignore[no-untyped-def]
    creds = resolve_runner_credentials(cfg, ENV)
    assert creds.admission.reveal() == "admission-secret-value"
    assert creds.cluster.reveal() == "cluster-secret-value"
    assert creds.worker.reveal() == "worker-secret-value"
    assert creds.operator is not None and creds.operator.reveal() == "operator-secret-value"
    assert creds.recovery is not None and creds.recovery.reveal() == "recovery-secret-value"


def test_without_management_only_three_credentials_are_needed() -> None:
    doc = runner_dict()
    del doc["management"]
    env = {k: v for k, v in ENV.items() if k not in ("OPERATOR_TOKEN", "RECOVERY_TOKEN")}
    creds = resolve_runner_credentials(parse_runner_config(doc), env)
    assert creds.operator is None and creds.recovery is None


def test_recovery_is_optional() -> None:
    doc = runner_dict()
    del doc["management"]["recovery_bearer_env"]
    env = {k: v for k, v in ENV.items() if k != "RECOVERY_TOKEN"}
    assert resolve_runner_credentials(parse_runner_config(doc), env).recovery is None


def test_missing_and_empty_variables_are_all_reported_by_field(cfg) -> None:  # type: ignore[no-untyped-def]
    env = dict(ENV)
    del env["CLUSTER_TOKEN"]
    env["RECOVERY_TOKEN"] = ""
    assert problems_of(cfg, env) == [
        ("cluster_bearer_env", "environment variable CLUSTER_TOKEN is not set"),
        ("management.recovery_bearer_env", "environment variable RECOVERY_TOKEN is empty"),
    ]


@pytest.mark.parametrize(
    ("first", "second", "path"),
    [
        ("ADMISSION_TOKEN", "CLUSTER_TOKEN", "cluster_bearer_env"),
        ("ADMISSION_TOKEN", "WORKER_TOKEN", "remote.bearer_env"),
        ("CLUSTER_TOKEN", "WORKER_TOKEN", "remote.bearer_env"),
        ("WORKER_TOKEN", "OPERATOR_TOKEN", "management.bearer_env"),
        ("ADMISSION_TOKEN", "OPERATOR_TOKEN", "management.bearer_env"),
        ("CLUSTER_TOKEN", "OPERATOR_TOKEN", "management.bearer_env"),
        ("OPERATOR_TOKEN", "RECOVERY_TOKEN", "management.recovery_bearer_env"),
        ("ADMISSION_TOKEN", "RECOVERY_TOKEN", "management.recovery_bearer_env"),
        ("CLUSTER_TOKEN", "RECOVERY_TOKEN", "management.recovery_bearer_env"),
        ("WORKER_TOKEN", "RECOVERY_TOKEN", "management.recovery_bearer_env"),
    ],
)
def test_any_two_roles_sharing_a_value_are_refused(cfg, first: str, second: str, path: str) -> None:  # type: ignore[no-untyped-def]
    env = dict(ENV)
    env[second] = env[first]
    problems = problems_of(cfg, env)
    assert [p for p, _ in problems] == [path]
    assert "every credential must differ" in problems[0][1]


def test_two_fields_naming_the_same_variable_are_reuse_too() -> None:
    doc = runner_dict()
    doc["cluster_bearer_env"] = "ADMISSION_TOKEN"
    problems = problems_of(parse_runner_config(doc), ENV)
    assert problems == [
        (
            "cluster_bearer_env",
            "the cluster credential (ADMISSION_TOKEN) equals the admission credential "
            "(admission_bearer_env); every credential must differ",
        )
    ]


@pytest.mark.parametrize("value", ["has space", "tab\there", "line\nbreak", "ünïcode"])
def test_values_that_cannot_travel_in_an_authorization_header_are_refused(cfg, value: str) -> None:  # type: ignore[no-untyped-def]
    env = dict(ENV, CLUSTER_TOKEN=value)
    assert [p for p, _ in problems_of(cfg, env)] == ["cluster_bearer_env"]


def test_a_value_of_the_maximum_length_passes_and_one_byte_more_fails(cfg) -> None:  # type: ignore[no-untyped-def]
    env = dict(ENV, CLUSTER_TOKEN="c" * CREDENTIAL_BYTES_MAX)
    assert len(resolve_runner_credentials(cfg, env).cluster.reveal()) == CREDENTIAL_BYTES_MAX
    env["CLUSTER_TOKEN"] += "c"
    assert [p for p, _ in problems_of(cfg, env)] == ["cluster_bearer_env"]


def test_worker_credentials_resolve_and_must_differ() -> None:
    wcfg = parse_worker_config(worker_dict())
    env = {"MCP_SCHEDULER_WORKER_TOKEN": "w-token", "MCP_SCHEDULER_ADMISSION_TOKEN": "a-token"}
    creds = resolve_worker_credentials(wcfg, env)
    assert (creds.bearer.reveal(), creds.admission.reveal()) == ("w-token", "a-token")
    env["MCP_SCHEDULER_ADMISSION_TOKEN"] = "w-token"
    with pytest.raises(InvalidConfig) as err:
        resolve_worker_credentials(wcfg, env)
    assert [p for p, _ in err.value.problems] == ["admission_bearer_env"]
    assert "w-token" not in str(err.value)


def test_a_secret_never_shows_its_value(cfg) -> None:  # type: ignore[no-untyped-def]
    creds = resolve_runner_credentials(cfg, ENV)
    for shown in (
        str(creds),
        repr(creds),
        f"{creds.cluster}",
        f"{creds.cluster!r}",
        str(creds.cluster),
        "{}".format(creds.cluster),  # noqa: UP032 - str.format is another path to __format__
    ):
        for value in ENV.values():
            assert value not in shown
    assert repr(creds.cluster) == "Secret(<redacted>)"


def test_a_secret_cannot_be_pickled_or_compared_with_equals() -> None:
    secret = Secret("s3cret")
    with pytest.raises(TypeError):
        pickle.dumps(secret)
    with pytest.raises(TypeError):
        copy.copy(secret)
    assert secret != Secret("s3cret")  # identity only; use matches() for a value comparison


@pytest.mark.parametrize(
    ("presented", "expected", "result"),
    [
        ("token", Secret("token"), True),
        (b"token", Secret("token"), True),
        ("token", "token", True),
        (b"token", b"token", True),
        ("token ", Secret("token"), False),
        ("toke", Secret("token"), False),
        ("", Secret("token"), False),
        ("tökén", Secret("tökén"), True),
        ("TOKEN", Secret("token"), False),
    ],
)
def test_matches_compares_in_constant_time_over_bytes(
    presented: str | bytes, expected: Secret | str | bytes, result: bool
) -> None:
    assert matches(presented, expected) is result
    if isinstance(expected, Secret):
        assert expected.matches(presented) is result
