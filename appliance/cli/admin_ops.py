"""``appliance admin status|list|history|output|create|disable|cancel|delete|acknowledge-stopped``
and the commands beyond the seeds: ``run-now|enable|update|pause|resume|backfill``.

Operator commands over the management listener (docs/management.md). The bearer comes from an
environment variable named with ``--token-env`` (never from a flag value, which would show in
``ps`` and shell history); the address must be loopback, like the listener itself, so the token
never crosses a network in clear. Human-readable tables by default, ``--json`` prints the
listener's JSON reply unchanged for scripts.

``status`` also shows the voter's health view (every voter's role, term, reachability and lag, the
acquired owner and epoch, the worker, the grant, warnings); with ``--worker-metrics`` it scrapes
the worker's metrics listener for pool pressure. ``history SCHEDULE_ID`` prints the schedule's drop
counters, recent drop reasons and every retained occurrence's transition timeline; ``output
OCCURRENCE_ID`` prints an occurrence's console output, fetched through the runner from the worker.

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
from appliance.config.loopback import ENV_NAMES
from appliance.http import AmbiguousSend, ConnectFailed, HttpClient

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
ADDR_ENV: Final = "APPLIANCE_MANAGEMENT_ADDR"
ADDR_DEFAULT: Final = "127.0.0.1:4601"
# The names the generated configs use (quickstart, cluster init): their admin commands need no flag.
OPERATOR_TOKEN_ENV: Final = ENV_NAMES["operator"]
RECOVERY_TOKEN_ENV: Final = ENV_NAMES["recovery"]
DEFINITION_FILE_BYTES_MAX: Final = 72 * 1024
READ_TIMEOUT_MS: Final = 60_000
WORKER_TOKEN_ENV: Final = "MCP_SCHEDULED_WORKER_TOKEN"
WORKER_METRICS_BYTES_MAX: Final = 1024 * 1024


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
            "history",
            "a schedule's drop counters, recent drop reasons and occurrence timelines",
            lambda p: p.add_argument("schedule_id", type=int, metavar="SCHEDULE_ID"),
        ),
        (
            "output",
            "an occurrence's console output, fetched from the worker through the runner",
            lambda p: p.add_argument("occurrence_id", type=int, metavar="OCCURRENCE_ID"),
        ),
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
    specs += _extension_specs()
    for name, help_text, extra in specs:
        parser = groups.add_parser(name, help=help_text, description=help_text)
        if extra is not None:
            extra(parser)
        _common(parser, OPERATOR_TOKEN_ENV)
        parser.set_defaults(func=run, ops_action=name.replace("-", "_"))
        if name == "status":
            parser.add_argument(
                "--worker-metrics",
                metavar="HOST:PORT",
                default=None,
                help="also scrape the worker's metrics listener (loopback) for pool pressure",
            )
            parser.add_argument(
                "--worker-token-env",
                default=WORKER_TOKEN_ENV,
                metavar="NAME",
                help=f"environment variable holding the worker bearer (default {WORKER_TOKEN_ENV})",
            )
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


def _extension_specs() -> list[tuple[str, str, Callable[[argparse.ArgumentParser], None] | None]]:
    """The operator commands beyond seeds/001 (docs/policies.md, "Operator commands")."""

    def run_now(p: argparse.ArgumentParser) -> None:
        p.add_argument("id", type=int, metavar="ID")
        p.add_argument(
            "--request-id",
            metavar="KEY",
            help="deduplication key: repeating with the same key after an uncertain answer "
            "returns the first answer and runs nothing twice",
        )

    def enable(p: argparse.ArgumentParser) -> None:
        p.add_argument("id", type=int, metavar="ID")
        p.add_argument("--catch-up", action="store_true", help=CATCH_UP_HELP)

    def update(p: argparse.ArgumentParser) -> None:
        p.add_argument("id", type=int, metavar="ID")
        p.add_argument("--cron", help="a new cron expression")
        p.add_argument("--timezone", help="a new IANA timezone")
        p.add_argument("--name", help="a new name")
        p.add_argument("--no-name", action="store_true", help="remove the name")
        p.add_argument("--code-file", metavar="FILE|-", help="the new JavaScript source")
        p.add_argument("--policy-file", metavar="FILE|-", help="a new policy object (JSON)")

    def resume(p: argparse.ArgumentParser) -> None:
        p.add_argument("--catch-up", action="store_true", help=CATCH_UP_HELP)

    def backfill(p: argparse.ArgumentParser) -> None:
        p.add_argument("id", type=int, metavar="ID")
        p.add_argument("--start", required=True, metavar="INSTANT", help="RFC 3339, inclusive")
        p.add_argument("--end", required=True, metavar="INSTANT", help="RFC 3339, inclusive")
        p.add_argument(
            "--overlap",
            choices=("Skip", "Queue", "Concurrent"),
            help="how the backfilled slots are admitted (default Queue)",
        )
        p.add_argument(
            "--preview", action="store_true", help="show what it would create; create nothing"
        )

    return [
        ("run-now", "run a schedule once now (through its overlap policy)", run_now),
        ("enable", "enable a schedule (no backlog unless --catch-up)", enable),
        ("update", "change a schedule's cron, timezone, name, code or policy", update),
        ("pause", "pause all scheduling cluster-wide (running work continues)", None),
        ("resume", "resume scheduling (the paused span is skipped unless --catch-up)", resume),
        ("backfill", "create occurrences for past slots that have none", backfill),
    ]


CATCH_UP_HELP: Final = "apply the schedule's missed policy to the span instead of skipping it"
TEXT_FILE_BYTES_MAX: Final = 72 * 1024


def _extension_command(args: argparse.Namespace, stdin: Any) -> dict[str, Any] | None:
    action = args.ops_action
    if action == "run_now":
        command: dict[str, Any] = {"action": action, "id": _positive(args.id, "ID")}
        if args.request_id is not None:
            command["request_id"] = args.request_id
        return command
    if action in ("enable", "resume"):
        command = {"action": action}
        if action == "enable":
            command["id"] = _positive(args.id, "ID")
        if args.catch_up:
            command["catch_up"] = True
        return command
    if action == "pause":
        return {"action": action}
    if action == "update":
        return _update_command(args, stdin)
    if action == "backfill":
        command = {
            "action": "backfill_preview" if args.preview else "backfill",
            "id": _positive(args.id, "ID"),
            "start": args.start,
            "end": args.end,
        }
        if args.overlap is not None:
            command["overlap"] = args.overlap
        return command
    return None


def _update_command(args: argparse.Namespace, stdin: Any) -> dict[str, Any]:
    command: dict[str, Any] = {"action": "update", "id": _positive(args.id, "ID")}
    for field in ("cron", "timezone", "name"):
        value = getattr(args, field)
        if value is not None:
            command[field] = value
    if args.no_name:
        if "name" in command:
            raise UsageError("give either --name or --no-name")
        command["name"] = None
    if args.code_file is not None:
        command["code"] = _read_text(args.code_file, stdin, "the code")
    if args.policy_file is not None:
        try:
            policy = json.loads(_read_text(args.policy_file, stdin, "the policy"))
        except ValueError as exc:
            raise UsageError(f"the policy is not valid JSON: {exc}") from None
        if not isinstance(policy, dict):
            raise UsageError("the policy must be a JSON object")
        command["policy"] = policy
    if len(command) == 2:
        raise UsageError(
            "update needs at least one of --cron, --timezone, --name, --no-name, --code-file, "
            "--policy-file"
        )
    return command


def _read_text(source: str, stdin: Any, what: str) -> str:
    try:
        if source == "-":
            text = (stdin or sys.stdin).read(TEXT_FILE_BYTES_MAX + 1)
        else:
            with Path(source).open(encoding="utf-8") as handle:
                text = handle.read(TEXT_FILE_BYTES_MAX + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {source}: {exc}") from None
    if len(text.encode("utf-8")) > TEXT_FILE_BYTES_MAX:
        raise UsageError(f"{what} is larger than {TEXT_FILE_BYTES_MAX} bytes")
    return str(text)


def build_request(args: argparse.Namespace, stdin: Any = None) -> tuple[str, str, bytes | None]:
    """(method, path, body) for the chosen command; raises UsageError."""
    action = args.ops_action
    if action == "status":
        return "GET", "/scheduler/v1/status", None
    if action == "list":
        return "GET", "/scheduler/v1/schedules", None
    if action == "history":
        return (
            "GET",
            f"/scheduler/v1/schedules/{_positive(args.schedule_id, 'SCHEDULE_ID')}/history",
            None,
        )
    if action == "output":
        oid = _positive(args.occurrence_id, "OCCURRENCE_ID")
        return "GET", f"/scheduler/v1/occurrences/{oid}/output", None
    extended = _extension_command(args, stdin)
    if extended is not None:
        return "POST", "/scheduler/v1/commands", json.dumps(extended).encode()
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


class Failed(Exception):
    """The request failed before a reply could be read; the message says what was (not) sent."""


def _call(
    client: HttpClient, base: str, token: str, method: str, path: str, body: bytes | None
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"} if body is not None else None
    try:
        response = client.request(method, base + path, body=body, headers=headers, bearer=token)
    except ConnectFailed as exc:
        raise Failed(
            f"cannot reach the management listener ({exc.reason}); nothing was sent"
        ) from None
    except AmbiguousSend as exc:
        raise Failed(
            f"the request may have been received ({exc.reason}); its outcome is "
            "uncertain: inspect state with 'appliance admin status' and 'list'"
        ) from None
    try:
        reply = response.json()
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise Failed(f"unexpected HTTP {response.status} reply")
    return response.status, reply


def run(args: argparse.Namespace, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        base = _base_url(args.addr)
        token = _token(args.token_env)
        method, path, body = build_request(args, stdin)
        worker = _worker_metrics_target(args)
    except UsageError as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_USAGE
    client = HttpClient(read_timeout_ms=READ_TIMEOUT_MS)
    try:
        status, reply = _call(client, base, token, method, path, body)
        health = None
        if args.ops_action == "status":
            health_status, health_reply = _call(client, base, token, "GET", HEALTH_PATH, None)
            health = health_reply if health_status == 200 else None
            if health is not None and worker is not None:
                health["pool"] = _pool_pressure(client, *worker)
    except Failed as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_FAILURE
    finally:
        client.close()
    if args.json:
        document = reply if health is None else {"status": reply, "health": health}
        print(json.dumps(document, indent=2, ensure_ascii=False), file=out)
    ok = status == 200 and reply.get("ok") is True
    if not args.json:
        if health is not None:
            print(render_health(health), file=out)
        if ok:
            print(_render_ok(args.ops_action, reply), file=out)
    if not ok:
        print(describe_error(status, reply), file=err)
        return EXIT_FAILURE
    return EXIT_OK


HEALTH_PATH: Final = "/scheduler/v1/health"


def _render_ok(action: str, reply: dict[str, Any]) -> str:
    if action == "history":
        return render_history(reply)
    if action == "output":
        return render_output(reply)
    return render(reply)


def _worker_metrics_target(args: argparse.Namespace) -> tuple[str, str] | None:
    addr = getattr(args, "worker_metrics", None)
    if addr is None:
        return None
    return _base_url(addr) + "/metrics", _token(args.worker_token_env)


def _pool_pressure(client: HttpClient, url: str, token: str) -> dict[str, Any]:
    """Pool gauges from the worker's metrics listener (``reachable: false`` when it fails)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        response = client.get(url, bearer=token, response_bytes_max=WORKER_METRICS_BYTES_MAX)
    except (ConnectFailed, AmbiguousSend) as exc:
        return {"reachable": False, "detail": exc.reason}
    if response.status != 200:
        return {"reachable": True, "detail": f"HTTP {response.status}"}
    pool: dict[str, Any] = {"reachable": True}
    prefix = "appliance_engine_pool_"
    for family in text_string_to_metric_families(response.body.decode("utf-8", "replace")):
        for sample in family.samples:
            if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
                pool[sample.name[len(prefix) :]] = int(sample.value)
    return pool


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


