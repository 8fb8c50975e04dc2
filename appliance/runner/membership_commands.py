"""The membership commands: ``add_voter``, ``promote_voter``, ``remove_voter`` (issue 20).

Theory of operation (docs/raft.md "Membership change", docs/cluster.md "Changing the voters"):
these are Raft CONFIG entries, not Machine commands, so they skip the owner core and call the
replication directly (``RaftReplication.add_learner / promote / remove``), on the caller's thread
(the stdin reader or the management consumer), bounded by ``MEMBERSHIP_TIMEOUT_S``. Each answer is
definite unless the wait ran out:

- committed: ``{"ok": true, ...}`` with the configuration in force;
- ``ProposalRefused`` (a change in flight, the learner has not caught up, the last voter, already
  a member, no leader barrier yet): a definite refusal (stdin status 400 ``refused``, HTTP 422)
  naming the reason; nothing changed;
- ``NotLeader``: 409 ``not_owner`` with the leader hint, as every command on a follower;
- the driver's inbox full: 503 ``accepted: false`` (nothing was proposed);
- anything else (the wait timed out, the leader stepped down after proposing): the outcome is
  unknown. The answer says so (``outcome: "uncertain"``, ``retry_safe: false``) and carries the
  configuration this voter sees now and ``config_change_pending``; it is never retried here.

On the etcd backend the replication has no membership methods: membership is etcd's own
(``etcdctl member add/promote/remove``) and the commands are a definite refusal.
"""

from __future__ import annotations

from typing import Any, Final

from appliance.commands.operator import OperatorCommand, error_reply
from appliance.commands.table import COMMANDS, MEMBERSHIP_ACTIONS
from appliance.replication.errors import NotLeader, Overloaded, ProposalRefused

__all__ = ["MEMBERSHIP_ACTIONS", "configuration_view", "membership_reply"]

MEMBERSHIP_TIMEOUT_S: Final = 10.0
ETCD_REFUSAL: Final = (
    "membership is etcd's business on the etcd backend: change etcd's members with etcdctl "
    "member add/promote/remove; runner instances come and go under the lease rules"
)


def configuration_view(replication: Any) -> dict[str, Any]:
    """The configuration this voter sees now (empty if its status cannot be read)."""
    try:
        status = dict(replication.status())
    except Exception:  # a stopping driver: the answer then says only what is known
        return {}
    view = {
        key: status[key]
        for key in ("configuration", "config_index", "config_change_pending", "member_status")
        if key in status
    }
    if "leader_id" in status:
        view["leader"] = status["leader_id"]
    return view


def membership_reply(
    replication: Any,
    command: OperatorCommand,
    log: Any,
    timeout_s: float = MEMBERSHIP_TIMEOUT_S,
) -> dict[str, Any]:
    """Run one membership command against ``replication``; one stdin-shaped reply."""
    action = command.action
    method = getattr(replication, COMMANDS[action].membership or "", None)
    if method is None:
        return error_reply(400, "refused", f"{action}: {ETCD_REFUSAL}")
    node_id = command.args["id"]
    call_args: tuple[Any, ...] = (node_id,)
    if action == "add_voter":
        call_args = (node_id, command.args["address"])
    try:
        method(*call_args, timeout_s=timeout_s)
    except NotLeader as exc:
        return error_reply(
            409,
            "not_owner",
            "this voter is not the Raft leader; send the command to the leader",
            leader_hint=getattr(exc, "leader_hint", None),
        )
    except ProposalRefused as exc:
        log.emit("membership_refused", action=action, id=node_id, reason=str(exc))
        return error_reply(400, "refused", f"{action}: {exc}")
    except Overloaded:
        return error_reply(
            503, "unavailable", "the Raft inbox is full; nothing was proposed", accepted=False
        )
    except Exception as exc:  # a timeout, an overwritten entry, a stop: the outcome is unknown
        seen = configuration_view(replication)
        log.emit("membership_uncertain", action=action, id=node_id, reason=str(exc), **seen)
        return error_reply(
            503,
            "uncertain",
            f"{action} {node_id}: the outcome is unknown ({exc}); it may still commit. Read "
            "status (configuration, config_change_pending) before acting; it is not retried",
            outcome="uncertain",
            retry_safe=False,
            **seen,
        )
    seen = configuration_view(replication)
    log.emit("membership_changed", action=action, id=node_id, **seen)
    return {"ok": True, "action": action, "id": node_id, **seen}
