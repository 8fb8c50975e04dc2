"""``appliance admin renew-grant|amend-remote|amend-limits``: the contract amendments (issue 20).

Each sends one command of the table (``renew_grant``, ``amend_remote``, ``amend_limits``) to the
management listener with the *admin* credential (``management.admin_bearer_env``; the variable
named by ``--token-env``, default ``MCP_SCHEDULER_ADMIN_TOKEN``), through the same endpoint
handling as the other operator commands (admin_ops.py): loopback only, sent to the acquired
owner, never re-sent after an ambiguous send. Values are checked again by the owner; a refusal
is printed with its reason and exits 1.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from appliance.cli import admin_ops

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


def _limits(parser: argparse.ArgumentParser) -> None:
    for name in LIMIT_FLAGS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, metavar="N", dest=name)


_SPECS: Final = (
    ("renew-grant", "renew_grant", "renew the execution grant (new claims only)", _renew),
    (
        "amend-remote",
        "amend_remote",
        "change the worker URL and/or identity (refused while attempts are live)",
        _remote,
    ),
    ("amend-limits", "amend_limits", "change limits (lowering only when the state fits)", _limits),
)
_FIELDS: Final = {
    "renew_grant": ("expires_at", "timeout_seconds", "heap_mb", "session"),
    "amend_remote": ("url", "worker_id"),
    "amend_limits": LIMIT_FLAGS,
}


def register(groups: argparse._SubParsersAction) -> None:
    for name, action, help_text, arguments in _SPECS:
        parser = groups.add_parser(name, help=f"admin: {help_text}", description=help_text)
        arguments(parser)
        admin_ops._common(parser, ADMIN_TOKEN_ENV)
        parser.set_defaults(func=run, ops_action=action)


def command_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The command's fields from the flags given (the ones left out are not sent)."""
    return {
        field: getattr(args, field)
        for field in _FIELDS[args.ops_action]
        if getattr(args, field, None) is not None
    }


def run(args: argparse.Namespace, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    args.command_fields = command_fields(args)
    return admin_ops.run(args, stdin, stdout, stderr)
