"""``appliance admin status|list|history|output|create|disable|cancel|delete|acknowledge-stopped``
and the commands beyond the seeds: ``run-now|enable|update|pause|resume|backfill``.

Operator commands over the management listener (docs/management.md). The bearer comes from an
environment variable named with ``--token-env`` (never from a flag value, which would show in
``ps`` and shell history); every address must be loopback, like the listener itself, so the token
never crosses a network in clear. Several endpoints may be given (``--addr`` repeated, or
``$APPLIANCE_MANAGEMENT_ADDR``): the command goes to the acquired owner among them
(``admin_endpoints``). Human-readable tables within 100 columns by default, times in ISO 8601
(UTC, or ``--tz``), operator-supplied text escaped (``admin_text``, ``admin_views``); ``--json``
prints the listener's JSON reply unchanged for scripts.

``status`` also shows the voter's health view (every voter's role, term, reachability and lag, the
acquired owner and epoch, the worker, the grant, warnings); with ``--worker-metrics`` it scrapes
the worker's metrics listener for pool pressure. ``history SCHEDULE_ID`` prints the schedule's drop
counters, recent drop reasons and every retained occurrence's transition timeline; ``output
OCCURRENCE_ID [--attempt N]`` prints what an attempt did (console output, completion value or
error with its stack, timings), fetched through the runner from the worker.

Exit codes: 0 success; 1 refused or failed (including an uncertain outcome: the message says to
inspect state, never to retry creation blindly); 2 invalid input (nothing was sent).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from appliance.cli import admin_describe, admin_views, admin_watch
from appliance.cli.admin_endpoints import (
    ADDR_DEFAULT,
    ADDR_ENV,
    Failed,
    UsageError,
    endpoints,
    owner_advice,
    send,
)
from appliance.cli.admin_text import BadZone, Column, escape, fit_table, iso_time, zone
from appliance.config.loopback import ENV_NAMES
from appliance.http import AmbiguousSend, ConnectFailed, HttpClient
from appliance.owner.report_text import retry_note

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
# The names the generated configs use (quickstart, cluster init): their admin commands need no flag.
OPERATOR_TOKEN_ENV: Final = ENV_NAMES["operator"]
RECOVERY_TOKEN_ENV: Final = ENV_NAMES["recovery"]
DEFINITION_FILE_BYTES_MAX: Final = 72 * 1024
READ_TIMEOUT_MS: Final = 60_000
WORKER_TOKEN_ENV: Final = "MCP_SCHEDULED_WORKER_TOKEN"
WORKER_METRICS_BYTES_MAX: Final = 1024 * 1024


def _common(parser: argparse.ArgumentParser, token_env: str) -> None:
    parser.add_argument(
        "--addr",
        action="append",
        default=None,
        metavar="HOST:PORT",
        help="a management listener, loopback only; repeat it (or list them comma-separated "
        f"in ${ADDR_ENV}) and commands go to the acquired owner among them (default "
        f"{ADDR_DEFAULT})",
    )
    parser.add_argument(
        "--tz",
        default=None,
        metavar="ZONE",
        help="show times in this IANA zone, or 'local' (default UTC)",
    )
    parser.add_argument(
        "--token-env",
        default=token_env,
        metavar="NAME",
        help=f"environment variable holding the bearer (default {token_env})",
    )
    parser.add_argument(
        "--cacert",
        metavar="FILE",
        default=None,
        help="CA file (PEM) to verify https:// targets against (--addr https://127.0.0.1:PORT "
        "for a management listener with management.tls; --worker-metrics https://... for a "
        "worker with tls)",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON reply unchanged")


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("occurrence_id", type=int, metavar="OCCURRENCE_ID")
    parser.add_argument(
        "--attempt", type=int, metavar="N", help="this attempt (default: the latest dispatched)"
    )
    parser.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="print the console output as it grows and each attempt's result, until the "
        "occurrence is terminal (exit 0 when it Succeeded, 1 otherwise)",
    )


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what",
        nargs="?",
        choices=("schedules", "occurrences"),
        default="schedules",
        help="schedules (default: next run, last outcome, counts) or occurrences",
    )
    parser.add_argument("--schedule", type=int, metavar="ID", help="occurrences of one schedule")
    parser.add_argument("--state", choices=admin_views.STATES, help="occurrences in one state only")
    parser.add_argument(
        "--limit",
        type=int,
        default=admin_views.LIMIT_DEFAULT,
        metavar="N",
        help=f"the newest N occurrences (default {admin_views.LIMIT_DEFAULT})",
    )
    parser.add_argument(
        "--absolute",
        action="store_true",
        help="times as ISO 8601 instants (default: relative, 'in 2m', '3m ago'; --tz implies it)",
    )


def register(groups: argparse._SubParsersAction) -> None:
    specs: list[tuple[str, str, Callable[[argparse.ArgumentParser], None] | None]] = [
        ("status", "status of the voter behind the listener (ownership, term, counts)", None),
        ("list", "list schedules, or occurrences (a stale local view)", _list_arguments),
        (
            "history",
            "a schedule's drop counters, recent drop reasons and occurrence timelines",
            lambda p: p.add_argument("schedule_id", type=int, metavar="SCHEDULE_ID"),
        ),
        (
            "output",
            "what an occurrence's attempt did: completion value, error and stack, console "
            "output, timings (fetched from the worker through the runner)",
            _output_arguments,
        ),
        (
            "describe",
            "one schedule whole: its definition with the code, state, next runs (with jitter), "
            "last outcomes",
            admin_describe.describe_arguments,
        ),
        (
            "apply",
            "create or update the schedule named in a definition file (idempotent); --dry-run "
            "shows the difference",
            admin_describe.apply_arguments,
        ),
        (
            "watch",
            "print committed changes (occurrence states, schedules, pause) as they commit",
            admin_watch.watch_arguments,
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
    if action == "describe":
        return "GET", "/scheduler/v1/schedules", None  # an id, or a name to look up first
    if action == "apply":  # checked offline first: nothing is sent for an invalid file
        args.wanted = admin_describe.checked_definition(
            _read_definition(args.file, stdin or sys.stdin)
        )
        return "GET", "/scheduler/v1/schedules", None
    if action == "watch":
        for flag, value in (("--schedule", args.schedule), ("--occurrence", args.occurrence)):
            if value is not None:
                _positive(value, flag)
        if args.count is not None:
            _positive(args.count, "--count")
        if args.after is not None and args.after < 0:
            raise UsageError("--after must be 0 or a positive cursor")
        return "GET", "/scheduler/v1/events", None
    if action == "output":
        oid = _positive(args.occurrence_id, "OCCURRENCE_ID")
        if args.follow and args.attempt is not None:
            raise UsageError("--follow shows the latest attempt; leave out --attempt")
        query = "" if args.attempt is None else f"?attempt={_positive(args.attempt, '--attempt')}"
        return "GET", f"/scheduler/v1/occurrences/{oid}/output{query}", None
    extended = _extension_command(args, stdin)
    if extended is not None:
        return "POST", "/scheduler/v1/commands", json.dumps(extended).encode()
    command: dict[str, Any] = {"action": action}
    # Subcommands defined elsewhere (admin_contract.py) pass their fields ready-made.
    command.update(getattr(args, "command_fields", None) or {})
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


def _tls_context(cacert: str | None) -> ssl.SSLContext | None:
    if cacert is None:
        return None
    try:
        context = ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"--cacert {cacert}: cannot load it as a CA file ({exc})") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _token(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise UsageError(f"environment variable {name} (--token-env) is not set or empty")
    return value


def run(args: argparse.Namespace, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        context = _tls_context(getattr(args, "cacert", None))  # for https:// targets
        bases = endpoints(args.addr)
        token = _token(args.token_env)
        method, path, body = build_request(args, stdin)
        worker = _worker_metrics_target(args)
        tz = zone(getattr(args, "tz", None))
    except (UsageError, BadZone) as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_USAGE
    client = HttpClient(read_timeout_ms=READ_TIMEOUT_MS, ssl_context=context)
    if args.ops_action == "watch" or (args.ops_action == "output" and args.follow):
        return _live(args, client, bases, token, tz, out, err)
    if args.ops_action in ("describe", "apply"):
        return _declarative(args, client, bases, token, tz, out, err)
    try:
        sent = send(client, bases, token, method, path, body)
        status, reply = sent.status, sent.reply
        health = None
        if args.ops_action == "status":
            # On the owner, or (when none of the endpoints is the owner) the last voter that
            # answered: its health view says why, e.g. no quorum.
            health_sent = send(client, [sent.base], token, "GET", HEALTH_PATH, None)
            health = health_sent.reply if health_sent.status == 200 else None
            if health is not None and worker is not None:
                health["pool"] = _pool_pressure(client, *worker)
    except Failed as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_FAILURE
    finally:
        client.close()
    if args.json:
        if args.ops_action == "list" and status == 200 and isinstance(reply.get("result"), dict):
            reply = {**reply, "result": _filtered(args, reply["result"])}
        document = reply if health is None else {"status": reply, "health": health}
        print(json.dumps(document, indent=2, ensure_ascii=False), file=out)
    ok = status == 200 and reply.get("ok") is True
    if not args.json:
        if health is not None:
            print(render_health(health), file=out)
        if ok:
            print(_render_ok(args, reply, tz, _is_terminal(out)), file=out)
    if not ok:
        print(describe_error(status, reply), file=err)
        if status == 409:
            print(f"appliance: {owner_advice(reply, bases)}", file=err)
        return EXIT_FAILURE
    return EXIT_OK


def _live(
    args: argparse.Namespace,
    client: HttpClient,
    bases: list[str],
    token: str,
    tz: Any,
    out: Any,
    err: Any,
) -> int:
    """``watch`` and ``output --follow``: the change feed until done (admin_watch.py)."""
    endpoint = admin_watch.Endpoint(client, bases, token, lambda text: print(text, file=err))
    try:
        if args.ops_action == "watch":
            return admin_watch.watch(args, endpoint, out, tz)
        return admin_watch.follow(
            args.occurrence_id,
            endpoint,
            out,
            tz,
            terminal=_is_terminal(out),
            as_json=args.json,
            render_result=render_output,
        )
    except Failed as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_FAILURE
    finally:
        client.close()


def _declarative(
    args: argparse.Namespace,
    client: HttpClient,
    bases: list[str],
    token: str,
    tz: Any,
    out: Any,
    err: Any,
) -> int:
    """``describe`` and ``apply`` (admin_describe.py): a lookup by name, then one request."""
    session = admin_describe.Session(client, bases, token)
    try:
        if args.ops_action == "describe":
            reply = admin_describe.describe(session, args.schedule)
            now_s = admin_describe.voter_now_s(reply) or time.time()
            text = admin_describe.render_describe(reply, now_s, tz)
        else:
            reply = admin_describe.apply(session, args.wanted, args.dry_run)
            text = admin_describe.render_apply(reply)
    except admin_describe.Refused as refused:
        print(describe_error(refused.status, refused.reply), file=err)
        if refused.status == 409:
            print(f"appliance: {owner_advice(refused.reply, bases)}", file=err)
        return EXIT_FAILURE
    except Failed as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_FAILURE
    except UsageError as exc:
        print(f"appliance: {exc}", file=err)
        return EXIT_USAGE
    finally:
        client.close()
    if args.json:
        print(json.dumps(reply, indent=2, ensure_ascii=False), file=out)
    else:
        print(text, file=out)
    return EXIT_OK


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


HEALTH_PATH: Final = "/scheduler/v1/health"


def _render_ok(args: argparse.Namespace, reply: dict[str, Any], tz: Any, terminal: bool) -> str:
    action = args.ops_action
    if action == "history":
        return render_history(reply, tz)
    if action == "output":
        return render_output(reply, terminal=terminal, tz=tz)
    if action == "list":
        result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
        relative = not args.absolute and args.tz is None
        now_s = time.time()
        if args.what == "occurrences":
            return admin_views.render_occurrences(
                result,
                schedule=args.schedule,
                state=args.state,
                limit=args.limit,
                tz=tz,
                now_s=now_s if relative else None,
            )
        if args.schedule is not None:
            result = _filtered(args, result)
        return admin_views.render_schedules(result, now_s, tz, relative)
    if action in ("pause", "resume", "update"):
        return render_switch(reply)
    return render(reply)


def _filtered(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    return admin_views.filtered_list(
        result, what=args.what, schedule=args.schedule, state=args.state, limit=args.limit
    )


def render_switch(reply: dict[str, Any]) -> str:
    """``pause``, ``resume`` and ``update`` in words (not a key/value table)."""
    result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
    action = reply.get("action")
    if action == "pause":
        text = "scheduling is paused cluster-wide"
        if result.get("changed") is False:
            text += " (it was paused already)"
    elif action == "resume":
        moved = [str(sid) for sid in result.get("moved") or []]
        text = "scheduling resumed"
        if moved:
            text += (
                f"; the paused span was skipped (counted missed) for schedule"
                f"{'s' if len(moved) > 1 else ''} {', '.join(moved)}"
            )
        else:
            text += "; no schedule skipped any slot of the paused span"
    else:
        fields = [escape(str(f)) for f in result.get("fields") or []]
        text = f"schedule {result.get('id')}: " + (
            f"changed {', '.join(fields)}" if fields else "unchanged (the same definition)"
        )
    return f"{text}\n({escape(str(reply.get('meaning', '')))})"


def _worker_metrics_target(args: argparse.Namespace) -> tuple[str, str] | None:
    addr = getattr(args, "worker_metrics", None)
    if addr is None:
        return None
    return endpoints([addr])[0] + "/metrics", _token(args.worker_token_env)


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
    code, message = str(error.get("code", "error")), str(error.get("message", ""))
    text = f"appliance: HTTP {status} {escape(code)}: {escape(message)}"
    if reply.get("leader_hint"):
        host = reply.get("leader_host")
        text += f" (leader hint: {escape(str(reply['leader_hint']))}"
        text += f" at {escape(str(host))})" if host else ")"
    problems = error.get("problems")
    if isinstance(problems, list) and len(problems) > 1:
        for problem in problems:
            if isinstance(problem, dict):
                field, why = str(problem.get("field")), str(problem.get("message"))
                text += f"\n  {escape(field)}: {escape(why)}"
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
            flat[name] = ",".join(str(item) for item in value) or "-"  # "-": an empty list
        else:
            flat[name] = "-" if value is None else str(value)
    return flat


def table(rows: list[dict[str, Any]]) -> str:
    """A generic table of flattened rows (every column shrinkable to fit 100 columns)."""
    if not rows:
        return "(none)"
    flat = [_flatten(row) for row in rows]
    keys: list[str] = []
    for row in flat:
        keys.extend(key for key in row if key not in keys)
    return fit_table(flat, [Column(k, k.upper(), shrink=True) for k in keys])


def render(reply: dict[str, Any]) -> str:
    result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
    parts: list[str] = []
    scalars = {k: v for k, v in result.items() if not isinstance(v, list)}
    if scalars:
        flat = _flatten(scalars)
        width = max(len(key) for key in flat)
        parts.append(
            "\n".join(f"{escape(key.ljust(width))}  {escape(value)}" for key, value in flat.items())
        )
    for key, value in result.items():
        if isinstance(value, list):
            rows = [item if isinstance(item, dict) else {"value": item} for item in value]
            parts.append(f"{escape(key)}:\n{table(rows)}")
    parts.append(f"({escape(str(reply.get('meaning', '')))})")
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
    workers = [w for w in health.get("workers") or [] if isinstance(w, dict)]
    if not workers and isinstance(health.get("worker"), dict):
        workers = [health["worker"]]
    for worker in workers:  # a fleet lists each (issue 33), named by its worker_id
        state = "reachable" if worker.get("reachable") else "UNREACHABLE"
        if worker.get("reachable") and not worker.get("authorized"):
            state = "reachable, bearer REFUSED"
        name = f"{worker['worker_id']} " if worker.get("worker_id") else ""
        lines.append(f"worker      {name}{worker.get('url')} {state}")
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
    # What needs a human comes first (issue 35): pause, no quorum, the worker, Unknown ...
    return "\n\n".join([render_warnings(health), "\n".join(lines), table(voters)])


def render_warnings(health: dict[str, Any]) -> str:
    warnings = [w for w in health.get("warnings") or [] if isinstance(w, dict)]
    if not warnings:
        return "no warnings"
    return "\n".join(
        escape(f"{str(w.get('severity') or 'warning').upper()} {w.get('code')}: {w.get('message')}")
        for w in warnings
    )


HISTORY_COLUMNS: Final = (
    Column("occurrence", "OCC", right=True),
    Column("due", "DUE"),
    Column("attempt", "TRY", right=True),
    Column("state", "STATE"),
    Column("at", "AT"),
    Column("reason", "REASON", shrink=True),
    Column("execution", "EXECUTION"),
    Column("failure", "FAILURE", wrap=True),
)


def history_rows(occurrences: list[dict[str, Any]], tz: Any = None) -> list[dict[str, Any]]:
    """One row per transition; the occurrence's fixed fields only on its first/last row."""
    tz = tz or zone(None)
    rows: list[dict[str, Any]] = []
    jittered = any(occurrence.get("starts_at") for occurrence in occurrences)
    for occurrence in occurrences:
        failure = occurrence.get("failure_reason") or ""
        timeline = occurrence.get("timeline") or [{}]
        for i, step in enumerate(timeline):
            first, last = i == 0, i == len(timeline) - 1
            rows.append(
                {
                    "occurrence": occurrence.get("id") if first else "",
                    "due": iso_time(occurrence.get("due_at"), tz) if first else "",
                    "attempt": step.get("attempt"),
                    "state": step.get("state"),
                    "at": iso_time(step.get("at"), tz),
                    "reason": step.get("reason"),
                    "execution": (occurrence.get("execution_id") or "") if last else "",
                    "failure": failure if last else "",
                }
            )
            if jittered:  # a STARTS column only when a jittered record is shown
                start = occurrence.get("starts_at") if first else ""
                rows[-1] = {**rows[-1], "starts": iso_time(start, tz) if start else ""}
    return rows


