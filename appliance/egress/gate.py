"""The gate an engine child holds, and one attempt's share of it.

Theory of operation. ``EgressGate`` is built once per engine child from the worker's handoff
(handoff.py): the settings, the compiled policy, the credentials and the TLS context. It owns
the threads every attempt shares — the policy evaluators, the resolvers and the deadline thread —
none of which ever holds a connection to a target or runs a script's code. It is safe to use
from several threads at once.

``AttemptEgress`` is one execution's view: its invocation (for the idempotency and fencing
headers and the policy input), its deadline, the ordinal of each ``fetch()`` call (assigned by
``prepare()`` in call order, so ``Idempotency-Key``'s ``n`` follows the script's calls), its
budget of ``max_requests`` (each redirect hop takes one more) and its records. ``close()`` is the
stop: no new exchange starts, every one in flight is aborted, and it returns True only once each
has returned from ``run()`` with every socket it opened closed — the part of SPEC §12's
confirmed stop that belongs to egress.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from appliance.config.egress import EgressSettings
from appliance.egress.connection import Resolver, system_resolver, tls_context
from appliance.egress.credentials import EgressCredential
from appliance.egress.deadlines import Deadlines
from appliance.egress.exchange import Exchange
from appliance.egress.handoff import EgressHandoff
from appliance.egress.model import KIND_ABORTED, EgressInvocation, FetchRequest
from appliance.egress.policy import OpaPolicy, Policy, PolicyRunner, RegoPolicy
from appliance.egress.record import REPORT_BYTES_MAX, record_bytes, report_document

RESOLVERS_MAX: Final = 8

RecordSink = Callable[[dict[str, Any]], None]


class EgressGate:
    """Everything an engine child needs to run fetches (module doc)."""

    def __init__(
        self,
        settings: EgressSettings,
        policy: Policy,
        credentials: tuple[EgressCredential, ...] = (),
        *,
        ca_pem: str | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.settings = settings
        self.credentials = credentials
        self.tls_context = tls_context(ca_pem)
        self.resolver = resolver
        self.policy_runner = PolicyRunner(policy, settings.policy_timeout_ms)
        self.resolve_pool = ThreadPoolExecutor(RESOLVERS_MAX, thread_name_prefix="egress-resolve")
        self.deadlines = Deadlines()

    @classmethod
    def from_handoff(
        cls, handoff: EgressHandoff, *, resolver: Resolver = system_resolver
    ) -> EgressGate:
        policy: Policy
        if handoff.policy_source is not None:
            policy = RegoPolicy.load(handoff.policy_source, handoff.settings.policy_file or "")
        else:
            if handoff.settings.opa_url is None:
                raise ValueError("an egress handoff names neither a policy nor an OPA server")
            policy = OpaPolicy(handoff.settings.opa_url, tls_context(handoff.ca_pem))
        return cls(
            handoff.settings,
            policy,
            handoff.credentials,
            ca_pem=handoff.ca_pem,
            resolver=resolver,
        )

    @classmethod
    def from_child_json(
        cls, document: Mapping[str, Any], *, resolver: Resolver = system_resolver
    ) -> EgressGate:
        """In the engine child, from ``EgressHandoff.to_child_json()`` sent over stdin."""
        return cls.from_handoff(EgressHandoff.from_child_json(document), resolver=resolver)

    def open_attempt(
        self,
        invocation: EgressInvocation,
        deadline_monotonic: float,
        on_record: RecordSink | None = None,
    ) -> AttemptEgress:
        return AttemptEgress(self, invocation, deadline_monotonic, on_record)

    def close(self) -> None:
        """Stop the shared pools (a child about to exit); attempts must be closed first."""
        self.policy_runner.close()
        self.resolve_pool.shutdown(wait=False, cancel_futures=True)


class AttemptEgress:
    """One execution's fetches (module doc). Every method is safe from any thread."""

    def __init__(
        self,
        gate: EgressGate,
        invocation: EgressInvocation,
        deadline_monotonic: float,
        on_record: RecordSink | None,
    ) -> None:
        self.gate = gate
        self.invocation = invocation
        self.deadline = deadline_monotonic
        self._on_record = on_record
        self._lock = threading.Lock()
        self._next_ordinal = 1
        self._slots_left = gate.settings.max_requests
        self._over_limit = 0
        self._records: list[dict[str, Any]] = []
        self._records_bytes = 0
        self._records_dropped = 0
        self._exchanges: set[Exchange] = set()
        self._closed = False

    def prepare(self, request: FetchRequest) -> Exchange:
        """The exchange for the script's next fetch() call: no I/O, never raises."""
        with self._lock:
            ordinal = self._next_ordinal
            self._next_ordinal += 1
            has_slot = self._take_slot_locked()
            exchange = Exchange(self, ordinal, request, has_slot)
            if not self._closed:
                self._exchanges.add(exchange)
                return exchange
        exchange.abort(KIND_ABORTED, "the attempt has ended")
        return exchange

    def close(self, wait_seconds: float) -> bool:
        """Refuse new exchanges, abort those in flight, wait for them: True when confirmed."""
        with self._lock:
            self._closed = True
            pending = list(self._exchanges)
        for exchange in pending:
            exchange.abort(KIND_ABORTED, "the attempt has ended")
        deadline = time.monotonic() + wait_seconds
        confirmed = True
        for exchange in pending:
            finished = exchange.wait_finished(deadline - time.monotonic())
            confirmed = confirmed and finished and exchange.sockets_open == 0
        return confirmed

    def report(self) -> dict[str, Any]:
        """The ``egress`` report document (appliance/egress/__init__.py)."""
        with self._lock:
            return report_document(self._records, self._over_limit, self._records_dropped)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._exchanges)

    # -- for the exchanges --

    def take_slot(self) -> bool:
        with self._lock:
            return self._take_slot_locked()

    def _take_slot_locked(self) -> bool:
        if self._slots_left <= 0:
            return False
        self._slots_left -= 1
        return True

    def count_over_limit(self) -> None:
        with self._lock:
            self._over_limit += 1

    def over_limit_message(self) -> str:
        return (
            f"at most {self.gate.settings.max_requests} requests per attempt (egress.max_requests)"
        )

    def add_record(self, record: dict[str, Any]) -> None:
        size = record_bytes(record)
        with self._lock:
            if self._records_bytes + size > REPORT_BYTES_MAX:
                self._records_dropped += 1
                return
            self._records_bytes += size
            self._records.append(record)
        if self._on_record is not None:
            self._on_record(record)

    def exchange_finished(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.discard(exchange)
