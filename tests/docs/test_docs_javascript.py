"""The JavaScript example of docs/external-effects.md runs under the engine's own harness."""

from __future__ import annotations

import json
import re

from py_mini_racer import MiniRacer

from appliance.engine.harness import HARNESS_JS

from . import doccheck

PAGE = doccheck.DOCS / "external-effects.md"
SCHEDULED = {
    "namespace": "prod-scheduler",
    "schedule_id": 3,
    "schedule_name": "daily-report",
    "occurrence_id": 17,
    "attempt": 2,
    "ownership_epoch": 4,
    "due_time": "2026-11-29T20:00:00Z",
}


def _script_examples() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(r"```javascript\n(.*?)```", text, re.S)


def _run(code: str, scheduled: dict[str, object]) -> dict[str, object]:
    context = MiniRacer()
    harness = context.eval(HARNESS_JS)
    harness["install"](json.dumps(scheduled), 65536)
    outcome = json.loads(harness["run"](code))["outcome"]  # a take record (harness.py)
    assert outcome["ok"] is True, outcome
    return json.loads(outcome["json"])


def test_the_idempotency_example_keys_effects_by_occurrence_and_fences_by_epoch() -> None:
    script = _script_examples()[0]
    result = _run(script, SCHEDULED)
    assert result["idempotency_key"] == "prod-scheduler/3/17"
    assert result["fencing_epoch"] == 4
    assert result["day"] == "2026-11-29"
    assert len(result["lines"]) == 3


def test_a_retry_of_the_same_occurrence_produces_the_same_key() -> None:
    script = _script_examples()[0]
    first = _run(script, {**SCHEDULED, "attempt": 1})
    retry = _run(script, {**SCHEDULED, "attempt": 2, "ownership_epoch": 5})
    other = _run(script, {**SCHEDULED, "occurrence_id": 18})
    assert first["idempotency_key"] == retry["idempotency_key"]
    assert other["idempotency_key"] != first["idempotency_key"]
