"""The worker config's ``egress`` section: every field, every limit at its boundary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.config import egress as cfg
from appliance.config.worker import load_worker_config, parse_worker_config
from appliance.core.errors import InvalidConfig

BASE = {
    "namespace": "ops",
    "worker_id": "w1",
    "data_dir": "/var/lib/w",
    "bearer_env": "W_TOKEN",
    "admission_bearer_env": "A_TOKEN",
    "admission_urls": ["http://127.0.0.1:4501"],
    "listen_addr": "127.0.0.1:4701",
}
POLICY = {"policy_file": "/etc/appliance/egress.rego"}


def parsed(egress: dict[str, Any]) -> cfg.EgressSettings:
    settings = parse_worker_config({**BASE, "egress": egress}).egress
    assert settings is not None
    return settings


def problems(egress: Any) -> list[tuple[str, str]]:
    with pytest.raises(InvalidConfig) as caught:
        parse_worker_config({**BASE, "egress": egress})
    return caught.value.problems


def test_without_an_egress_section_there_is_none() -> None:
    assert parse_worker_config(BASE).egress is None


def test_defaults() -> None:
    settings = parsed(POLICY)
    assert settings == cfg.EgressSettings(policy_file="/etc/appliance/egress.rego")
    assert (settings.max_requests, settings.max_request_bytes, settings.max_response_bytes) == (
        32,
        256 * 1024,
        1024 * 1024,
    )


@pytest.mark.parametrize(
    "egress",
    [{}, {"policy_file": "/p.rego", "opa_url": "http://127.0.0.1:8181"}],
    ids=["neither", "both"],
)
def test_exactly_one_policy(egress: dict[str, Any]) -> None:
    assert any("exactly one policy" in message for _, message in problems(egress))


def test_unknown_fields_are_refused_at_every_level() -> None:
    found = problems(
        {
            **POLICY,
            "polcy_file": "x",
            "credentials": [
                {"origin": "https://a.example", "header": "X-K", "value_env": "K", "extra": 1}
            ],
        }
    )
    paths = {path for path, _ in found}
    assert {"egress.polcy_file", "egress.credentials[0].extra"} <= paths


LIMITS = [
    ("max_requests", cfg.MAX_REQUESTS_RANGE),
    ("max_request_bytes", cfg.MAX_REQUEST_BYTES_RANGE),
    ("max_response_bytes", cfg.MAX_RESPONSE_BYTES_RANGE),
    ("request_timeout_ms", cfg.REQUEST_TIMEOUT_MS_RANGE),
    ("policy_timeout_ms", cfg.POLICY_TIMEOUT_MS_RANGE),
    ("max_redirects", cfg.MAX_REDIRECTS_RANGE),
]


@pytest.mark.parametrize(("name", "bounds"), LIMITS, ids=[name for name, _ in LIMITS])
def test_every_limit_at_its_boundaries(name: str, bounds: tuple[int, int]) -> None:
    low, high = bounds
    assert getattr(parsed({**POLICY, name: low}), name) == low
    assert getattr(parsed({**POLICY, name: high}), name) == high
    for wrong in (low - 1, high + 1, float(low), True, str(low)):
        assert [path for path, _ in problems({**POLICY, name: wrong})] == [f"egress.{name}"]


def test_the_documented_ranges() -> None:
    assert cfg.MAX_REQUESTS_RANGE == (1, 256)
    assert cfg.MAX_REQUEST_BYTES_RANGE == (0, 16 * 1024 * 1024)
    assert cfg.MAX_RESPONSE_BYTES_RANGE == (0, 64 * 1024 * 1024)
    assert cfg.REQUEST_TIMEOUT_MS_RANGE == (100, 600_000)
    assert cfg.POLICY_TIMEOUT_MS_RANGE == (10, 60_000)
    assert cfg.MAX_REDIRECTS_RANGE == (0, 20)


def rule(**fields: Any) -> dict[str, Any]:
    return {
        "origin": "https://api.example.com",
        "header": "Authorization",
        "value_env": "K",
        **fields,
    }


def test_a_credential_is_parsed_and_normalized() -> None:
    (credential,) = parsed(
        {**POLICY, "credentials": [rule(origin="https://API.example.com:443/", path_prefix="/h/")]}
    ).credentials
    assert credential.origin.url == "https://api.example.com"
    assert credential.header == "authorization" and credential.path_prefix == "/h/"
    assert credential.name == "K"


def test_credentials_count_at_the_boundary() -> None:
    many = [rule(header=f"X-K{i}") for i in range(cfg.CREDENTIALS_MAX)]
    assert len(parsed({**POLICY, "credentials": many}).credentials) == cfg.CREDENTIALS_MAX
    assert problems({**POLICY, "credentials": [*many, rule(header="X-Over")]})


def test_two_credentials_for_the_same_origin_prefix_and_header_are_refused() -> None:
    found = problems({**POLICY, "credentials": [rule(), rule(header="authorization")]})
    assert found == [
        ("egress.credentials[1]", "is the same origin, path_prefix and header as item 0")
    ]


@pytest.mark.parametrize(
    "origin",
    [
        "http://api.example.com",
        "https://api.example.com/path",
        "https://u@api.example.com",
        "ftp://api.example.com",
        "http://localhost:80",
    ],
)
def test_a_credential_origin_is_https_or_loopback_http(origin: str) -> None:
    assert [p for p, _ in problems({**POLICY, "credentials": [rule(origin=origin)]})] == [
        "egress.credentials[0].origin"
    ]


def test_loopback_http_is_a_valid_credential_origin() -> None:
    (credential,) = parsed(
        {**POLICY, "credentials": [rule(origin="http://127.0.0.1:8080")]}
    ).credentials
    assert credential.origin.url == "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    "header",
    [
        "Host",
        "content-length",
        "Transfer-Encoding",
        "Idempotency-Key",
        "Appliance-Invocation",
        "appliance-ownership-epoch",
        "Proxy-Authorization",
        "Bad Header",
        "",
        "X:Y",
    ],
)
def test_headers_a_credential_cannot_set(header: str) -> None:
    assert [p for p, _ in problems({**POLICY, "credentials": [rule(header=header)]})] == [
        "egress.credentials[0].header"
    ]


def test_header_name_length_at_the_boundary() -> None:
    name = "X" * cfg.HEADER_NAME_BYTES_MAX
    assert parsed({**POLICY, "credentials": [rule(header=name)]}).credentials[0].header
    assert problems({**POLICY, "credentials": [rule(header=name + "X")]})


@pytest.mark.parametrize(
    "prefix", ["hooks", "/a/../b", "/a/./b", "/a/%2e%2E/b", "/q?x", "/f#x", "/sp ace", "/é"]
)
def test_bad_path_prefixes(prefix: str) -> None:
    assert [p for p, _ in problems({**POLICY, "credentials": [rule(path_prefix=prefix)]})] == [
        "egress.credentials[0].path_prefix"
    ]


def test_path_prefix_length_at_the_boundary() -> None:
    exact = "/" + "a" * (cfg.PATH_PREFIX_BYTES_MAX - 1)
    assert parsed({**POLICY, "credentials": [rule(path_prefix=exact)]})
    assert problems({**POLICY, "credentials": [rule(path_prefix=exact + "a")]})


def test_opa_url_follows_the_origin_rules() -> None:
    assert parsed({"opa_url": "http://127.0.0.1:8181"}).opa_url.url == "http://127.0.0.1:8181"
    assert problems({"opa_url": "http://opa.internal:8181"})
    assert problems({"opa_url": "https://opa.internal/v1/data"})


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    path = folder / "worker.json"
    path.write_text(
        json.dumps({**BASE, "egress": {"policy_file": "egress.rego", "ca_file": "../ca.pem"}})
    )
    settings = load_worker_config({}, path).egress
    assert settings is not None
    assert settings.policy_file == str(folder / "egress.rego")
    assert settings.ca_file == str(tmp_path / "conf" / ".." / "ca.pem")


def test_relative_paths_are_refused_when_the_config_comes_from_the_environment() -> None:
    text = json.dumps({**BASE, "egress": {"policy_file": "egress.rego"}})
    with pytest.raises(InvalidConfig) as caught:
        load_worker_config({"MCP_SCHEDULED_WORKER_CONFIG": text})
    ((path, message),) = caught.value.problems
    assert path == "egress.policy_file" and "must be an absolute path" in message
    absolute = json.dumps({**BASE, "egress": {"policy_file": "/etc/egress.rego"}})
    loaded = load_worker_config({"MCP_SCHEDULED_WORKER_CONFIG": absolute}).egress
    assert loaded is not None and loaded.policy_file == "/etc/egress.rego"
