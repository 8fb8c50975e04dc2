"""Arguments and owner-side planning of the operator commands beyond the seeds (issue 22).

Theory of operation: the command table (``command_table.py``) names, per action, the fields and
which may be omitted; this module holds each new action's argument check (the same for stdin,
HTTP, MCP and ``admin``: it raises :class:`ArgumentError` naming the field) and its *plan*: the
owner's pure step from the checked arguments, the instant, the committed state and the compiled
calendar to the core command (SPEC §2: the calendar's answers travel in the command). A plan never
writes; a refusal it raises (``CoreError``) is a definite 400, since nothing was proposed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from appliance.core import state as core
from appliance.core.command_plans import plan_backfill, plan_enable, plan_resume, plan_update
from appliance.core.definition import OverlapPolicy
from appliance.core.occurrence import INSTANT_MAX_S, INT_MAX
from appliance.core.schedule_commands import REQUEST_ID_BYTES_MAX, UPDATE_FIELDS

Compiled = Callable[[int], Any]  # schedule id -> its compiled calendar (the owner's cache)
INSTANT_TEXT_BYTES_MAX: Final = 64
# The fraction of a second in an instant's text (a date never holds "." or ",").
_FRACTION: Final = re.compile(r"[.,](\d+)")
_REQUEST_CHARS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
)


class ArgumentError(ValueError):
    """A command argument that is malformed; ``shape`` when its type is wrong (MCP: invalid
    params) rather than its content."""

    def __init__(self, field: str, message: str, *, shape: bool = True) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.shape = shape


def _bool(args: Mapping[str, Any], field: str) -> None:
    if field in args and type(args[field]) is not bool:
        raise ArgumentError(field, "must be true or false")


def instant_arg(value: Any, field: str, *, round_up: bool = False) -> int:
    """An RFC 3339 instant with an offset (``2026-12-01T10:00:00Z``) as whole seconds: a
    fraction of a second is dropped (rounded down), or with ``round_up`` taken to the next whole
    second. The fraction is read from the text, every digit of it: ``datetime`` keeps only
    microseconds, so ``.000000001`` would otherwise look like a whole second."""
    if not isinstance(value, str) or not 0 < len(value) <= INSTANT_TEXT_BYTES_MAX:
        raise ArgumentError(field, "must be an RFC 3339 instant such as 2026-12-01T10:00:00Z")
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise ArgumentError(field, "is not an RFC 3339 instant", shape=False) from None
    if instant.tzinfo is None:
        raise ArgumentError(field, "must carry an offset (Z or +hh:mm)", shape=False)
    seconds = int(instant.replace(microsecond=0).timestamp())
    fraction = _FRACTION.search(value)
    if round_up and fraction is not None and fraction.group(1).strip("0"):
        seconds += 1
    if not 0 <= seconds <= INSTANT_MAX_S:
        raise ArgumentError(field, "must be between 1970 and 9999", shape=False)
    return seconds


def backfill_window(args: Mapping[str, Any]) -> tuple[int, int]:
    """``[start, end]`` in whole seconds, both inclusive: ``start`` rounded up to the next whole
    second and ``end`` down, so no slot before ``start`` or after ``end`` is ever created."""
    start_s = instant_arg(args["start"], "start", round_up=True)
    end_s = instant_arg(args["end"], "end")
    if start_s > end_s:
        if instant_arg(args["start"], "start") <= end_s:
            raise ArgumentError(
                "start",
                "start and end lie within one second: the window holds no whole second",
                shape=False,
            )
        raise ArgumentError("start", "must not be after end", shape=False)
    return start_s, end_s


def check_run_now(args: Mapping[str, Any]) -> None:
    request_id = args.get("request_id")
    if request_id is None:
        return
    if not isinstance(request_id, str):
        raise ArgumentError("request_id", "must be a string")
    if not 0 < len(request_id) <= REQUEST_ID_BYTES_MAX or not set(request_id) <= _REQUEST_CHARS:
        raise ArgumentError(
            "request_id",
            f"must be 1-{REQUEST_ID_BYTES_MAX} characters of A-Za-z0-9._:-",
            shape=False,
        )


def check_catch_up(args: Mapping[str, Any]) -> None:
    _bool(args, "catch_up")


def check_worker_args(args: Mapping[str, Any]) -> None:
    """The fleet commands' shapes (issue 33); the owner checks the values against the fleet."""
    for field in ("worker_id", "url", "bearer_env", "admission_bearer_env"):
        if field in args and args[field] is not None and not isinstance(args[field], str):
            raise ArgumentError(field, "must be a string")
    if "worker_id" in args and not isinstance(args["worker_id"], str):
        raise ArgumentError("worker_id", "must be a string")
    if "labels" in args and not isinstance(args["labels"], dict):
        raise ArgumentError("labels", "must be an object of label: value strings")


