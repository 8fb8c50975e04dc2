"""The policy that decides every egress request: embedded Rego (regopy) or an external OPA.

Theory of operation. Both kinds answer one question — the document ``data.appliance.egress``
for an input (docs/worker.md lists its fields) — and one function (``interpret``) turns that
document into a ``Decision``, so they fail closed the same way:

- ``allow`` exactly ``true`` allows; ``reason``, when a string, is kept (bounded);
- ``allow`` false, missing or anything but a boolean denies, with the policy's ``reason`` or a
  reason saying what was wrong. An undefined package denies too. regopy 1.5.2 answers
  ``undefined`` rather than ``false`` for ``default allow := false`` when no rule holds, which is
  why "missing" must deny rather than be an error;
- an evaluation error (a conflict between rules, a function that does not exist) denies with the
  error's message; a decision that takes longer than ``policy_timeout_ms`` (or what is left of
  the request's time) denies as well.

A Rego module is loaded at worker start-up (``RegoPolicy.load``): it must parse, declare
``package appliance.egress`` and evaluate a sample input without error, or the worker does not
start; the error names the file, line and column (rego-cpp reports byte offsets, turned into
lines here). It is compiled again in each engine child from the same text.

Evaluation runs on a small pool of threads (``EVALUATORS_MAX``). Each decision borrows a
compiled interpreter and bundle no other thread is using (a regopy interpreter is not safe to
share between threads; building one costs a few milliseconds, so they are kept, and the most
recently used is lent first, its memory still warm); a decision runs the bundle's plan rather
than compiling the query again. The caller waits for the answer abortably (exchange.py), so an
abort does not wait for a slow policy; a Rego evaluation cannot be interrupted, so one that
never ends keeps its pool thread — the pool is bounded, and decisions that find it busy time
out and deny. An external OPA is asked through its data API with urllib3 (no proxies, no
retries, no redirects; at most ``OPA_RESPONSE_BYTES_MAX`` read).
"""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appliance.config.urls import Origin
from appliance.engine.text import well_formed

POLICY_PACKAGE: Final = "appliance.egress"
POLICY_QUERY: Final = "data.appliance.egress"
POLICY_BINDING: Final = "decision"
OPA_DATA_PATH: Final = "/v1/data/appliance/egress"
POLICY_BYTES_MAX: Final = 1024 * 1024
REASON_BYTES_MAX: Final = 512
EVALUATORS_MAX: Final = 8
LOAD_TRIAL_TIMEOUT_S: Final = 10.0
OPA_RESPONSE_BYTES_MAX: Final = 64 * 1024
_PACKAGE_LINE: Final = re.compile(r"^\s*package\s+([A-Za-z0-9_.\"\[\]]+)\s*$", re.MULTILINE)
_ERROR_HEAD: Final = re.compile(r"\(error (\d+):")
_ERROR_MESSAGE: Final = re.compile(r"\(errormsg (\d+):")
_SPAN: Final = re.compile(r"\|(\d+)\|(\d+)")
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f]+")

# The input a module is tried with at load: it must evaluate without an error.
SAMPLE_INPUT: Final = {
    "method": "GET",
    "url": "https://example.invalid/",
    "url_parsed": {
        "scheme": "https",
        "host": "example.invalid",
        "port": 443,
        "path": "/",
        "query": "",
    },
    "headers": {"accept": "*/*"},
    "body_bytes": 0,
    "addresses": ["192.0.2.1"],
    "addresses_global": False,
    "credentials": [],
    "redirect": None,
    "invocation": {
        "namespace": "sample",
        "schedule_id": 1,
        "schedule_name": None,
        "occurrence_id": 1,
        "attempt": 1,
        "ownership_epoch": 1,
    },
}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str | None


class PolicyLoadError(Exception):
    """A policy that cannot be used; ``str()`` names the file and, when known, line:column."""

    def __init__(self, file: str, message: str, line: int | None = None, column: int | None = None):
        where = file if line is None else f"{file}:{line}:{column}"
        super().__init__(f"{where}: {message}")
        self.file, self.line, self.column, self.message = file, line, column, message


class Policy(Protocol):
    def evaluate(self, input_document: dict[str, Any], timeout_seconds: float) -> Decision:
        """Blocking; may take longer than the timeout (the caller stops waiting)."""
        ...  # pragma: no cover - protocol


def bounded_reason(text: str) -> str:
    """A reason as it may be shown, logged and stored: one line, at most REASON_BYTES_MAX."""
    flat = _UNPRINTABLE.sub(" ", text).strip()
    raw = flat.encode("utf-8", "replace")
    if len(raw) <= REASON_BYTES_MAX:
        return flat
    return raw[: REASON_BYTES_MAX - 3].decode("utf-8", "ignore") + "..."


