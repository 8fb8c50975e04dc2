"""The owner core's answers to callers: admission requests and operator commands.

Theory of operation (SPEC §6 "Admission", seeds/001 "Operator commands"): an admission is the
committed ``Admit`` compare-and-set, proposed at once (not a serial decision: concurrent permit
requests share Raft appends) and answered only from its committed result. An operator command
is ``list`` (the local, possibly stale, view), ``status`` (after a read barrier) or a mutation
(the core command of its row in appliance/commands/table.py, answered after its commit;
503 ``uncertain`` when the commit's fate is unknown).

``Requests`` is a part of the owner (appliance/owner/owner.py composes it): it reads where the
voter stands (``Standing``), asks the attempts to cancel or forget one, and the calendars to
retrack a schedule a command changed; it holds only the admissions awaiting their commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from appliance.commands.operator import (
    MUTATIONS,
    OperatorCommand,
    OperatorError,
    build_mutation,
    error_reply,
)
from appliance.commands.table import ADMIN_ACTIONS, PREVIEWS
from appliance.config.rfc3339 import format_utc
from appliance.core import state as core
from appliance.core.binding import instant_text
from appliance.core.definition import parse_definition
from appliance.core.errors import CoreError
from appliance.core.occurrence import OccurrenceState
from appliance.owner import contract_state, ownership
from appliance.owner.applied import Refused
from appliance.owner.attempts import Attempts
from appliance.owner.calendars import Calendars
from appliance.owner.config_in_force import ConfigInForce
from appliance.owner.contract import amendment_args
from appliance.owner.events import NotLeaderAnswer, Outcome, Propose, Reply
from appliance.owner.serial import Chain, NotOwner, Serial, Uncertain
from appliance.owner.standing import Standing
from appliance.protocol import v1

S = OccurrenceState
_MEMBERSHIP_STATUS = ("configuration", "config_index", "config_change_pending", "member_status")


def list_reply(node_id: str, read: Callable[..., Any], genesis: Any = None) -> dict[str, Any]:
    """``list``: this voter's applied state, as it is here (any voter answers it; it may lag).
    ``read`` (the machine's) takes only the references under its lock; the view is rendered
    after. With the genesis remote, the fleet in force too (issue 33)."""
    snapshot: core.ListSnapshot = read(core.list_snapshot)
    reply = {"ok": True, "stale_local_view": True, "node": node_id, **core.render_list(snapshot)}
    if genesis is not None:
        reply["fleet"] = read(lambda st: contract_state.fleet_view(genesis, st))
    return reply


def _admit_error(message: str) -> dict[str, Any]:
    return v1.error_document("binding_mismatch", message)


def admission_caller_refusal(
    genesis: Any, st: core.SchedulerState, binding: Mapping[str, Any], caller: str | None
) -> str | None:
    """Why a permit request may not come from ``caller`` (issue 33): with a fleet worker's own
    admission credential, the attempt must be bound to that worker; the shared credential is
    refused for a worker that has its own. The committed claim must name the binding's worker
    too — the ``Admit`` apply compares every field."""
    worker_id = binding.get("worker_id") if isinstance(binding, Mapping) else None
    if caller is not None and worker_id != caller:
        return (
            f"binding.worker_id: the admission credential presented is worker {caller}'s; the "
            f"attempt is bound to {worker_id!r}"
        )
    if caller is None and isinstance(worker_id, str):
        spec = contract_state.remote_in_force(genesis, st).worker(worker_id)
        if spec is not None and spec.admission_bearer_env is not None:
            return (
                f"binding.worker_id: worker {worker_id} has its own admission credential; the "
                "shared one is refused for its attempts"
            )
    return None


class Requests:
    """Admission requests and operator commands, answered from the committed state."""

    def __init__(
        self,
        serial: Serial,
        standing: Standing,
        config: ConfigInForce,
        attempts: Attempts,
        calendars: Calendars,
        *,
        fleet: Any = None,
        check_env: Callable[[str], str | None] | None = None,
    ) -> None:
        self._serial = serial
        # The fleet (issue 33): its status views, and the driver's answer to "can this voter use
        # the credential variable an add_worker names?" (appliance/owner/fleet_args.py).
        self._fleet = fleet
        self._check_env = check_env
        self._standing = standing
        self._config = config
        self._attempts = attempts
        self._calendars = calendars
        self._admissions: dict[int, tuple[int, Mapping[str, Any]]] = {}  # token -> request

    # ---- admission ---------------------------------------------------------------------------

    def _not_owner_answer(self, message: str) -> tuple[int, dict[str, Any]]:
        hint = self._standing.leader_hint
        return 409, v1.error_document(v1.ADMIT_NOT_OWNER_CODE, message, leader_hint=hint)

    def admit(
        self,
        request: int,
        binding: Mapping[str, Any],
        incarnation: str,
        caller: str | None = None,
    ) -> None:
        """Propose ``Admit`` without waiting, so concurrent permit requests share Raft appends;
        the driver may answer a committed outcome at once (``answers_admission``). ``caller``:
        the fleet worker whose own admission credential was presented (issue 33)."""
        if self._standing.epoch is None:
            self._answer_admission(request, binding, self._not_owner_answer("not the owner"))
            return
        genesis = self._config.genesis.remote
        refusal = self._serial.read(
            lambda st: admission_caller_refusal(genesis, st, binding, caller)
        )
        if refusal is not None:  # definite, nothing proposed
            self._answer_admission(request, binding, (403, _admit_error(refusal)))
            return
        command = ownership.admit_command(binding, incarnation, self._serial.now_s())
        if isinstance(command, tuple):  # a definite refusal before any proposal
            self._answer_admission(request, binding, command)
            return
        gated = self._serial.gated(command)
        if gated is not None:  # definite, nothing proposed: answered like a committed refusal
            self.admit_done(request, binding, gated)
            return
        token = self._serial.token()
        self._admissions[token] = (request, binding)
        self._serial.emit(Propose(token, command, answers_admission=request))

    def awaits_admission(self, token: int) -> bool:
        return token in self._admissions

    def admission_committed(self, token: int, outcome: Outcome) -> None:
        request, binding = self._admissions.pop(token)
        self.admit_done(request, binding, outcome)

    def admit_done(self, request: int, binding: Mapping[str, Any], outcome: Outcome) -> None:
        try:
            result = self._serial.interpret(outcome)
        except NotOwner:
            reply = self._not_owner_answer("ownership lost")
        except Uncertain as exc:
            reply = 503, v1.error_document(v1.ADMIT_UNCERTAIN_CODE, str(exc))
        else:
            reply = ownership.admit_answer(result)
        self._answer_admission(request, binding, reply)

    def _answer_admission(
        self, request: int, binding: Mapping[str, Any], reply: tuple[int, dict[str, Any]]
    ) -> None:
        status, body = reply
        oid = binding.get("occurrence_id") if isinstance(binding, Mapping) else None
        work = self._attempts.work.get(oid) if isinstance(oid, int) else None
        self._serial.log(
            "admission",
            status=status,
            occurrence=oid,
            attempt=binding.get("attempt") if isinstance(binding, Mapping) else None,
            epoch=binding.get("epoch") if isinstance(binding, Mapping) else None,
            late_ms=self._serial.late_ms(work.due_s) if work is not None else None,
            refusal=(body.get("error") or {}).get("code") if status != 200 else None,
        )
        self._serial.emit(Reply(request, reply))

    # ---- operator commands -------------------------------------------------------------------

    def _not_owner(self) -> OperatorError:
        return OperatorError(
            409,
            "not_owner",
            "this voter is not the acquired owner; send the command to the leader",
            leader_hint=self._standing.leader_hint,
        )

    def operator_reply(self, request: int, command: OperatorCommand) -> Chain[None]:
        """One operator command, a serial decision; exactly one ``Reply`` for ``request``."""
        try:
            reply = yield from self._operator(command)
        except OperatorError as err:
            reply = err.reply()
        self._serial.emit(Reply(request, reply))

    def _operator(self, command: OperatorCommand) -> Chain[dict[str, Any]]:
        action = command.action
        if action == "list":
            genesis = self._config.genesis.remote
            return list_reply(self._standing.node_id, self._serial.read, genesis)
        if self._standing.epoch is None:
            raise self._not_owner()
        if action == "status":
            return (yield from self._status())
        if self._standing.draining:
            raise OperatorError(503, "draining", "the runner is shutting down", accepted=False)
        if self._standing.seeding:
            raise OperatorError(
                503,
                "seeding",
                "the initial schedules are not created yet (not every voter reports it can apply "
                "them); ask again in a moment",
                accepted=False,
            )
        if action in PREVIEWS:
            return self._preview(command)
        if action not in MUTATIONS:
            raise OperatorError(400, "invalid_command", f"action: {action} is not a mutation")
        return (yield from self._mutate(command))

    def _planned(self, plan: Callable[..., Any], args: dict[str, Any], at_s: int) -> Any:
        """A table row's plan, on the committed state with this owner's calendars."""

        read, compiled_for = self._serial.read, self._calendars.compiled_for

        def compiled(schedule_id: int) -> Any:
            return read(lambda st: compiled_for(st.schedules[schedule_id].definition))

        return read(lambda st: plan(args, at_s, st, compiled))

    def _preview(self, command: OperatorCommand) -> dict[str, Any]:
        """``backfill_preview``: the backfill's plan and its apply on a transaction that is never
        committed (appliance/core/schedule_commands.py), answered without proposing anything."""
        cmd = build_mutation(command, self._serial.now_s(), self._check_definition, self._planned)
        report = self._serial.read(lambda st: core.preview_backfill(st, cmd))
        if isinstance(report, CoreError):
            return error_reply(400, "refused", str(report))
        return {
            "ok": True,
            "action": command.action,
            "id": cmd.schedule_id,
            "preview": True,
            **backfill_json(cmd, report),
        }

    def _status(self) -> Chain[dict[str, Any]]:
        standing, read = self._standing, self._serial.read
        done = yield from self._serial.barrier()
        if isinstance(done.failure, NotLeaderAnswer):
            self._serial.lost_leadership(standing.leader_hint)
            raise self._not_owner()
        if done.failure is not None:
            raise OperatorError(
                503, "unavailable", f"no quorum confirmed leadership: {done.failure.detail}"
            )
        if standing.epoch is None:
            raise self._not_owner()
        raft = done.raft_status
        counts = read(lambda st: st.counts())
        # The grant in force: the committed contract (genesis plus amendments), never the file.
        genesis = self._config.genesis
        remote = read(lambda st: contract_state.remote_in_force(genesis.remote, st))
        reply: dict[str, Any] = {
            "ok": True,
            "node": standing.node_id,
            "term": raft.get("term", standing.term),
            "ownership": {"node": standing.node_id, "epoch": standing.epoch},
            "commit_index": raft.get("commit_index"),
            "applied_index": raft.get("applied_index"),
            "grant_expires_at": format_utc(remote.expires_at),
            "grant_expired": self._serial.wall_s >= remote.expires_at.timestamp(),
            # The contract in force: genesis plus committed amendments (issue 20).
            "contract": read(lambda st: contract_state.contract_summary(genesis.remote, st)),
            # The Raft configuration in force and any change in flight (issue 20).
            **{key: raft[key] for key in _MEMBERSHIP_STATUS if key in raft},
            "counts": {
                "records": counts.records,
                "outstanding": counts.outstanding,
                "running": counts.running,
                "by_state": counts.by_state,
            },
        }
        # Paced dispatch (appliance/owner/pacing.py): in flight at the worker, waiting for its
        # capacity.
        reply["dispatch"] = self._attempts.pacing_view()
        if self._fleet is not None:
            # The fleet (issue 33): every worker, drained or not, reachable or not, and what
            # waits for a worker placement would accept.
            reply["fleet"] = self._fleet.status()
            reply["placement_waits"] = self._fleet.placement_waits()
        paused = read(core.paused_since)
        reply["paused"] = None if paused is None else {"since": instant_text(paused)}
        if self._serial.time_scale != 1.0:
            reply["time_scale"] = self._serial.time_scale
        return reply

    def _mutate(self, command: OperatorCommand) -> Chain[dict[str, Any]]:
        action, args = command.action, command.args
        if action in ADMIN_ACTIONS:  # a contract amendment: its base and normalized values
            genesis, check_env = self._config.genesis.remote, self._check_env
            command = OperatorCommand(
                action,
                self._serial.read(lambda st: amendment_args(action, args, st, genesis, check_env)),
            )
        cmd = build_mutation(command, self._serial.now_s(), self._check_definition, self._planned)
        try:
            result = yield from self._serial.propose(cmd)
        except NotOwner:
            raise self._not_owner() from None
        except Uncertain as exc:
            raise OperatorError(
                503, "uncertain", str(exc), outcome="uncertain", retry_safe=False
            ) from None
        if isinstance(result, Refused):
            self._serial.log("operator_refused", action=action, reason=result.message)
            # A name another schedule holds: which one (core/unique_names.py, issue 35).
            holder = getattr(result.error, "existing_id", None)
            details = {"existing_id": holder} if isinstance(holder, int) else {}
            return error_reply(400, "refused", result.message, **details)
        self._serial.log("operator", action=action, **_ids(args))
        return self._after_mutation(action, args, result.value)

    def _check_definition(self, document: Any) -> Any:
        """A create's definition, parsed and compiled, or a 400 naming the problem."""
        try:
            definition = parse_definition(document, self._config.get().limits, "definition")
            self._calendars.compiled_for(definition)
        except CoreError as err:
            raise OperatorError(400, "invalid_definition", str(err)) from None
        return definition

    def _after_mutation(self, action: str, args: dict[str, Any], value: Any) -> dict[str, Any]:
        if action in ADMIN_ACTIONS:
            self._serial.log("contract_amended", amendment=value.amendment, kind=value.kind)
            return {
                "ok": True,
                "action": action,
                "amendment": value.amendment,
                "changes": value.changes,
            }
        extended = self._after_extended(action, args, value)
        if extended is not None:
            return extended
        if action == "create":
            self._calendars.track(value)
            return {"ok": True, "action": action, "id": value}
        if action in ("disable", "delete"):
            self._calendars.track(args["id"])
            return {"ok": True, "action": action, "id": args["id"]}
        oid = args["occurrence_id"]
        state = getattr(value, "state", None)
        reply = {"ok": True, "action": action, "occurrence_id": oid, "state": state.value}
        attempts = self._attempts
        if action == "cancel" and state is S.CANCELLING:
            work = attempts.work.get(oid) or attempts.adopt_existing(oid, attempts.deadline_s())
            if work is not None:
                work.cancel_attempts = 0
                attempts.cancel(work)
        if action == "acknowledge_stopped":
            acknowledged = attempts.work.get(oid)
            if acknowledged is not None:
                attempts.forget(acknowledged)
            # What was attested over: the Unknown's reason and whether a permit was committed.
            reply["evidence"] = self._serial.read(lambda st: ownership.unknown_evidence(st, oid))
        return reply

    def _after_extended(
        self, action: str, args: dict[str, Any], value: Any
    ) -> dict[str, Any] | None:
        """The replies of the commands beyond the seeds (None for the others). A run_now or
        backfill occurrence is claimed by the next pulse's claim pass, like any Pending one."""
        if action == "enable":
            self._calendars.track(args["id"])  # its cursor changed
            return {"ok": True, "action": action, "id": args["id"], "enabled": value}
        if action == "update":  # value: the fields that changed (core/schedule_commands.py)
            self._calendars.track(args["id"])  # its calendar may have changed
            reply = {"ok": True, "action": action, "id": args["id"], "changed": bool(value)}
            return {**reply, "fields": list(value)}
        if action == "pause":
            return {"ok": True, "action": action, "paused": True, "changed": value}
        if action == "resume":
            self._calendars.rebuild()
            return {"ok": True, "action": action, "paused": False, "moved": list(value)}
        if action == "run_now":
            return {
                "ok": True,
                "action": action,
                "id": value.schedule_id,
                "occurrence_id": value.occurrence_id,
                "reason": value.reason,
                "repeated": value.repeated,
            }
        if action == "backfill":
            return {"ok": True, "action": action, "id": args["id"], **backfill_json(None, value)}
        return None


def backfill_json(cmd: Any, report: Any) -> dict[str, Any]:
    """A backfill's (or its preview's) answer: instants as RFC 3339 text."""
    out: dict[str, Any] = {
        "created": [
            {"occurrence_id": oid, "due": instant_text(slot)} for oid, slot in report.created
        ],
        "existing": [instant_text(slot) for slot in report.existing],
        "overlap": [instant_text(slot) for slot in report.overlap],
    }
    if cmd is not None:
        out["slots"] = len(cmd.slots_s)
    return out


def _ids(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k in ("id", "occurrence_id")}
