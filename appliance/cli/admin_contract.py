"""``appliance admin renew-grant|amend-remote|amend-limits|add-worker|drain-worker|undrain-worker|
remove-worker|add-voter|promote-voter|remove-voter``.

The admin commands of issues 20 and 33: the contract amendments, the fleet's amendments and the
Raft membership changes. Each sends one command of the table (``renew_grant``, ``amend_remote``,
``amend_limits``, ``add_worker``, ``drain_worker``, ``undrain_worker``, ``remove_worker``,
``add_voter``, ``promote_voter``, ``remove_voter``) to the management listener with the *admin*
credential (``management.admin_bearer_env``; the variable
named by ``--token-env``, default ``MCP_SCHEDULER_ADMIN_TOKEN``), through the same endpoint
handling as the other operator commands (admin_ops.py): loopback only, sent to the acquired
owner, never re-sent after an ambiguous send. Values are checked again by the owner; a refusal
is printed with its reason and exits 1. ``promote-voter --wait-s S`` asks again, once a second for
at most S seconds, while the refusal is "has not caught up" (the learner is still installing the
leader's snapshot): that refusal is definite, so asking again is safe; nothing else is repeated.

An amendment always carries ``base_amendment`` (issue 36): the ``contract.amendment`` index that
``status`` shows, read from the owner just before sending (or ``--base-amendment N``, the index
the operator decided on). If another amendment commits in between, the owner refuses this one
(``base_amendment … read status and amend again``) rather than overwriting it unseen. When the
index cannot be read, nothing is sent.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from typing import Any, Final

from appliance.cli import admin_ops
from appliance.cli.admin_endpoints import Failed, UsageError, endpoints, send
from appliance.http import HttpClient

ADMIN_TOKEN_ENV: Final = "MCP_SCHEDULER_ADMIN_TOKEN"
LIMIT_FLAGS: Final = ("schedules", "records", "outstanding", "running", "grace_seconds")


def _renew(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("expires_at", metavar="EXPIRES_AT", help="RFC 3339, later than now")
    parser.add_argument("--timeout-seconds", type=int, metavar="N")
    parser.add_argument("--heap-mb", type=int, metavar="N")
    parser.add_argument("--session", metavar="S")


def _remote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", metavar="URL", help="the worker origin, http(s)://host[:port]")
    parser.add_argument("--worker-id", metavar="ID", help="the worker identity to bind claims to")


def _label(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _worker_id(parser: argparse.ArgumentParser, what: str) -> None:
    """The worker's id, positional or as ``--worker-id`` (either spelling)."""
    parser.add_argument("worker_id", nargs="?", metavar="WORKER_ID", help=what)
    parser.add_argument("--worker-id", dest="worker_id_flag", metavar="WORKER_ID", help=what)


def _add_worker(parser: argparse.ArgumentParser) -> None:
    _worker_id(parser, "the new worker's worker_id")
    parser.add_argument(
        "--url", required=True, metavar="URL", help="its origin, http(s)://host[:port]"
    )
    parser.add_argument(
        "--label",
        type=_label,
        action="append",
        dest="labels",
        metavar="NAME=VALUE",
        help="a placement label (repeat for several)",
    )
    parser.add_argument(
        "--bearer-env", metavar="NAME", help="its worker credential's variable (on every voter)"
    )
    parser.add_argument(
        "--admission-bearer-env",
        metavar="NAME",
        help="its own admission credential's variable (on every voter)",
    )


def _worker(parser: argparse.ArgumentParser) -> None:
    _worker_id(parser, "a worker of the fleet")


def _limits(parser: argparse.ArgumentParser) -> None:
    for name in LIMIT_FLAGS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, metavar="N", dest=name)


def _add_voter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the new node's node_id")
    parser.add_argument(
        "address", metavar="HOST:PORT", help="its cluster listener (advertise_addr:cluster_port)"
    )


def _promote_voter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the learner's node_id")
    parser.add_argument(
        "--wait-s",
        type=float,
        default=0.0,
        metavar="S",
        help="ask again once a second, for at most S seconds, while the learner has not caught up",
    )


def _remove_voter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the node_id to remove (the leader too)")


def _base(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-amendment",
        type=int,
        metavar="N",
        help="the contract.amendment this change is built on (default: the one status shows "
        "now); refused if another amendment committed since",
    )


def _amendment(arguments: Any) -> Any:
    def add(parser: argparse.ArgumentParser) -> None:
        arguments(parser)
        _base(parser)

    return add


CAUGHT_UP_REFUSAL: Final = "has not caught up"
RETRY_INTERVAL_S: Final = 1.0