def interpret(document: object) -> Decision:
    """The package document ``data.appliance.egress`` → a decision, failing closed."""
    if not isinstance(document, dict):
        return Decision(False, "the policy's result is undefined (package appliance.egress)")
    raw_reason = document.get("reason")
    reason = bounded_reason(raw_reason) if isinstance(raw_reason, str) and raw_reason else None
    allow = document.get("allow")
    if allow is True:
        return Decision(True, reason)
    if allow is False:
        return Decision(False, reason or "the policy denied it")
    if allow is None:
        return Decision(False, reason or "the policy did not allow it (allow is undefined)")
    return Decision(False, reason or "the policy's allow is not a boolean")


class RegoPolicy:
    """A Rego module evaluated in this process (module doc)."""

    def __init__(self, source: str, file: str) -> None:
        self.source = source
        self.file = file
        # Compiled interpreters not in use, the most recently returned last: the next decision
        # takes the warmest one (its memory still in the CPU's caches), whichever thread asks.
        self._idle: list[tuple[Any, Any]] = []
        self._idle_lock = threading.Lock()

    @classmethod
    def load(
        cls, source: str, file: str, *, trial_timeout_s: float = LOAD_TRIAL_TIMEOUT_S
    ) -> RegoPolicy:
        """Compile and try ``source``; PolicyLoadError with file and line when it cannot work."""
        if len(source.encode("utf-8")) > POLICY_BYTES_MAX:
            raise PolicyLoadError(file, f"is larger than {POLICY_BYTES_MAX} bytes")
        declared = _PACKAGE_LINE.search(source)
        if declared is None or declared.group(1) != POLICY_PACKAGE:
            found = "none" if declared is None else declared.group(1)
            line = None if declared is None else source.count("\n", 0, declared.start()) + 1
            raise PolicyLoadError(
                file,
                f"the module must declare 'package {POLICY_PACKAGE}' (found {found})",
                line,
                None if line is None else 1,
            )
        policy = cls(source, file)
        policy._interpreter()  # raises PolicyLoadError with the position
        # The trial runs on a thread of its own so that a module that never ends cannot hang
        # the worker's start-up; it is left to finish, the worker does not start.
        trial: Future[tuple[bool, str]] = Future()
        threading.Thread(
            target=lambda: _settle(trial, policy._query, SAMPLE_INPUT),
            name="egress-policy-trial",
            daemon=True,
        ).start()
        try:
            ok, text = trial.result(trial_timeout_s)
        except TimeoutError:
            raise PolicyLoadError(
                file, f"evaluating a sample request took longer than {trial_timeout_s:g} s"
            ) from None
        if not ok or text.startswith("("):
            raise PolicyLoadError(
                file, f"evaluating a sample request failed: {_error_message(text)}"
            )
        return policy

    def evaluate(self, input_document: dict[str, Any], timeout_seconds: float) -> Decision:
        try:
            ok, text = self._query(input_document)
        except PolicyLoadError as exc:  # cannot happen after load(); fail closed anyway
            return Decision(False, bounded_reason(f"the policy cannot be evaluated: {exc}"))
        if not ok or text.startswith("("):
            return Decision(False, bounded_reason(f"policy error: {_error_message(text)}"))
        if text == "undefined":
            return interpret(None)
        try:
            document = json.loads(text)["bindings"][POLICY_BINDING]
        except (ValueError, KeyError, TypeError):
            return Decision(False, "the policy's result could not be read")
        return interpret(document)

    def _interpreter(self) -> tuple[Any, Any]:
        """An interpreter no other thread is using (a regopy interpreter is not thread-safe)."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return _compile(self.source, self.file)

    def _query(self, input_document: dict[str, Any]) -> tuple[bool, str]:
        from regopy.rego_shared import (
            rego_bundle_query,
            rego_free_output,
            rego_output_ok,
            rego_output_string,
        )

        compiled = self._interpreter()
        interpreter, bundle = compiled
        interpreter.set_input_term(input_term(input_document))
        output = rego_bundle_query(interpreter._impl, bundle._impl)
        try:
            return bool(rego_output_ok(output)), str(rego_output_string(output))
        finally:
            rego_free_output(output)
            with self._idle_lock:
                self._idle.append(compiled)


def input_term(document: dict[str, Any]) -> str:
    """The input as Rego reads it: UTF-8 JSON. Not ``\\u`` escapes: rego-cpp keeps a surrogate
    pair escaped that way as two code points, so "😀" in the input would not equal "😀" in the
    module. A lone surrogate (possible in text from JavaScript) becomes U+FFFD first."""
    return well_formed(json.dumps(document, ensure_ascii=False))


def _settle(future: Future[Any], work: Any, *args: Any) -> None:
    try:
        future.set_result(work(*args))
    except BaseException as exc:
        future.set_exception(exc)


def _compile(source: str, file: str) -> tuple[Any, Any]:
    """An interpreter holding the module, and the bundle (the compiled plan) of the query.

    A bundle is what makes a decision cheap: ``query`` compiles the module again every time
    (about 7 ms for the example policy here), a bundle query runs the plan (about 0.6 ms)."""
    from regopy import Interpreter, LogLevel, RegoError

    interpreter = Interpreter()
    interpreter.log_level = LogLevel.NONE  # errors come back as values; nothing on stdout
    try:
        interpreter.add_module(file, source)
        bundle = interpreter.build(f"{POLICY_BINDING} := {POLICY_QUERY}")
    except RegoError as exc:
        raise _load_error(file, source, str(exc)) from None
    return interpreter, bundle


def _load_error(file: str, source: str, text: str) -> PolicyLoadError:
    """The first error of rego-cpp's error sequence, with its byte offset made line:column."""
    message = _error_message(text)
    head = _ERROR_HEAD.search(text)
    if head is None:
        return PolicyLoadError(file, message)
    name_end = head.end() + int(head.group(1))
    span = _SPAN.match(text, name_end)
    if span is None:
        return PolicyLoadError(file, message)
    before = source.encode("utf-8")[: int(span.group(1))].decode("utf-8", "replace")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return PolicyLoadError(file, message, line, column)


