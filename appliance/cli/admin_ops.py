"""``appliance admin status|list|create|disable|cancel|delete|acknowledge-stopped``.

Operator commands over the management listener (docs/management.md). The bearer comes from an
environment variable named with ``--token-env`` (never from a flag value, which would show in
``ps`` and shell history); the address must be loopback, like the listener itself, so the token
never crosses a network in clear. Human-readable tables by default, ``--json`` prints the
listener's JSON reply unchanged for scripts.

Exit codes: 0 success; 1 refused or failed (including an uncertain outcome: the message says to
inspect state, never to retry creation blindly); 2 invalid input (nothing was sent).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from appliance.config.addresses import AddressError, is_loopback_host, parse_host_port
from appliance.http import AmbiguousSend, ConnectFailed, HttpClient

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
ADDR_ENV: Final = "APPLIANCE_MANAGEMENT_ADDR"
ADDR_DEFAULT: Final = "127.0.0.1:4601"
OPERATOR_TOKEN_ENV: Final = "MCP_SCHEDULER_OPERATOR_TOKEN"
RECOVERY_TOKEN_ENV: Final = "MCP_SCHEDULER_RECOVERY_TOKEN"
DEFINITION_FILE_BYTES_MAX: Final = 72 * 1024
READ_TIMEOUT_MS: Final = 60_000


class UsageError(Exception):
    """Invalid input: nothing was sent."""


def _common(parser: argparse.ArgumentParser, token_env: str) -> None:
    parser.add_argument(
        "--addr",
        default=os.environ.get(ADDR_ENV, ADDR_DEFAULT),
        help=f"management listener host:port, loopback only (default ${ADDR_ENV} or "
        f"{ADDR_DEFAULT})",
    )
    parser.add_argument(
        "--token-env",
        default=token_env,
        metavar="NAME",
        help=f"environment variable holding the bearer (default {token_env})",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON reply unchanged")


def register(groups: argparse._SubParsersAction) -> None:
    specs: list[tuple[str, str, Callable[[argparse.ArgumentParser], None] | None]] = [
        ("status", "status of the voter behind the listener (ownership, term, counts)", None),
        ("list", "list schedules and occurrences (a stale local view)", None),
        (
            "create",
            "create a schedule from a definition JSON file (or - for stdin)",
            lambda p: p.add_argument("file", metavar="FILE|-"),
        ),
        (
            "disable",
            "disable a schedule (stops future selection only)",
            lambda p: p.add_argument("id", type=int, metavar="ID"),
        ),
        (
            "cancel",
            "request cancellation of an occurrence (records intent)",
            lambda p: p.add_argument("occurrence_id", type=int, metavar="OCCURRENCE"),
        ),
        (
            "delete",
            "delete a schedule definition",
            lambda p: p.add_argument("id", type=int, metavar="ID"),
        ),
    ]
    for name, help_text, extra in specs:
        parser = groups.add_parser(name, help=help_text, description=help_text)
        if extra is not None:
            extra(parser)
        _common(parser, OPERATOR_TOKEN_ENV)
        parser.set_defaults(func=run, ops_action=name)
    ack = groups.add_parser(
        "acknowledge-stopped",
        help="recovery: mark an Unknown/Cancelling occurrence Abandoned (human attestation)",
        description="Marks an Unknown or unresolved Cancelling occurrence Abandoned without "
        "replay. Pass --attest-quiesced ONLY after you have established that the old "
        "dispatcher cannot submit and that the accepted work has stopped (see the recovery "
        "guide). Needs the recovery credential.",
    )
    ack.add_argument("occurrence_id", type=int, metavar="OCCURRENCE")
    ack.add_argument(
        "--attest-quiesced",
        action="store_true",
        help="I attest that the old dispatcher and the accepted work are quiescent",
    )
    _common(ack, RECOVERY_TOKEN_ENV)
    ack.set_defaults(func=run, ops_action="acknowledge_stopped")


def build_request(args: argparse.Namespace, stdin: Any = None) -> tuple[str, str, bytes | None]:
    """(method, path, body) for the chosen command; raises UsageError."""
    action = args.ops_action
    if action == "status":
        return "GET", "/scheduler/v1/status", None
    if action == "list":
        return "GET", "/scheduler/v1/schedules", None
    command: dict[str, Any] = {"action": action}
    if action == "create":
        command["definition"] = _read_definition(args.file, stdin or sys.stdin)
    elif action in ("disable", "delete"):
        command["id"] = _positive(args.id, "ID")
    elif action == "cancel":
        command["occurrence_id"] = _positive(args.occurrence_id, "OCCURRENCE")
    elif action == "acknowledge_stopped":
        if not args.attest_quiesced:
            raise UsageError(
                "acknowledge-stopped needs --attest-quiesced: establish first that the old "
                "dispatcher cannot submit and the accepted work has stopped"
            )
        command["occurrence_id"] = _positive(args.occurrence_id, "OCCURRENCE")
        command["dispatcher_and_work_quiesced"] = True
    return "POST", "/scheduler/v1/commands", json.dumps(command).encode()


def _positive(value: int, name: str) -> int:
    if value < 1:
        raise UsageError(f"{name} must be a positive integer")
    return value


def _read_definition(source: str, stdin: Any) -> Any:
    try:
        if source == "-":
            text = stdin.read(DEFINITION_FILE_BYTES_MAX + 1)
        else:
            with Path(source).open(encoding="utf-8") as handle:
                text = handle.read(DEFINITION_FILE_BYTES_MAX + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the definition {source}: {exc}") from None
    if len(text.encode("utf-8")) > DEFINITION_FILE_BYTES_MAX:
        raise UsageError(f"the definition is larger than {DEFINITION_FILE_BYTES_MAX} bytes")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the definition is not valid JSON: {exc}") from None
    if isinstance(value, dict) and value.get("action") == "create" and "definition" in value:
        value = value["definition"]  # a whole stdin command works too
    if not isinstance(value, dict):
        raise UsageError("the definition must be a JSON object")
    return value


def _base_url(addr: str) -> str:
    try:
        parsed = parse_host_port(addr)
    except AddressError as exc:
        raise UsageError(f"--addr: {exc}") from None
    if not is_loopback_host(parsed.host):
        raise UsageError(
            f"--addr must be a loopback address (the listener is loopback-only), got {addr}"
        )
    return f"http://{parsed}"


def _token(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise UsageError(f"environment variable {name} (--token-env) is not set or empty")
    return value


def run(args: argparse.Namespace, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        base = _base_url(args.addr)
        token = _token(args.token_env)
        method, path, body = build_request(args, stdin)
    except UsageError as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_USAGE
    client = HttpClient(read_timeout_ms=READ_TIMEOUT_MS)
    headers = {"Content-Type": "application/json"} if body is not None else None
    try:
        response = client.request(method, base + path, body=body, headers=headers, bearer=token)
    except ConnectFailed as exc:
        print(
            f"appliance: cannot reach the management listener ({exc.reason}); nothing was sent",
            file=err,
        )
        return EXIT_FAILURE
    except AmbiguousSend as exc:
        print(
            f"appliance: the request may have been received ({exc.reason}); its outcome is "
            "uncertain: inspect state with 'appliance admin status' and 'list'",
            file=err,
        )
        return EXIT_FAILURE
    finally:
        client.close()
    try:
        reply = response.json()
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        print(f"appliance: unexpected HTTP {response.status} reply", file=err)
        return EXIT_FAILURE
    if args.json:
        print(json.dumps(reply, indent=2, ensure_ascii=False), file=out)
    if response.status != 200 or reply.get("ok") is not True:
        print(describe_error(response.status, reply), file=err)
        return EXIT_FAILURE
    if not args.json:
        print(render(reply), file=out)
    return EXIT_OK


def describe_error(status: int, reply: dict[str, Any]) -> str:
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    text = f"appliance: HTTP {status} {error.get('code', 'error')}: {error.get('message', '')}"
    if reply.get("leader_hint"):
        text += f" (leader hint: {reply['leader_hint']})"
    if reply.get("accepted") is False:
        text += " [not accepted]"
    if reply.get("outcome") == "uncertain":
        text += " [outcome uncertain, retry_safe: false]"
    return text


# ---- tables ------------------------------------------------------------------------------------


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        elif isinstance(value, list):
            flat[name] = ",".join(str(item) for item in value)
        else:
            flat[name] = "-" if value is None else str(value)
    return flat


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    flat = [_flatten(row) for row in rows]
    columns: list[str] = []
    for row in flat:
        columns.extend(key for key in row if key not in columns)
    widths = {c: max(len(c), *(len(row.get(c, "")) for row in flat)) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip()]
    for row in flat:
        lines.append("  ".join(row.get(c, "").ljust(widths[c]) for c in columns).rstrip())
    return "\n".join(lines)


def render(reply: dict[str, Any]) -> str:
    result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
    parts: list[str] = []
    scalars = {k: v for k, v in result.items() if not isinstance(v, list)}
    if scalars:
        flat = _flatten(scalars)
        width = max(len(key) for key in flat)
        parts.append("\n".join(f"{key.ljust(width)}  {value}" for key, value in flat.items()))
    for key, value in result.items():
        if isinstance(value, list):
            rows = [item if isinstance(item, dict) else {"value": item} for item in value]
            parts.append(f"{key}:\n{table(rows)}")
    parts.append(f"({reply.get('meaning', '')})")
    return "\n\n".join(parts)