# ---- health, history, output ---------------------------------------------------------------------


def _days(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    return f"{seconds / 86400:.1f} days"


def render_health(health: dict[str, Any]) -> str:
    ownership = health.get("ownership") or {}
    grant = health.get("grant") or {}
    checkpoint = health.get("checkpoint") or {}
    here = " (acquired here)" if ownership.get("acquired_here") else ""
    lines = [
        f"health as seen by {health.get('node')} (leader: {health.get('leader') or 'none'})",
        f"owner       {ownership.get('node') or 'none'} epoch {ownership.get('epoch')}{here}",
        f"grant       expires {grant.get('expires_at')} (in {_days(grant.get('seconds_left'))})",
        f"checkpoint  {checkpoint.get('bytes')} bytes, budget {checkpoint.get('budget_bytes')} "
        f"of {checkpoint.get('bytes_max')}",
    ]
    worker = health.get("worker")
    if isinstance(worker, dict):
        state = "reachable" if worker.get("reachable") else "UNREACHABLE"
        if worker.get("reachable") and not worker.get("authorized"):
            state = "reachable, bearer REFUSED"
        lines.append(f"worker      {worker.get('url')} {state}")
    pool = health.get("pool")
    if isinstance(pool, dict):
        if "running" in pool:
            lines.append(
                f"pool        running {pool.get('running')}/{pool.get('max_concurrent')}, "
                f"queued {pool.get('queued')}/{pool.get('max_queued')}, "
                f"saturated {pool.get('saturation_events_total', 0)} times"
            )
        else:
            lines.append(f"pool        unavailable ({pool.get('detail', '')})")
    voters = [
        {
            "voter": v.get("node"),
            "role": v.get("role"),
            "term": v.get("term"),
            "reachable": "yes" if v.get("reachable") else "NO",
            "lag": v.get("lag_entries"),
        }
        for v in health.get("voters") or []
        if isinstance(v, dict)
    ]
    parts = ["\n".join(lines), table(voters)]
    warnings = [w for w in health.get("warnings") or [] if isinstance(w, dict)]
    if warnings:
        parts.append("\n".join(f"WARNING {w.get('code')}: {w.get('message')}" for w in warnings))
    else:
        parts.append("no warnings")
    return "\n\n".join(parts)


def history_rows(occurrences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per transition; the occurrence's fixed fields only on its first/last row."""
    rows: list[dict[str, Any]] = []
    jittered = any(occurrence.get("starts_at") for occurrence in occurrences)
    for occurrence in occurrences:
        timeline = occurrence.get("timeline") or [{}]
        for i, step in enumerate(timeline):
            first, last = i == 0, i == len(timeline) - 1
            rows.append(
                {
                    "occurrence": occurrence.get("id") if first else "",
                    "due": occurrence.get("due_at") if first else "",
                    "attempt": step.get("attempt"),
                    "state": step.get("state"),
                    "at": step.get("at"),
                    "reason": step.get("reason"),
                    "execution": (occurrence.get("execution_id") or "") if last else "",
                    "failure": (occurrence.get("failure_reason") or "") if last else "",
                }
            )
            if jittered:  # a STARTS column only when a jittered record is shown
                start = occurrence.get("starts_at") if first else ""
                rows[-1] = {**rows[-1], "starts": start or ""}
    return rows


def render_history(reply: dict[str, Any]) -> str:
    schedule = reply.get("schedule") or {}
    definition = schedule.get("definition") or {}
    policy = definition.get("policy") or {}
    dropped = reply.get("dropped") or {}
    head = [
        f"schedule {schedule.get('id')} {definition.get('name') or ''}".rstrip()
        + f" ({'enabled' if schedule.get('enabled') else 'disabled'})",
        f"cron {definition.get('cron')} {definition.get('timezone')}, missed "
        f"{json.dumps(policy.get('missed'))}, overlap {policy.get('overlap')}",
        "dropped slots: "
        + ", ".join(
            f"{reason} {dropped.get(reason, 0)}" for reason in ("missed", "overlap", "capacity")
        )
        + f" (observed up to {reply.get('cursor_at')})",
    ]
    parts = ["\n".join(head)]
    recent = reply.get("recent_drops") or []
    parts.append(f"recent drops:\n{table(recent)}")
    parts.append(f"timeline:\n{table(history_rows(reply.get('occurrences') or []))}")
    parts.append("(a local view of this voter's replica; it may lag the acquired owner)")
    return "\n\n".join(parts)


def render_output(reply: dict[str, Any]) -> str:
    output = reply.get("output") or {}
    text = output.get("text") or ""
    note = (
        f"-- occurrence {reply.get('occurrence_id')} attempt {reply.get('attempt')} "
        f"({reply.get('execution_id')}, {reply.get('status')}): {output.get('bytes')} bytes"
    )
    if output.get("truncated"):
        note += ", truncated"
    return f"{text}{'' if text.endswith(chr(10)) or not text else chr(10)}{note} --"