def _error_message(text: str) -> str:
    found = _ERROR_MESSAGE.search(text)
    if found is None:
        return bounded_reason(text) if text and text != "<error>" else "evaluation error"
    start = found.end()
    return bounded_reason(text[start : start + int(found.group(1))])


class OpaPolicy:
    """An external OPA server's data API (the seed engine's ``--opa-url``)."""

    def __init__(self, url: Origin, ssl_context: Any = None) -> None:
        self.url = url
        self._ssl_context = ssl_context

    def evaluate(self, input_document: dict[str, Any], timeout_seconds: float) -> Decision:
        import urllib3

        body = json.dumps({"input": input_document}).encode("utf-8")
        pool_class = (
            urllib3.HTTPSConnectionPool
            if self.url.scheme == "https"
            else urllib3.HTTPConnectionPool
        )
        extra = {"ssl_context": self._ssl_context} if self.url.scheme == "https" else {}
        pool = pool_class(
            self.url.host,
            self.url.port,
            timeout=urllib3.Timeout(total=max(timeout_seconds, 0.001)),
            retries=False,
            maxsize=1,
            **extra,
        )
        try:
            response = pool.urlopen(
                "POST",
                OPA_DATA_PATH,
                body=body,
                headers={"content-type": "application/json", "accept": "application/json"},
                redirect=False,
                preload_content=False,
            )
            try:
                data = response.read(OPA_RESPONSE_BYTES_MAX + 1)
            finally:
                response.release_conn()
        except Exception as exc:  # any failure to get an answer denies
            return Decision(False, bounded_reason(f"the OPA server did not answer: {_kind(exc)}"))
        finally:
            pool.close()
        if response.status != 200:
            return Decision(False, f"the OPA server answered HTTP {response.status}")
        if len(data) > OPA_RESPONSE_BYTES_MAX:
            return Decision(False, f"the OPA answer exceeds {OPA_RESPONSE_BYTES_MAX} bytes")
        try:
            answer = json.loads(data)
        except ValueError:
            return Decision(False, "the OPA answer is not JSON")
        return interpret(answer.get("result") if isinstance(answer, dict) else None)


def _kind(exc: BaseException) -> str:
    """An exception as a short text without URLs (their queries are not ours to log)."""
    name = type(exc).__name__
    if "Timeout" in name or "timed out" in str(exc):
        return "timed out"
    if "NewConnectionError" in name or "Connection refused" in str(exc):
        return "connection refused"
    return name


class PolicyRunner:
    """Runs decisions on the bounded evaluator pool; the caller waits (abortably) for each."""

    def __init__(self, policy: Policy, timeout_ms: int) -> None:
        self.policy = policy
        self.timeout_ms = timeout_ms
        self._pool = ThreadPoolExecutor(EVALUATORS_MAX, thread_name_prefix="egress-policy")

    def start(
        self, input_document: dict[str, Any], budget_seconds: float
    ) -> tuple[Future[Decision], float]:
        """A decision under way, and how long to wait for it (the policy timeout, never more
        than the request's remaining budget)."""
        timeout_seconds = max(0.0, min(self.timeout_ms / 1000, budget_seconds))
        future = self._pool.submit(self.policy.evaluate, input_document, timeout_seconds)
        return future, timeout_seconds

    @staticmethod
    def outcome(future: Future[Decision], timeout_seconds: float) -> Decision:
        """After the wait: the decision, or a denial when it did not come in time (fail
        closed)."""
        if not future.done():
            future.cancel()
            return Decision(
                False, f"the policy did not decide within {round(timeout_seconds * 1000)} ms"
            )
        try:
            return future.result()
        except Exception as exc:  # a policy that raises denies
            return Decision(False, bounded_reason(f"policy error: {type(exc).__name__}"))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