def render_history(reply: dict[str, Any], tz: Any = None) -> str:
    tz = tz or zone(None)
    schedule = reply.get("schedule") or {}
    definition = schedule.get("definition") or {}
    policy = definition.get("policy") or {}
    dropped = reply.get("dropped") or {}
    name = escape(str(definition.get("name") or ""))
    head = [
        f"schedule {schedule.get('id')} {name}".rstrip()
        + f" ({'enabled' if schedule.get('enabled') else 'disabled'})",
        f"cron {escape(str(definition.get('cron')))} {escape(str(definition.get('timezone')))}, "
        f"missed {json.dumps(policy.get('missed'))}, overlap {policy.get('overlap')}",
        "dropped slots: "
        + ", ".join(
            f"{reason} {dropped.get(reason, 0)}" for reason in ("missed", "overlap", "capacity")
        )
        + f" (observed up to {iso_time(reply.get('cursor_at'), tz)})",
    ]
    parts = ["\n".join(head)]
    recent = [
        {**drop, "at": iso_time(drop.get("at"), tz)}
        for drop in reply.get("recent_drops") or []
        if isinstance(drop, dict)
    ]
    parts.append(f"recent drops:\n{table(recent)}")
    occurrences = [o for o in reply.get("occurrences") or [] if isinstance(o, dict)]
    rows = history_rows(occurrences, tz)
    parts.append(f"timeline:\n{fit_table(rows, HISTORY_COLUMNS) if rows else '(none)'}")
    retries = (policy.get("retry") or {}).get("max_retries")
    waiting = [
        f"occurrence {o.get('id')}: {note}"
        for o in occurrences
        if (note := retry_note(o, retries, _when(o.get("not_before_at"), tz))) is not None
    ]
    if waiting:
        parts.append("\n".join(waiting))
    parts.append("(a local view of this voter's replica; it may lag the acquired owner)")
    return "\n\n".join(parts)


