"""SIGHUP leaves the egress policy alone; the report reaches every view of an attempt."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from appliance.cli.admin_ops import egress_lines, render_output
from appliance.core.errors import InvalidConfig
from appliance.egress.record import make_record
from appliance.engine.model import ExecutionReport, ExecutionStatus
from appliance.metrics.attempt_report import attempt_report
from appliance.worker.launch import outcome_document
from appliance.worker.reload import reloaded_admission_urls
from appliance.worker.runtime import load_settings
from tests.egress.conftest import ALLOW_ALL

TOKENS = {"W_TOKEN": "worker-token-abcdef", "A_TOKEN": "admission-token-abcdef"}


def write_config(folder: Path, **egress: object) -> Path:
    document = {
        "namespace": "ops",
        "worker_id": "w1",
        "data_dir": str(folder / "data"),
        "bearer_env": "W_TOKEN",
        "admission_bearer_env": "A_TOKEN",
        "admission_urls": ["http://127.0.0.1:4501"],
        "listen_addr": "127.0.0.1:4701",
        "egress": {"policy_file": "egress.rego", **egress},
    }
    path = folder / "worker.json"
    path.write_text(json.dumps(document))
    return path


def test_sighup_does_not_read_the_policy_so_a_broken_file_cannot_block_a_reload(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path)
    (tmp_path / "egress.rego").write_text(ALLOW_ALL)
    at_start = load_settings(TOKENS, str(path))
    assert at_start.egress is not None and at_start.egress.policy_source == ALLOW_ALL
    (tmp_path / "egress.rego").write_text("package appliance.egress\nallow := \n")
    with pytest.raises(InvalidConfig, match=r"egress\.policy_file"):
        load_settings(TOKENS, str(path))  # what a restart would say
    on_sighup = load_settings(TOKENS, str(path), with_egress=False)
    assert on_sighup.egress is None
    assert reloaded_admission_urls(at_start.config, on_sighup.config) == (
        at_start.config.admission_urls
    )


def test_a_changed_egress_section_is_refused_on_sighup(tmp_path: Path) -> None:
    (tmp_path / "egress.rego").write_text(ALLOW_ALL)
    before = load_settings(TOKENS, str(write_config(tmp_path))).config
    after = load_settings(TOKENS, str(write_config(tmp_path, max_requests=5)), with_egress=False)
    with pytest.raises(InvalidConfig) as caught:
        reloaded_admission_urls(before, after.config)
    assert [path for path, _ in caught.value.problems] == ["egress"]


REPORT = {
    "requests": [
        make_record(
            n=1,
            hop=0,
            method="POST",
            url="https://hooks.example.com/hooks/x",
            decision="allow",
            credentials=["HOOK_TOKEN"],
            address="93.184.216.34",
            status=200,
            request_bytes=17,
            response_bytes=2,
            ms=41,
        ),
        make_record(
            n=2,
            hop=0,
            method="GET",
            url="http://169.254.169.254/latest",
            decision="deny",
            reason="only https URLs may be fetched",
            ms=1,
        ),
    ],
    "over_limit": 1,
    "records_dropped": 0,
}


def test_the_report_is_stored_with_the_outcome_and_shown_by_admin_output() -> None:
    report = ExecutionReport("s3-o17-a1", ExecutionStatus.COMPLETED, egress=REPORT)
    stored = outcome_document(report)
    assert stored["egress"] == REPORT
    assert json.loads(json.dumps(stored))["egress"] == REPORT  # what the store keeps
    view = attempt_report({"status": "completed", "egress": stored["egress"]})
    assert view["egress"] == REPORT
    text = render_output({**view, "occurrence_id": 17, "attempt": 1, "execution_id": "s3-o17-a1"})
    assert "-- egress: 2 request(s)" in text
    assert (
        "   1 POST https://hooks.example.com/hooks/x with HOOK_TOKEN: allow; HTTP 200; "
        "17/2 bytes, 41 ms" in text
    )
    assert "2 GET http://169.254.169.254/latest: deny (only https URLs may be fetched)" in text
    assert "   1 more refused past egress.max_requests" in text


def test_no_egress_shows_nothing() -> None:
    assert egress_lines(None) == []
    assert attempt_report({"status": "completed"})["egress"] is None
    stored = outcome_document(ExecutionReport("s3-o17-a1", ExecutionStatus.COMPLETED))
    assert stored["egress"] is None


def test_a_report_from_a_child_is_bounded_before_it_is_stored() -> None:
    hostile = dataclasses.replace(
        ExecutionReport("s3-o17-a1", ExecutionStatus.COMPLETED),
        egress={"requests": [{"url": "x" * 100_000, "decision": "maybe"}], "over_limit": -3},
    )
    stored = outcome_document(hostile)["egress"]
    assert len(stored["requests"][0]["url"]) <= 256
    assert stored["requests"][0]["decision"] == "refused" and stored["over_limit"] == 0
