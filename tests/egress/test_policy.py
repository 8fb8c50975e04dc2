"""The policy decider fails closed: allowed only on ``allow == true``, everything else denies
with a reason; a module that does not load is refused with its file and line."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.config.urls import parse_origin
from appliance.egress.policy import (
    REASON_BYTES_MAX,
    SAMPLE_INPUT,
    OpaPolicy,
    PolicyLoadError,
    PolicyRunner,
    RegoPolicy,
    interpret,
)
from tests.egress.fake_opa import FakeOpa
from tests.ports import free_ports

FILE = "/etc/appliance/egress.rego"


def load(source: str) -> RegoPolicy:
    return RegoPolicy.load(source, FILE)


def test_allowed_when_allow_is_true_and_the_reason_is_kept() -> None:
    policy = load(
        'package appliance.egress\nimport rego.v1\nallow if input.method == "GET"\n'
        'reason := "reads are fine" if allow\n'
    )
    decision = policy.evaluate({**SAMPLE_INPUT, "method": "GET"}, 1.0)
    assert decision.allowed and decision.reason == "reads are fine"


def test_denied_with_the_policys_reason() -> None:
    policy = load(
        "package appliance.egress\nimport rego.v1\ndefault allow := false\n"
        'allow if input.url_parsed.host == "api.example.com"\n'
        'reason := sprintf("host %s is not allowed", [input.url_parsed.host]) if not allow\n'
    )
    decision = policy.evaluate(SAMPLE_INPUT, 1.0)
    assert not decision.allowed
    assert decision.reason == "host example.invalid is not allowed"


def test_a_default_false_that_holds_denies() -> None:
    # The package document is queried (not data.appliance.egress.allow, which regopy 1.5.2
    # answers `undefined` for a `default allow := false`): the default is seen as false.
    policy = load(
        "package appliance.egress\nimport rego.v1\ndefault allow := false\n"
        'allow if input.method == "DELETE"\n'
    )
    decision = policy.evaluate(SAMPLE_INPUT, 1.0)
    assert decision == interpret({"allow": False})
    assert not decision.allowed and decision.reason == "the policy denied it"


def test_an_undefined_allow_denies() -> None:
    policy = load('package appliance.egress\nimport rego.v1\nallow if input.method == "DELETE"\n')
    decision = policy.evaluate(SAMPLE_INPUT, 1.0)
    assert not decision.allowed and "allow is undefined" in decision.reason


def test_an_evaluation_error_denies_naming_it() -> None:
    conflict = load(
        "package appliance.egress\nimport rego.v1\n"
        "allow := true if input.x\nallow := false if input.x\n"
    )
    decision = conflict.evaluate({**SAMPLE_INPUT, "x": True}, 1.0)
    assert not decision.allowed and decision.reason.startswith("policy error")


def test_a_module_that_fails_on_a_sample_request_is_refused_at_load() -> None:
    with pytest.raises(PolicyLoadError, match="evaluating a sample request failed"):
        load(
            "package appliance.egress\nimport rego.v1\n"
            "allow := true if input.method\nallow := false if input.method\n"
        )


def test_a_function_that_does_not_exist_denies_at_evaluation() -> None:
    policy = load("package appliance.egress\nimport rego.v1\nallow if no.such(input.x)\n")
    decision = policy.evaluate({**SAMPLE_INPUT, "x": 1}, 1.0)
    assert not decision.allowed
    assert "Function not found" in decision.reason


def test_a_non_boolean_allow_denies() -> None:
    policy = load('package appliance.egress\nallow := "yes"\n')
    decision = policy.evaluate(SAMPLE_INPUT, 1.0)
    assert not decision.allowed and "not a boolean" in decision.reason


@pytest.mark.parametrize(
    ("document", "allowed"),
    [
        ({"allow": True}, True),
        ({"allow": False}, False),
        ({}, False),
        (None, False),
        ({"allow": 1}, False),
        ({"allow": "true"}, False),
        ([True], False),
    ],
)
def test_only_exactly_true_allows(document: Any, allowed: bool) -> None:
    assert interpret(document).allowed is allowed


def test_text_beyond_ascii_compares_equal_to_the_modules_literals() -> None:
    # The input goes to rego-cpp as UTF-8: a \\u-escaped surrogate pair would not compare equal.
    policy = load(
        "package appliance.egress\nimport rego.v1\n"
        'allow if input.invocation.schedule_name == "résumé 😀"\n'
    )
    named = {**SAMPLE_INPUT, "invocation": {**SAMPLE_INPUT["invocation"], "schedule_name": ""}}
    named["invocation"]["schedule_name"] = "résumé 😀"
    assert policy.evaluate(named, 1.0).allowed
    named["invocation"]["schedule_name"] = "lone \ud83d surrogate"
    assert not policy.evaluate(named, 1.0).allowed  # evaluated (U+FFFD), not an encoding crash


def test_reasons_are_bounded_and_flattened() -> None:
    decision = interpret({"allow": False, "reason": "a\nb" + "x" * 2000})
    assert "\n" not in decision.reason
    assert len(decision.reason.encode()) <= REASON_BYTES_MAX


def test_a_syntax_error_names_the_file_line_and_column() -> None:
    source = (
        "package appliance.egress\n# é😀 comment\nimport rego.v1\n"
        "allow if {\n  input.x == == 1\n}\n"
    )
    with pytest.raises(PolicyLoadError) as caught:
        load(source)
    assert caught.value.line == 5 and caught.value.column == 11
    assert str(caught.value).startswith(f"{FILE}:5:11: ")


def test_a_module_of_another_package_is_refused() -> None:
    with pytest.raises(PolicyLoadError, match=r"must declare 'package appliance\.egress'"):
        load("package other\nallow := true\n")


def test_an_empty_module_is_refused() -> None:
    with pytest.raises(PolicyLoadError):
        load("")


def test_a_slow_decision_times_out_and_denies() -> None:
    # Slow only for an input that has `slow` (the sample request at load does not): about
    # 3 s of CPU left to finish on the evaluator thread.
    slow = load(
        "package appliance.egress\nimport rego.v1\n"
        "allow if {\n  input.slow\n  count([x | some x in numbers.range(1, 300000)]) > 0\n}\n"
    )
    runner = PolicyRunner(slow, timeout_ms=100)
    future, timeout_s = runner.start({**SAMPLE_INPUT, "slow": True}, budget_seconds=5.0)
    assert timeout_s == pytest.approx(0.1)
    future_done = threading.Event()
    future.add_done_callback(lambda _: future_done.set())
    future_done.wait(timeout_s)
    decision = PolicyRunner.outcome(future, timeout_s)
    assert not decision.allowed and "did not decide within 100 ms" in decision.reason


def test_a_module_too_slow_on_the_sample_request_is_refused_at_load() -> None:
    with pytest.raises(PolicyLoadError, match=r"took longer than 0\.05 s"):
        RegoPolicy.load(
            "package appliance.egress\nimport rego.v1\n"
            "allow if count([x | some x in numbers.range(1, 300000)]) > 0\n",
            FILE,
            trial_timeout_s=0.05,
        )


def test_the_wait_is_never_longer_than_the_requests_budget() -> None:
    runner = PolicyRunner(load("package appliance.egress\nallow := true\n"), timeout_ms=1000)
    future, timeout_s = runner.start(SAMPLE_INPUT, budget_seconds=0.25)
    assert timeout_s == pytest.approx(0.25)
    future.result(5)


def test_interpreters_are_per_thread_and_decisions_run_concurrently() -> None:
    policy = load('package appliance.egress\nimport rego.v1\nallow if input.method == "GET"\n')
    answers: list[bool] = []

    def ask(method: str) -> None:
        for _ in range(20):
            answers.append(policy.evaluate({**SAMPLE_INPUT, "method": method}, 1.0).allowed)

    threads = [threading.Thread(target=ask, args=(m,)) for m in ("GET", "POST") * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers.count(True) == 80 and answers.count(False) == 80


# -- an external OPA (a stand-in written in tests/egress/fake_opa.py) --


@pytest.fixture
def opa_factory() -> Iterator[Any]:
    made: list[FakeOpa] = []

    def make(*args: Any, **kwargs: Any) -> FakeOpa:
        made.append(FakeOpa(*args, **kwargs))
        return made[-1]

    yield make
    for opa in made:
        opa.close()


def test_opa_allows_through_the_data_api(opa_factory: Any) -> None:
    opa = opa_factory((200, {"result": {"allow": True, "reason": "fine"}}))
    decision = opa.policy().evaluate(SAMPLE_INPUT, 2.0)
    assert decision.allowed and decision.reason == "fine"
    assert opa.paths == ["/v1/data/appliance/egress"]
    assert opa.inputs == [SAMPLE_INPUT]


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ((200, {}), "undefined"),
        ((200, {"result": {"allow": False, "reason": "nope"}}), "nope"),
        ((500, {"code": "internal_error"}), "HTTP 500"),
        ((200, {"result": {"allow": "true"}}), "not a boolean"),
    ],
)
def test_opa_fails_closed(opa_factory: Any, answer: tuple[int, Any], says: str) -> None:
    decision = opa_factory(answer).policy().evaluate(SAMPLE_INPUT, 2.0)
    assert not decision.allowed and says in decision.reason


def test_an_unreachable_opa_denies() -> None:
    port = free_ports(1)[0]
    decision = OpaPolicy(parse_origin(f"http://127.0.0.1:{port}")).evaluate(SAMPLE_INPUT, 2.0)
    assert not decision.allowed and "did not answer" in decision.reason


def test_a_slow_opa_times_out_and_denies(opa_factory: Any) -> None:
    release = threading.Event()
    opa = opa_factory((200, {"result": {"allow": True}}), delay_event=release)
    try:
        decision = opa.policy().evaluate(SAMPLE_INPUT, 0.2)
    finally:
        release.set()
    assert not decision.allowed and "timed out" in decision.reason