def _when(instant: Any, tz: Any) -> str | None:
    return None if instant is None else iso_time(instant, tz)


def egress_lines(egress: Any) -> list[str]:
    """One line per egress request of the attempt (issue 32): what left, what the policy said
    and what came back."""
    if not isinstance(egress, dict) or not isinstance(egress.get("requests"), list):
        return []
    requests = [r for r in egress["requests"] if isinstance(r, dict)]
    lines = [f"-- egress: {len(requests)} request(s)\n"]
    for r in requests:
        hop = f".{r.get('hop')}" if r.get("hop") else ""
        said = str(r.get("decision"))
        if r.get("reason"):
            said += f" ({r.get('reason')})"
        came = r.get("error") or (f"HTTP {r.get('status')}" if r.get("status") else "")
        names = (
            f" with {', '.join(map(str, r.get('credentials') or []))}"
            if r.get("credentials")
            else ""
        )
        lines.append(
            escape(
                f"   {r.get('n')}{hop} {r.get('method')} {r.get('url')}{names}: {said}"
                + (f"; {came}" if came else "")
                + f"; {r.get('request_bytes')}/{r.get('response_bytes')} bytes, {r.get('ms')} ms"
            )
            + "\n"
        )
    for key, what in (
        ("over_limit", "refused past egress.max_requests"),
        ("records_dropped", "not recorded (report full)"),
    ):
        if egress.get(key):
            lines.append(f"   {egress[key]} more {what}\n")
    return lines


