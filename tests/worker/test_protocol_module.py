"""One home for protocol 1 (appliance/protocol/v1.py): every answer of either end is listed there.

A code one end sends and the protocol module does not list would be a copy of the protocol living
elsewhere again; these tests read the sources of both ends and compare.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from appliance.core.runner_errors import ADMISSION_REFUSAL_CODES
from appliance.protocol import v1
from appliance.worker import launch, routes

ROOT = Path(__file__).resolve().parents[2] / "appliance"


def _error_codes(path: Path) -> set[str]:
    """The codes of ``_error(status, "code", ...)`` calls in one module."""
    codes = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_error"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            codes.add(node.args[1].value)
    return codes


def test_every_error_the_launch_core_answers_is_a_protocol_code() -> None:
    codes = _error_codes(ROOT / "worker" / "launch.py")
    listed = {
        *v1.EXEC_REFUSED_CODES,
        *v1.EXEC_STOPPED_CODES,
        v1.OBSERVE_UNKNOWN_CODE,
        v1.RETIRED_CODE,
    }
    assert codes and codes <= listed, codes - listed
    assert {"pool_full", "fenced", "grant_expired", "submit_failed"} <= codes


def test_every_admission_refusal_of_the_core_is_a_protocol_code() -> None:
    assert set(v1.ADMIT_REFUSED_CODES) == ADMISSION_REFUSAL_CODES


def test_both_ends_use_the_protocol_paths() -> None:
    assert routes.EXEC_PATH == v1.EXEC_PATH == "/api/scheduled/v1/exec"
    assert routes.CANCEL_PATH == v1.CANCEL_PATH
    assert routes.EXECUTIONS_PATH == v1.EXECUTIONS_PREFIX + "{execution_id}"
    from appliance.runner import admission, worker_client
    from appliance.worker import admission as worker_admission

    assert worker_client.EXEC_PATH == v1.EXEC_PATH
    assert worker_client.EXECUTIONS_PATH == v1.EXECUTIONS_PREFIX
    assert admission.ADMIT_PATH == worker_admission.ADMIT_PATH == v1.ADMIT_PATH


def test_the_execution_id_has_one_shape_for_both_ends() -> None:
    from appliance.owner.binding import execution_id

    invocation = v1.Invocation("ns", v1.ID_MAX, 2, 3)
    assert execution_id(v1.ID_MAX, 2, 3) == v1.execution_id(invocation) == f"s{v1.ID_MAX}-o2-a3"
    assert v1.invocation_of(v1.execution_id(invocation), "ns") == invocation
    assert v1.invocation_of(f"s{v1.ID_MAX + 1}-o2-a3", "ns") is None


def test_no_copy_of_the_protocol_types_is_left() -> None:
    # Binding, Authority and Invocation are defined once; every other module imports them.
    defined = re.compile(r"^class (Binding|Authority|Invocation)\b", re.MULTILINE)
    homes = [
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*.py")
        if defined.search(path.read_text(encoding="utf-8"))
    ]
    assert homes == ["protocol/v1.py"]
    assert launch.Invocation is v1.Invocation


def test_the_retention_floor_parameter_is_an_id_at_the_boundaries() -> None:
    import pytest

    assert v1.parse_retained_through(None) is None
    assert v1.parse_retained_through("0") == 0
    assert v1.parse_retained_through(str(v1.ID_MAX)) == v1.ID_MAX
    for bad in (str(v1.ID_MAX + 1), "-1", "01", "", "1e3", " 1", "x"):
        with pytest.raises(ValueError, match="retained_through"):
            v1.parse_retained_through(bad)
    assert v1.retained_through_text(v1.ID_MAX) == f"retained_through={v1.ID_MAX}"
    with pytest.raises(ValueError, match="retained_through"):
        v1.retained_through_text(v1.ID_MAX + 1)
