"""docs/configuration.md documents every field that the rule tables declare."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.runner import RUNNER_RULE
from appliance.config.worker import WORKER_RULE
from appliance.core.definition import definition_rule
from appliance.core.limits import LIMITS_RULE, Limits
from appliance.core.schema import field_paths

DOC = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text("utf-8")

# The runner's `limits.*` fields are the Limits table's rows (documented once, by bare name).
DECLARED = sorted(
    {path for path in field_paths(RUNNER_RULE) if not path.startswith("limits.")}
    | set(field_paths(WORKER_RULE))
    | set(field_paths(definition_rule(Limits())))
    | set(field_paths(LIMITS_RULE))
    | {"policy.missed.CatchUp.cap"}
)


def test_the_rule_tables_declare_the_expected_number_of_fields() -> None:
    # A guard that field_paths really walks the tables (runner 31, worker 14, ...).
    assert len(DECLARED) > 50


@pytest.mark.parametrize("path", DECLARED)
def test_every_declared_field_has_a_row_in_the_configuration_reference(path: str) -> None:
    assert f"| `{path}` |" in DOC