def render_output(reply: dict[str, Any], *, terminal: bool = False, tz: Any = None) -> str:
    """What one attempt did: its console text (escaped on a terminal, newlines and tabs kept),
    then its value or error (with the stack) and timings, then a trailer."""
    tz = tz or zone(None)
    output = reply.get("output") or {}
    text = output.get("text") or ""
    if terminal:
        text = escape(text, keep_layout=True)
    parts = [text + ("" if text.endswith("\n") or not text else "\n")] if text else []
    value = reply.get("value")
    if isinstance(value, dict):
        cut = " (truncated)" if value.get("truncated") else ""
        parts.append(f"-- value: {escape(str(value.get('json')))}{cut}\n")
    error = reply.get("error")
    if isinstance(error, dict):
        reason = f"{reply.get('reason')}: " if reply.get("reason") else ""
        parts.append(f"-- error: {escape(reason + str(error.get('message')))}\n")
        if error.get("stack"):
            cut = "\n   (stack truncated)" if error.get("stack_truncated") else ""
            stack = escape(str(error["stack"]), keep_layout=True)
            parts.append("\n".join(f"   {line}" for line in stack.splitlines()) + cut + "\n")
    elif reply.get("reason") and reply.get("status") != "completed":
        parts.append(f"-- reason: {escape(str(reply.get('reason')))}\n")
    if reply.get("note"):
        parts.append(f"-- note: {escape(str(reply.get('note')))}\n")
    if reply.get("started_at"):
        took = reply.get("duration_ms")
        parts.append(
            f"-- ran {iso_time(reply.get('started_at'), tz)} to "
            f"{iso_time(reply.get('finished_at'), tz)}"
            + (f" ({took} ms)" if isinstance(took, int) else "")
            + "\n"
        )
    parts.extend(egress_lines(reply.get("egress")))
    note = (
        f"-- occurrence {reply.get('occurrence_id')} attempt {reply.get('attempt')} "
        f"({reply.get('execution_id')}, {reply.get('status')}): {output.get('bytes')} bytes"
    )
    if output.get("truncated"):
        note += ", truncated"
    return "".join(parts) + note + " --"
