"""The claim's binding as the runner writes it (docs/protocol.md, "The binding").

The binding names namespace, schedule, occurrence, attempt, owner/epoch, worker, payload digest
(SHA-256 of the code) and the execution authority; the worker launches nothing whose binding
differs in any field from the one admitted. It is built once, by the owner, when it claims. The
types and the execution id are the wire protocol's (``appliance/protocol/v1.py``); this module
only fills them from the runner's remote config.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from appliance.config.rfc3339 import format_utc
from appliance.config.runner import RemoteConfig
from appliance.protocol import v1
from appliance.protocol.v1 import payload_sha256

__all__ = ["authority_of", "execution_id", "make_binding", "payload_sha256"]


def execution_id(schedule_id: int, occurrence_id: int, attempt: int) -> str:
    """The worker's id for an invocation (derived, so a lost exec answer can still observe it)."""
    return v1.execution_id(v1.Invocation("", schedule_id, occurrence_id, attempt))


def make_binding(
    remote: RemoteConfig,
    *,
    schedule_id: int,
    schedule_name: str | None,
    occurrence_id: int,
    attempt: int,
    owner: str,
    epoch: int,
    code: str,
    due_s: int,
    worker_id: str | None = None,
) -> dict[str, Any]:
    """The binding document of one claim (``v1.binding_document`` of a ``v1.Binding``);
    ``worker_id`` is the fleet worker placement chose (default: the one-worker remote's)."""
    binding = v1.Binding(
        namespace=remote.namespace,
        schedule_id=schedule_id,
        schedule_name=schedule_name,
        occurrence_id=occurrence_id,
        attempt=attempt,
        owner=owner,
        epoch=epoch,
        worker_id=worker_id if worker_id is not None else str(remote.worker_id),
        payload_sha256=payload_sha256(code),
        due_time=format_utc(datetime.fromtimestamp(due_s, UTC)),
        authority=v1.Authority(**authority_of(remote)),
    )
    return v1.binding_document(binding)


def authority_of(remote: RemoteConfig) -> dict[str, Any]:
    """The execution authority every claim of this runner carries (wire form)."""
    return {
        "expires_at": format_utc(remote.expires_at),
        "timeout_seconds": remote.timeout_seconds,
        "heap_mb": remote.heap_mb,
        "session": remote.session,
    }
