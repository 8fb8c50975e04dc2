"""Any JSON value is either accepted or refused with field problems; nothing else escapes."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.config.runner import parse_runner_config
from appliance.config.worker import parse_worker_config
from appliance.core.definition import DefinitionProblems, parse_definition
from appliance.core.errors import InvalidConfig
from appliance.core.limits import Limits
from tests.config.conftest import SEED_DEFINITION, runner_dict, worker_dict

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(
        [
            "* * * * *",
            "99999999999999999999 * * * *",
            "0 0 31 2 *",
            "UTC",
            "Etc/GMT+5",
            "Europe/Berlin",
            "http://127.0.0.1",
            "127.0.0.1:1",
            "Skip",
            "\ud800",
        ]
    ),
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


def _mutations(base: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.tuples(st.sampled_from(_paths(base)), _json).map(lambda pv: _replace(base, *pv))


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _mutations(SEED_DEFINITION)))
def test_a_definition_is_parsed_or_refused_with_paths(doc: Any) -> None:
    try:
        parse_definition(doc, Limits())
    except DefinitionProblems as err:
        assert err.problems and all(path and message for path, message in err.problems)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _mutations(runner_dict())))
def test_a_runner_config_is_parsed_or_refused_with_paths(doc: Any) -> None:
    try:
        parse_runner_config(doc)
    except InvalidConfig as err:
        assert err.problems and all(path and message for path, message in err.problems)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_json, _mutations(worker_dict())))
def test_a_worker_config_is_parsed_or_refused_with_paths(doc: Any) -> None:
    try:
        parse_worker_config(doc)
    except InvalidConfig as err:
        assert err.problems and all(path and message for path, message in err.problems)
