"""Worker config (SPEC §7): seeds/001 fields, listener, engine settings, origins, loading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.config.addresses import HostPort
from appliance.config.urls import Origin
from appliance.config.worker import (
    WORKER_CONFIG_ENV,
    EngineSettings,
    WorkerConfig,
    load_worker_config,
    parse_worker_config,
)
from appliance.core.errors import InvalidConfig
from tests.config.conftest import worker_dict


def problems_of(obj: object) -> list[tuple[str, str]]:
    with pytest.raises(InvalidConfig) as err:
        parse_worker_config(obj)
    return err.value.problems


def paths_of(obj: object) -> list[str]:
    return [path for path, _ in problems_of(obj)]


def with_(field: str, value: object) -> dict[str, Any]:
    doc = worker_dict()
    if field.startswith("engine."):
        doc["engine"] = {field.removeprefix("engine."): value}
    else:
        doc[field] = value
    return doc


def test_the_seed_example_plus_a_listener_parses() -> None:
    assert parse_worker_config(worker_dict()) == WorkerConfig(
        namespace="operator-scheduler-1",
        worker_id="worker-1",
        data_dir="/var/lib/scheduled-worker/admissions",
        bearer_env="MCP_SCHEDULER_WORKER_TOKEN",
        admission_bearer_env="MCP_SCHEDULER_ADMISSION_TOKEN",
        admission_urls=(Origin("http", "127.0.0.1", 4501),),
        listen_addr=HostPort("127.0.0.1", 4701),
        engine=EngineSettings(4, 16, 65536, None, None),
        metrics_addr=None,
    )


@pytest.mark.parametrize(
    "field",
    [
        "namespace",
        "worker_id",
        "data_dir",
        "bearer_env",
        "admission_bearer_env",
        "admission_urls",
        "listen_addr",
    ],
)
def test_required_fields_are_reported_missing(field: str) -> None:
    doc = worker_dict()
    del doc[field]
    assert problems_of(doc) == [(field, "is required")]


def test_unknown_fields_are_rejected_at_top_level_and_in_engine() -> None:
    doc = worker_dict()
    doc["heap_store"] = "none"
    doc["engine"] = {"threads": 2}
    assert problems_of(doc) == [
        ("heap_store", "unknown field"),
        ("engine.threads", "unknown field"),
    ]


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [
        ("engine.max_concurrent", 1, 64),
        ("engine.max_queued", 0, 1024),
        ("engine.output_limit_bytes", 1024, 1048576),
        ("engine.heap_mb_max", 16, 4096),
        ("engine.timeout_seconds_max", 1, 86400),
        ("engine.executions_per_child", 1, 64),
    ],
)
def test_engine_settings_pass_at_both_ends_and_fail_one_beyond(
    field: str, low: int, high: int
) -> None:
    name = field.removeprefix("engine.")
    for ok in (low, high):
        assert getattr(parse_worker_config(with_(field, ok)).engine, name) == ok
    for bad in (low - 1, high + 1):
        assert problems_of(with_(field, bad)) == [
            (field, f"must be an integer from {low} to {high}, got {bad}")
        ]


def test_engine_ceilings_only_lower_the_granted_limits() -> None:
    engine = EngineSettings(heap_mb_max=64, timeout_seconds_max=30)
    assert engine.effective_heap_mb(128) == 64
    assert engine.effective_heap_mb(32) == 32
    assert engine.effective_timeout_seconds(600) == 30
    assert engine.effective_timeout_seconds(10) == 10
    assert EngineSettings().effective_heap_mb(4096) == 4096


def test_admission_urls_must_be_a_non_empty_list_of_distinct_origins() -> None:
    assert problems_of(with_("admission_urls", [])) == [
        ("admission_urls", "must hold from 1 to 16 items, got 0")
    ]
    assert problems_of(
        with_(
            "admission_urls",
            ["http://127.0.0.1:4501", "http://127.0.0.1:4502", "http://127.0.0.1:4501/"],
        )
    ) == [("admission_urls[2]", "is the same origin as item 0")]


def test_admission_urls_allow_sixteen_and_refuse_seventeen() -> None:
    urls = [f"http://127.0.0.1:{4500 + i}" for i in range(17)]
    assert len(parse_worker_config(with_("admission_urls", urls[:16])).admission_urls) == 16
    assert paths_of(with_("admission_urls", urls)) == ["admission_urls"]


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://runner-1.example.org:4501", True),
        ("http://[::1]:4501", True),
        ("http://runner-1.example.org:4501", False),
        ("https://u@r.example", False),
        ("https://r.example/admit", False),
        ("https://r.example?x", False),
        ("https://r.example#f", False),
    ],
)
def test_admission_urls_follow_the_origin_rules(url: str, ok: bool) -> None:
    doc = with_("admission_urls", ["http://127.0.0.1:4501", url])
    if ok:
        parse_worker_config(doc)
    else:
        assert paths_of(doc) == ["admission_urls[1]"]


@pytest.mark.parametrize(
    ("addr", "ok"),
    [
        ("127.0.0.1:9100", True),
        ("[::1]:9100", True),
        ("0.0.0.0:9100", False),
        ("localhost:9100", False),
        ("10.0.0.1:9100", False),
    ],
)
def test_metrics_addr_is_loopback_only(addr: str, ok: bool) -> None:
    doc = with_("metrics_addr", addr)
    if ok:
        assert parse_worker_config(doc).metrics_addr is not None
    else:
        assert paths_of(doc) == ["metrics_addr"]


def test_listen_addr_may_be_any_interface() -> None:
    assert parse_worker_config(with_("listen_addr", "0.0.0.0:4701")).listen_addr.port == 4701
    assert paths_of(with_("listen_addr", "0.0.0.0")) == ["listen_addr"]


def test_load_reads_the_environment_variable() -> None:
    environ = {WORKER_CONFIG_ENV: json.dumps(worker_dict())}
    assert load_worker_config(environ).worker_id == "worker-1"


def test_load_prefers_an_explicit_file(tmp_path: Path) -> None:
    doc = worker_dict()
    doc["worker_id"] = "from-file"
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    environ = {WORKER_CONFIG_ENV: json.dumps(worker_dict())}
    assert load_worker_config(environ, path).worker_id == "from-file"


@pytest.mark.parametrize("environ", [{}, {WORKER_CONFIG_ENV: ""}, {WORKER_CONFIG_ENV: "  "}])
def test_load_without_a_config_names_the_variable(environ: dict[str, str]) -> None:
    with pytest.raises(InvalidConfig) as err:
        load_worker_config(environ)
    assert err.value.problems[0][0] == WORKER_CONFIG_ENV


def test_load_reports_json_and_field_problems_from_the_environment() -> None:
    with pytest.raises(InvalidConfig, match="not valid JSON"):
        load_worker_config({WORKER_CONFIG_ENV: "{"})
    with pytest.raises(InvalidConfig, match="duplicate key"):
        load_worker_config({WORKER_CONFIG_ENV: '{"namespace": "a", "namespace": "b"}'})
    doc = worker_dict()
    doc["engine"] = {"max_concurrent": 65}
    with pytest.raises(InvalidConfig) as err:
        load_worker_config({WORKER_CONFIG_ENV: json.dumps(doc)})
    assert err.value.problems == [
        ("engine.max_concurrent", "must be an integer from 1 to 64, got 65")
    ]


def test_the_environment_value_may_be_one_mib_but_not_one_byte_more() -> None:
    at_limit = "{}" + " " * (1024 * 1024 - 2)
    with pytest.raises(InvalidConfig) as err:  # reaches validation: the size was accepted
        load_worker_config({WORKER_CONFIG_ENV: at_limit})
    assert ("namespace", "is required") in err.value.problems
    with pytest.raises(InvalidConfig, match="larger than 1048576 bytes"):
        load_worker_config({WORKER_CONFIG_ENV: at_limit + " "})