def check_update(args: Mapping[str, Any]) -> None:
    given = [f for f in UPDATE_FIELDS if f in args]
    if not given:
        raise ArgumentError("id", f"update needs at least one of {', '.join(UPDATE_FIELDS)}")
    for field in ("code", "cron", "timezone"):
        if field in args and not isinstance(args[field], str):
            raise ArgumentError(field, "must be a string")
    if "name" in args and args["name"] is not None and not isinstance(args["name"], str):
        raise ArgumentError("name", "must be a string or null")
    if "policy" in args and not isinstance(args["policy"], dict):
        raise ArgumentError("policy", "must be an object (it replaces the whole policy)")
    if "placement" in args and not isinstance(args["placement"], dict):
        raise ArgumentError("placement", "must be an object (it replaces the whole placement)")


def check_backfill(args: Mapping[str, Any]) -> None:
    backfill_window(args)
    overlap = args.get("overlap", OverlapPolicy.QUEUE.value)
    if overlap not in {p.value for p in OverlapPolicy}:
        raise ArgumentError("overlap", 'must be "Skip", "Queue" or "Concurrent"')


# ---- plans: (arguments, instant, committed state, compiled calendars) -> core command ----------


def plan_enable_args(
    args: Mapping[str, Any], at_s: int, st: core.SchedulerState, compiled: Compiled
) -> Any:
    schedule_id = args["id"]
    if schedule_id not in st.schedules:
        raise core.UnknownSchedule(f"id: no schedule {schedule_id}")
    return plan_enable(st, compiled(schedule_id), schedule_id, at_s, args.get("catch_up", False))


def plan_resume_args(
    args: Mapping[str, Any], at_s: int, st: core.SchedulerState, compiled: Compiled
) -> Any:
    calendars = {sid: compiled(sid) for sid, s in st.schedules.items() if s.enabled}
    return plan_resume(st, calendars, at_s, args.get("catch_up", False))


def plan_update_args(
    args: Mapping[str, Any], at_s: int, st: core.SchedulerState, compiled: Compiled
) -> Any:
    changes = {f: args[f] for f in UPDATE_FIELDS if f in args}
    # A new name is checked for uniqueness at apply (UpdateNamedSchedule, issue 35).
    return core.with_unique_name(plan_update(st, args["id"], changes, at_s))


def plan_backfill_args(
    args: Mapping[str, Any], at_s: int, st: core.SchedulerState, compiled: Compiled
) -> Any:
    schedule_id = args["id"]
    if schedule_id not in st.schedules:
        raise core.UnknownSchedule(f"id: no schedule {schedule_id}")
    start_s, end_s = backfill_window(args)
    return plan_backfill(
        st,
        compiled(schedule_id),
        schedule_id,
        start_s,
        end_s,
        at_s,
        args.get("overlap", OverlapPolicy.QUEUE.value),
    )


# ---- contract amendments (issue 20; issue 36: the operator's base) ---------------------------

BASE_AMENDMENT_FIELD: Final = "base_amendment"


def check_base_amendment(args: Mapping[str, Any]) -> None:
    """``base_amendment`` (optional on every amendment): the ``contract.amendment`` index that
    ``status`` showed, a whole number 0 ... INT_MAX. The apply refuses the amendment when another
    committed since (appliance/core/amendments.py); without it the owner builds on the one in
    force."""
    if BASE_AMENDMENT_FIELD not in args:
        return
    value = args[BASE_AMENDMENT_FIELD]
    if type(value) is not int:
        raise ArgumentError(
            BASE_AMENDMENT_FIELD, "must be the integer contract.amendment that status showed"
        )
    if not 0 <= value <= INT_MAX:
        raise ArgumentError(BASE_AMENDMENT_FIELD, f"must be between 0 and {INT_MAX}", shape=False)


# ---- membership (issue 20): Raft entries, not Machine commands -------------------------------

NODE_ID_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
NODE_ID_CHARS_MAX: Final = 64  # the node id rule of the runner config and the Raft wire


def check_voter_id(args: Mapping[str, Any]) -> None:
    """``id``: a node id as the runner config spells them (1-64 of A-Za-z0-9_-)."""
    node_id = args.get("id")
    if not isinstance(node_id, str):
        raise ArgumentError("id", "must be a node id string such as voter-4")
    if not 0 < len(node_id) <= NODE_ID_CHARS_MAX or not set(node_id) <= NODE_ID_CHARS:
        raise ArgumentError(
            "id", f"must be 1-{NODE_ID_CHARS_MAX} characters of A-Za-z0-9_-", shape=False
        )


def check_add_voter(args: Mapping[str, Any]) -> None:
    """``id`` as above; ``address``: the new member's cluster listener, ``host:port`` with a port
    1-65535 that the other voters can dial (not 0.0.0.0 or ::)."""
    from appliance.config.addresses import AddressError, is_unspecified_host, parse_host_port

    check_voter_id(args)
    address = args.get("address")
    if not isinstance(address, str):
        raise ArgumentError("address", "must be a string host:port")
    try:
        parsed = parse_host_port(address)
    except AddressError as err:
        raise ArgumentError("address", str(err), shape=False) from None
    if is_unspecified_host(parsed.host):
        raise ArgumentError(
            "address",
            "must be an address the other voters can dial, not 0.0.0.0 or ::",
            shape=False,
        )