_SPECS: Final = (
    (
        "renew-grant",
        "renew_grant",
        "renew the execution grant (new claims only)",
        _amendment(_renew),
    ),
    (
        "amend-remote",
        "amend_remote",
        "change the worker URL and/or identity (refused while attempts are live)",
        _amendment(_remote),
    ),
    (
        "amend-limits",
        "amend_limits",
        "change limits (lowering only when the state fits)",
        _amendment(_limits),
    ),
    (
        "add-worker",
        "add_worker",
        "a new worker joins the fleet (issue 33)",
        _amendment(_add_worker),
    ),
    (
        "drain-worker",
        "drain_worker",
        "no new placements on a worker; its attempts finish",
        _amendment(_worker),
    ),
    (
        "undrain-worker",
        "undrain_worker",
        "a drained worker takes placements again",
        _amendment(_worker),
    ),
    (
        "remove-worker",
        "remove_worker",
        "remove a worker from the fleet (refused while attempts bound to it are live)",
        _amendment(_worker),
    ),
    ("add-voter", "add_voter", "a new node joins the Raft configuration as a learner", _add_voter),
    ("promote-voter", "promote_voter", "a caught-up learner becomes a voter", _promote_voter),
    (
        "remove-voter",
        "remove_voter",
        "remove a voter or learner (the leader hands over)",
        _remove_voter,
    ),
)
_FIELDS: Final = {
    "renew_grant": ("expires_at", "timeout_seconds", "heap_mb", "session"),
    "amend_remote": ("url", "worker_id"),
    "amend_limits": LIMIT_FLAGS,
    "add_worker": ("worker_id", "url", "labels", "bearer_env", "admission_bearer_env"),
    "drain_worker": ("worker_id",),
    "undrain_worker": ("worker_id",),
    "remove_worker": ("worker_id",),
    "add_voter": ("id", "address"),
    "promote_voter": ("id",),
    "remove_voter": ("id",),
}


def register(groups: argparse._SubParsersAction) -> None:
    for name, action, help_text, arguments in _SPECS:
        parser = groups.add_parser(name, help=f"admin: {help_text}", description=help_text)
        arguments(parser)
        admin_ops._common(parser, ADMIN_TOKEN_ENV)
        parser.set_defaults(func=run, ops_action=action)


def command_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The command's fields from the flags given (the ones left out are not sent)."""
    flag = getattr(args, "worker_id_flag", None)
    if flag is not None:
        if getattr(args, "worker_id", None) not in (None, flag):
            raise SystemExit("appliance: give the worker id once (WORKER_ID or --worker-id)")
        args.worker_id = flag
    fields = {
        field: getattr(args, field)
        for field in _FIELDS[args.ops_action]
        if getattr(args, field, None) is not None
    }
    if "labels" in fields:  # --label NAME=VALUE, repeated: one object (the last value wins)
        fields["labels"] = dict(fields["labels"])
    return fields


AMENDMENTS: Final = frozenset(
    {
        "renew_grant",
        "amend_remote",
        "amend_limits",
        "add_worker",
        "drain_worker",
        "undrain_worker",
        "remove_worker",
    }
)
STATUS_PATH: Final = "/scheduler/v1/status"


def amendment_in_force(args: argparse.Namespace) -> int:
    """``contract.amendment`` as the owner among ``--addr`` shows it now; ``Failed`` when it
    cannot be read (then nothing is sent)."""
    try:
        context = admin_ops._tls_context(getattr(args, "cacert", None))
        bases = endpoints(args.addr)
        token = admin_ops._token(args.token_env)
    except UsageError as exc:
        raise Failed(str(exc)) from None
    client = HttpClient(read_timeout_ms=admin_ops.READ_TIMEOUT_MS, ssl_context=context)
    try:
        sent = send(client, bases, token, "GET", STATUS_PATH, None)
    finally:
        client.close()
    result = sent.reply.get("result") if sent.status == 200 else None
    contract = result.get("contract") if isinstance(result, dict) else None
    index = contract.get("amendment") if isinstance(contract, dict) else None
    if type(index) is not int:
        why = admin_ops.describe_error(sent.status, sent.reply).removeprefix("appliance: ")
        raise Failed(f"cannot read the amendment in force from {sent.base} ({why})")
    return index


def run(args: argparse.Namespace, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    args.command_fields = command_fields(args)
    if args.ops_action in AMENDMENTS:
        base = getattr(args, "base_amendment", None)
        if base is not None and base < 0:
            print("appliance: --base-amendment must be 0 or more", file=stderr or sys.stderr)
            return admin_ops.EXIT_USAGE
        if base is None:
            try:
                base = amendment_in_force(args)
            except Failed as exc:
                print(
                    f"appliance: base_amendment: {exc}; nothing was sent",
                    file=stderr or sys.stderr,
                )
                return admin_ops.EXIT_FAILURE
        args.command_fields["base_amendment"] = base
    wait_s = max(0.0, float(getattr(args, "wait_s", 0.0) or 0.0))
    if wait_s <= 0:
        return admin_ops.run(args, stdin, stdout, stderr)
    deadline = time.monotonic() + wait_s
    while True:  # promote-voter --wait-s: only the definite "not caught up" refusal is repeated
        out, err = io.StringIO(), io.StringIO()
        code = admin_ops.run(args, stdin, out, err)
        again = code != 0 and CAUGHT_UP_REFUSAL in err.getvalue()
        if not again or time.monotonic() + RETRY_INTERVAL_S > deadline:
            (stdout or sys.stdout).write(out.getvalue())
            (stderr or sys.stderr).write(err.getvalue())
            return code
        time.sleep(RETRY_INTERVAL_S)
