"""Values that cross the egress seam (appliance/egress/__init__.py has the contract).

Everything here is plain data: frozen dataclasses and exceptions whose messages are safe to hand
to a script, to log and to store — no credential value is ever put into one (the gate builds
them; credentials are attached only to the bytes that go onto the wire).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

REDIRECT_MANUAL: Final = "manual"  # the default: a 3xx is handed to the script as it is
REDIRECT_FOLLOW: Final = "follow"  # follow, asking the policy again for every hop
REDIRECT_ERROR: Final = "error"  # a 3xx rejects the promise
REDIRECT_MODES: Final = (REDIRECT_MANUAL, REDIRECT_FOLLOW, REDIRECT_ERROR)

# Decisions, as they appear in records and in appliance_egress_requests_total{decision}.
DECISION_ALLOW: Final = "allow"  # the policy allowed it (whatever the network did next)
DECISION_DENY: Final = "deny"  # the policy denied it, or gave no usable answer (fail closed)
DECISION_REFUSED: Final = "refused"  # the gate refused it before asking (bad input, a limit)
DECISIONS: Final = (DECISION_ALLOW, DECISION_DENY, DECISION_REFUSED)

# Why a fetch failed (FetchFailed.kind). The engine maps ABORTED caused by the script's own
# AbortSignal to an AbortError and everything else to a TypeError carrying the message.
KIND_DENIED: Final = "denied"
KIND_REFUSED: Final = "refused"
KIND_ABORTED: Final = "aborted"
KIND_TIMEOUT: Final = "timeout"
KIND_NETWORK: Final = "network"
KIND_TOO_LARGE: Final = "too_large"
KIND_CREDENTIAL_ECHO: Final = "credential_echo"


@dataclass(frozen=True)
class EgressInvocation:
    """Who is asking: the attempt the request belongs to (SPEC §7's ``scheduled`` object)."""

    namespace: str
    schedule_id: int | str
    schedule_name: str | None
    occurrence_id: int | str
    attempt: int
    ownership_epoch: int

    @classmethod
    def from_scheduled(cls, scheduled: Mapping[str, Any]) -> EgressInvocation:
        """From the ``scheduled`` document of the engine's run request (ScheduledInfo.to_json)."""
        return cls(
            namespace=str(scheduled["namespace"]),
            schedule_id=scheduled["schedule_id"],
            schedule_name=scheduled.get("schedule_name"),
            occurrence_id=scheduled["occurrence_id"],
            attempt=int(scheduled["attempt"]),
            ownership_epoch=int(scheduled["ownership_epoch"]),
        )

    def idempotency_key(self, ordinal: int) -> str:
        """``<namespace>/<schedule_id>/<occurrence_id>/<n>``: the same for every attempt of the
        occurrence, so a retry after a confirmed failure repeats the keys of its calls."""
        return f"{self.namespace}/{self.schedule_id}/{self.occurrence_id}/{ordinal}"

    def invocation_token(self) -> str:
        """``<namespace>/<schedule_id>/<occurrence_id>/<attempt>``: the Appliance-Invocation
        header, one value per attempt."""
        return f"{self.namespace}/{self.schedule_id}/{self.occurrence_id}/{self.attempt}"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "schedule_id": self.schedule_id,
            "schedule_name": self.schedule_name,
            "occurrence_id": self.occurrence_id,
            "attempt": self.attempt,
            "ownership_epoch": self.ownership_epoch,
        }


# The name the engine branch imported first; one home for the protocol's own ``Invocation`` is
# appliance/protocol/v1.py (tests/worker/test_protocol_module.py), so this type is named for
# egress. Drop the alias once nothing imports it.
Invocation = EgressInvocation


@dataclass(frozen=True)
class FetchRequest:
    """One ``fetch(input, init)`` call as the script made it (after the engine's JS side has
    turned ``input``/``init`` into plain values). Nothing here is trusted: the gate validates it.

    ``headers`` are (name, value) pairs in the script's order, names in any case; ``body`` is
    the bytes to send (the engine encodes a string as UTF-8), None for no body.
    """

    url: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    redirect: str = REDIRECT_MANUAL


@dataclass(frozen=True)
class FetchResponse:
    """What the script gets back. ``url`` is the final URL (after followed redirects, fragment
    dropped); ``headers`` are the response's, names lower-case, in the order received; ``body``
    is the whole body (at most ``egress.max_response_bytes``; a larger one is an error, never
    cut)."""

    status: int
    status_text: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    redirected: bool

    def header(self, name: str) -> str | None:
        """Like ``Headers.get``: every value of ``name`` joined by ", ", or None."""
        wanted = name.lower()
        values = [value for key, value in self.headers if key == wanted]
        return ", ".join(values) if values else None


class FetchFailed(Exception):
    """The fetch did not produce a response. ``message`` is safe for the script, the logs and
    the record (it never holds a credential value); ``kind`` says why (KIND_*)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class EgressDenied(FetchFailed):
    """The policy denied the request (or gave no usable answer): ``reason`` is its reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(KIND_DENIED, f"egress denied: {reason}")
        self.reason = reason


class FetchAborted(FetchFailed):
    """``Exchange.abort()`` or ``AttemptEgress.close()`` stopped it; every connection it opened
    is closed by the time ``run()`` raises this."""

    def __init__(self, message: str = "the request was aborted") -> None:
        super().__init__(KIND_ABORTED, message)
