"""Egress: the policy-gated HTTP client behind a script's ``fetch()`` (issue 32, SPEC §12).

This package is the seam between the worker and the engine child. The worker prepares an
``EgressHandoff`` at start-up (config checked, the Rego policy loaded — a policy that does not
load stops the worker with its file and line —, credential values resolved from the
environment); the engine sends its document to each child **over the child's stdin** (it holds
credential values: never argv, never the environment, never a log line); the child builds one
``EgressGate`` from it and, per execution, opens an ``AttemptEgress``; each ``fetch()`` call of
the script is one ``Exchange``::

    # worker, start-up (InvalidConfig lists every problem; exit 2)
    handoff = prepare_egress(config.egress, environ, own_credentials=(bearer, admission))
    document = handoff.to_child_json()          # JSON-serializable; holds credential values

    # engine child, once (thread-safe, cheap to build: compiles the policy once)
    gate = EgressGate.from_child_json(document)

    # one execution
    attempt = gate.open_attempt(
        EgressInvocation.from_scheduled(run_request["scheduled"]),
        deadline_monotonic=time.monotonic() + timeout_seconds,  # no request outlives it
        on_record=send_record,  # optional: each request's record as soon as it is final
    )
    # one fetch() call; call prepare() in the script's call order, on the JS thread: it fixes
    # n, the ordinal in Idempotency-Key. No I/O; it never raises.
    exchange = attempt.prepare(FetchRequest(url, method, headers, body, redirect))
    response = exchange.run()   # blocking, once, on any one thread: FetchResponse or FetchFailed
    exchange.abort()            # any thread, idempotent (AbortController.abort())
    # the execution ended (completed, failed, timed out, cancelled, out of memory)
    confirmed = attempt.close(wait_seconds)  # aborts what is in flight; True once every run()
                                             # returned and every socket it opened is closed
    report = attempt.report()   # the "egress" document (below)

**Failures.** ``run()`` raises ``FetchFailed`` (``kind``, ``message``: safe to show to the
script, to log and to store — never a credential value). The engine rejects the script's promise
with ``TypeError(message)``; only a ``FetchAborted`` caused by the script's own ``AbortSignal``
becomes an ``AbortError``. ``EgressDenied.reason`` is the policy's reason (the message names it).

**What the gate does for every request** (the rules live in the modules named):
- validates method, URL (``http:``/``https:`` only), headers and body size (target.py,
  headers.py); a script may not set ``Host``, framing headers, ``Appliance-Invocation``,
  ``Appliance-Ownership-Epoch`` or a header a matching credential sets; it may replace
  ``Idempotency-Key``;
- resolves the host once and gives the policy the addresses; connects only to an address the
  policy saw (connection.py: no DNS rebinding; TLS SNI and certificate checks stay on the host
  name); nothing is taken from the environment (no proxies, no .netrc, no SSLKEYLOGFILE);
- asks the policy (policy.py) with the input documented in docs/worker.md — headers as sent,
  lower-case names, before credentials; a credential only by name — and fails closed: an
  undefined result, an error or a timeout denies with a reason;
- attaches credentials (credentials.py) only to allowed requests whose origin matches exactly
  and whose path starts with the credential's ``path_prefix`` at a segment boundary; re-checked
  on every redirect hop (followed only with ``redirect: "follow"``, each hop asked again);
- always sends ``Idempotency-Key: <namespace>/<schedule_id>/<occurrence_id>/<n>``,
  ``Appliance-Invocation: <namespace>/<schedule_id>/<occurrence_id>/<attempt>`` and
  ``Appliance-Ownership-Epoch: <epoch>``;
- bounds everything: ``max_requests`` per attempt (each redirect hop is one more request),
  ``max_request_bytes``, ``max_response_bytes`` (a larger response fails; nothing is cut),
  ``request_timeout_ms`` never past the attempt's deadline, ``policy_timeout_ms``;
- refuses a response that echoes a credential value it attached (a plain echo endpoint);
- writes one record per request (record.py).

**The report document** — ``"egress"`` in the engine's ``done`` frame, in
``ExecutionReport.egress``, in the worker store's outcome, in ``executions/{id}`` and in the
runner's output and history (docs/protocol.md)::

    {"requests": [
        {"n": 1, "hop": 0, "method": "POST", "url": "https://api.example.com/hooks/x",
         "decision": "allow", "reason": null, "credentials": ["HOOK_TOKEN"],
         "address": "93.184.216.34", "status": 200, "error": null,
         "request_bytes": 17, "response_bytes": 2, "ms": 41}],
     "over_limit": 0, "records_dropped": 0}

``url`` is origin and path, never the query; ``decision`` is ``allow``, ``deny`` or
``refused`` (the gate refused it before asking the policy); ``over_limit`` counts calls refused
because ``max_requests`` was spent (they have no record). At most ``max_requests`` records, each
field bounded, and at most 32 KiB of them (``records_dropped`` counts the ones past that).
``on_record`` receives exactly the records the report keeps.
"""

from __future__ import annotations

from appliance.egress.model import (
    EgressDenied,
    EgressInvocation,
    FetchAborted,
    FetchFailed,
    FetchRequest,
    FetchResponse,
)

__all__ = [
    "EgressDenied",
    "EgressInvocation",
    "FetchAborted",
    "FetchFailed",
    "FetchRequest",
    "FetchResponse",
]
