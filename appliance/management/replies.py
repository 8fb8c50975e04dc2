"""From a validated command to one safe reply: ``run_command`` → ``Outcome(status, body)``.

Theory of operation. Both transports (HTTP routes and MCP tools) end here, so the error table of
seeds/001 is implemented once:

- 503 ``accepted: false`` — the queue had no slot; nothing was queued, retrying later is safe;
- 409 — the loop answered that this voter is not the acquired owner (not applied);
- 400 / 404 / 422 with the core's reason — the loop answered a definite refusal: validation
  before proposing, or a committed apply that refused the command (``refusals.classify``: 404 for
  an id that names nothing, 422 for a state or limit that forbids it). Nothing changed; this goes
  beyond seeds/001, whose reference runner reported these as uncertain;
- 503 ``outcome: "uncertain"``, ``retry_safe: false`` — a mutation whose outcome is not known
  (not known to be committed, leadership lost in flight, a storage failure, the wait timing
  out); the command may still take effect, and the client is told to inspect state, never to
  retry blindly (creation has no deduplication);
- 503 ``unavailable`` — a read (status, list) the runner could not answer (no quorum);
- 200 — the loop's reply, with a ``meaning`` sentence that says what success proves (a cancel
  success records intent only; ``list`` is a stale local view).

Remote replies are redacted: a definition's ``code`` (source) becomes its size and SHA-256,
storage paths and internal error texts are dropped (they go to the local log only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.management.gateway import (
    CommandGateway,
    DefinitelyRefused,
    NotOwner,
    QueueFull,
    Uncertain,
)
from appliance.management.refusals import classify
from appliance.protocol.v1 import payload_sha256

log = logging.getLogger("appliance.management")

REPLY_TIMEOUT_S_DEFAULT: Final = 30.0

MEANING: Final[Mapping[str, str]] = {
    "status": "status of this voter; ownership is shown as acquired by the named node and epoch",
    "list": "a stale local view of this voter's replica; it may lag the acquired owner",
    "create": "the schedule was created and committed; it runs from its next calendar slot "
    "strictly after creation",
    "disable": "the schedule is disabled for future selection; occurrences already selected "
    "are not cancelled",
    "cancel": "cancellation intent was recorded (Cancelling); the occurrence is Cancelled only "
    "once the engine confirms the work stopped, and completion may still win",
    "delete": "the definition was deleted; its live occurrences still run to a terminal state",
    "run_now": "committed: the occurrence named was created due now (it is claimed like any "
    "other), or none was created for the reason given; a repeated request_id gets the first answer",
    "enable": "the schedule is enabled; without catch_up it resumes from now with no backlog",
    "update": "the new definition is committed for future occurrences; live occurrences keep "
    "the code they were created with",
    "pause": "scheduling is paused cluster-wide: nothing is selected or started; running work "
    "continues and can be cancelled",
    "resume": "scheduling resumed; without catch_up the paused span is skipped (counted missed)",
    "backfill": "the listed occurrences were created for past slots that had none retained",
    "backfill_preview": "what backfill would create now; nothing was created",
    "acknowledge_stopped": "the occurrence was marked Abandoned on the attested quiescence; this "
    "does not cancel a previously admitted permit or undo external effects",
    # The contract amendments (issue 20).
    "renew_grant": "the grant renewal was committed; new claims carry it, attempts already "
    "claimed keep the authority they were bound with",
    "amend_remote": "the remote change was committed; the owner sends the next dispatch there",
    "amend_limits": "the limits change was committed; it applies to the next command",
    # The fleet (issue 33): committed amendments of the worker set.
    "add_worker": "the worker joined the fleet (committed): the owner places new attempts on it "
    "once it answers",
    "drain_worker": "the worker is draining (committed): no new placements; its live attempts "
    "finish there",
    "undrain_worker": "the worker takes new placements again (committed)",
    "remove_worker": "the worker left the fleet (committed); its worker_id is never reused: stop "
    "its process once you no longer need its store",
    # Raft membership (issue 20): committed CONFIG entries, answered with the configuration.
    "add_voter": "the node joined the Raft configuration as a learner (committed): it receives "
    "the log and does not vote until promote_voter",
    "promote_voter": "the learner is a voter (committed); quorums count it from now on",
    "remove_voter": "the node left the Raft configuration (committed); it no longer votes or "
    "campaigns: stop its process",
}
# What an uncertain membership answer carries besides the verdict: what this voter sees now.
_MEMBERSHIP_SEEN: Final = ("configuration", "config_index", "config_change_pending", "leader")

MUTATION_ACTIONS: Final = frozenset(MEANING) - {"status", "list"}

# Keys whose values never leave the voter (storage paths, internals).
_DROPPED_KEYS: Final = frozenset(
    {"data_dir", "path", "store_path", "db_path", "database", "traceback", "exception", "internal"}
)


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == 200


def redact(value: Any) -> Any:
    """A copy of ``value`` without source code, storage paths or internal details."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _DROPPED_KEYS:
                continue
            if key == "code" and isinstance(item, str):
                out["code_bytes"] = len(item.encode("utf-8", "surrogatepass"))
                out["code_sha256"] = payload_sha256(item)
                continue
            out[key] = redact(item)
        return out
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def error_outcome(
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    problems: list[dict[str, str]] | None = None,
    details: tuple[tuple[str, Any], ...] = (),
    **top: Any,
) -> Outcome:
    error: dict[str, Any] = {"code": code, "message": message, **dict(details)}
    if field is not None:
        error["field"] = field
    if problems:
        error["problems"] = problems
    body: dict[str, Any] = {"ok": False, "status": status, **top, "error": error}
    return Outcome(status, body)


def run_command(
    gateway: CommandGateway,
    command: Mapping[str, Any],
    role: str,
    reply_timeout_s: float = REPLY_TIMEOUT_S_DEFAULT,
) -> Outcome:
    """Submit a validated stdin-shaped command and turn what happens into an ``Outcome``."""
    action = str(command["action"])
    try:
        submitted = gateway.submit(command, role=role)
    except QueueFull:
        log.warning("management: %s refused: the command queue is full", action)
        return error_outcome(
            503,
            "queue_full",
            "the runner's command queue is full; the command was not accepted (retrying later "
            "is safe)",
            accepted=False,
        )
    except Exception:
        # A gateway that cannot even queue (runner stopping): definitely not accepted.
        log.exception("management: %s refused: the runner is unavailable", action)
        return error_outcome(
            503,
            "unavailable",
            "the runner is unavailable; the command was not accepted",
            accepted=False,
        )
    try:
        reply = submitted.wait(reply_timeout_s)
    except NotOwner as exc:
        fields: dict[str, Any] = {}
        if exc.leader_hint:
            fields["leader_hint"] = str(exc.leader_hint)
        return error_outcome(
            409,
            "not_owner",
            "this voter is not the acquired owner; the command was not accepted",
            **fields,
        )
    except DefinitelyRefused as exc:
        log.info("management: %s refused: %s", action, exc.message)
        return error_outcome(exc.status, exc.code, exc.message)
    except Uncertain as exc:
        log.warning("management: %s outcome uncertain: %s", action, exc.reason)
        return _uncertain(action, command)
    except Exception:
        log.exception("management: %s failed after queue admission", action)
        return _uncertain(action, command)
    reply = dict(reply)
    if reply.get("outcome") == "uncertain" and reply.get("status") == 503:
        error = reply.get("error") if isinstance(reply.get("error"), Mapping) else {}
        seen = {key: error[key] for key in _MEMBERSHIP_SEEN if key in error}
        if seen:  # a membership change whose commit is not known: show what is in force now
            outcome = _uncertain(action, command)
            outcome.body.update(seen)
            return outcome
    if reply.get("ok") is False:
        # A loop that answers with the stdin error shape instead of raising.
        if reply.get("status") == 409:
            hint = reply.get("leader_hint") or (reply.get("error") or {}).get("leader_hint")
            where = {
                key: str(reply[key])
                for key in ("leader_host", "owner_management_addr")
                if hint and reply.get(key)
            }
            return error_outcome(
                409,
                "not_owner",
                "this voter is not the acquired owner; the command was not accepted",
                **({"leader_hint": str(hint)} if hint else {}),
                **where,
            )
        if reply.get("accepted") is False:
            # The loop itself says it did not take the command (e.g. it is draining).
            log.warning("management: %s not accepted by the loop: %r", action, reply.get("error"))
            return error_outcome(
                503,
                "unavailable",
                "the runner is unavailable; the command was not accepted",
                accepted=False,
            )
        refusal = classify(reply)
        if refusal is not None:
            log.info("management: %s refused: %s", action, refusal.message)
            return error_outcome(
                refusal.status, refusal.code, refusal.message, details=refusal.details
            )
        log.warning("management: %s failed after queue admission: %r", action, reply.get("error"))
        return _uncertain(action, command)
    reply.pop("ok", None)
    body = {"ok": True, "action": action, "meaning": MEANING[action], "result": redact(reply)}
    return Outcome(200, body)


def _uncertain(action: str, command: Mapping[str, Any]) -> Outcome:
    if action not in MUTATION_ACTIONS:
        # A read changes nothing: there is no outcome to be uncertain about.
        return error_outcome(
            503, "unavailable", f"the runner could not answer {action} now; asking again is safe"
        )
    # A run_now with a request_id is deduplicated in the checkpoint: repeating it is safe.
    deduplicated = action == "run_now" and command.get("request_id") is not None
    if deduplicated:
        advice = "repeat it with the same request_id: the first answer comes back, once"
    elif action == "create":
        advice = (
            "inspect state (status, list) and the voter's diagnostics before acting; "
            "never retry creation blindly"
        )
    else:
        advice = "inspect state (status, list) and the voter's diagnostics before acting"
    return error_outcome(
        503,
        "outcome_uncertain",
        f"the command was queued but its outcome is uncertain: {advice}",
        outcome="uncertain",
        retry_safe=deduplicated,
    )
