"""``appliance admin config check FILE [--worker] [--check-env]``: validate a config offline.

Prints every problem as ``path: message`` on stderr and exits 2, or prints ``ok`` and a short
summary (for a runner: voters, schedules, remote origin, grant expiry and the sealed contract
digest, which must be equal on every voter) and exits 0. A runner config's seeded schedules have
their JavaScript parsed by V8 too (parsed, never run: ``appliance.engine.syntax``, ~10 ms each),
so a ``schedules[i].code`` that would fail every run with a ``SyntaxError`` is refused here with
its line and column, as ``create`` refuses it (issue 35, item 5). Credentials are not needed
unless ``--check-env`` asks to resolve them from this process's environment as well; their
values are never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime, timedelta

from appliance.config.contract import contract_digest
from appliance.config.credentials import resolve_runner_credentials, resolve_worker_credentials
from appliance.config.rfc3339 import format_utc
from appliance.config.runner import RunnerConfig, load_runner_config
from appliance.config.worker import WorkerConfig, load_worker_config
from appliance.core.errors import InvalidConfig

EXIT_OK = 0
EXIT_INVALID = 2


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("config", help="validate runner and worker configs offline")
    tools = parser.add_subparsers(dest="config_command", metavar="ACTION")
    tools.required = True
    check = tools.add_parser(
        "check",
        help="validate a config file and report every problem with its field path",
        description="Validate a runner config (default) or a worker config (--worker) offline. "
        "Exit 0 and print 'ok' with a summary, or exit 2 and print every problem.",
    )
    check.add_argument("file", metavar="FILE", help="the JSON config file")
    check.add_argument("--worker", action="store_true", help="FILE is a worker config")
    check.add_argument(
        "--check-env",
        action="store_true",
        help="also resolve the named credential environment variables (values are never shown)",
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    if _is_a_definition(args.file):
        print(
            f"{args.file}: this is a schedule definition, not a "
            f"{'worker' if args.worker else 'runner'} config; check it with "
            f"'appliance admin schedule check {args.file}'",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        if args.worker:
            worker = load_worker_config(os.environ, args.file)
            if args.check_env:
                resolve_worker_credentials(worker, os.environ)
            lines = _worker_summary(worker)
        else:
            code_problems = seeded_code_problems(args.file)
            try:
                runner = load_runner_config(args.file)
                if args.check_env:
                    resolve_runner_credentials(runner, os.environ)
            except InvalidConfig as err:
                raise InvalidConfig([*err.problems, *code_problems]) from None
            if code_problems:
                raise InvalidConfig(code_problems)
            lines = _runner_summary(runner)
    except InvalidConfig as err:
        kind = "worker" if args.worker else "runner"
        print(f"{args.file}: invalid {kind} config ({len(err.problems)} problems)", file=sys.stderr)
        for path, message in err.problems:
            print(f"  {path}: {message}", file=sys.stderr)
        return EXIT_INVALID
    print("ok")
    for line in lines:
        print(f"  {line}")
    if args.check_env:
        print("  credentials: all set and distinct")
    return EXIT_OK


def seeded_code_problems(path: str) -> list[tuple[str, str]]:
    """``schedules[i].code`` that V8 does not parse, as (path, "SyntaxError: ... (line L,
    column C)"); nothing when the file cannot be read (the config check says why)."""
    from appliance.config.common import read_json_file
    from appliance.config.runner import CONFIG_FILE_BYTES_MAX
    from appliance.engine.syntax import syntax_problem

    try:
        document = read_json_file(path, CONFIG_FILE_BYTES_MAX)
    except InvalidConfig:
        return []
    schedules = document.get("schedules") if isinstance(document, dict) else None
    if not isinstance(schedules, list):
        return []
    problems = []
    for i, schedule in enumerate(schedules):
        code = schedule.get("code") if isinstance(schedule, dict) else None
        problem = syntax_problem(code) if isinstance(code, str) else None
        if problem is not None:
            problems.append((f"schedules[{i}].code", str(problem)))
    return problems


def _is_a_definition(path: str) -> bool:
    """Whether FILE reads as a definition (so its config problems would all be beside the point)."""
    from appliance.cli.admin_schedule import DEFINITION_FILE_BYTES_MAX, looks_like_definition
    from appliance.config.common import read_json_file

    try:
        return looks_like_definition(read_json_file(path, DEFINITION_FILE_BYTES_MAX))
    except Exception:  # unreadable or not JSON: the config check reports it properly
        return False


def _expiry_note(expires_at: datetime, now: datetime) -> str:
    remaining = expires_at - now
    if remaining.total_seconds() <= 0:
        return "ALREADY PASSED: no permit will be granted"
    if remaining < timedelta(days=1):
        minutes = int(remaining.total_seconds() // 60)
        return f"in {minutes // 60} h {minutes % 60} min: renew soon"
    return f"in {remaining.days} days"


def _remote_line(cfg: RunnerConfig) -> str:
    remote = cfg.remote
    if not remote.workers and remote.url is not None:
        return f"remote: {remote.url.url} namespace {remote.namespace} worker {remote.worker_id}"
    workers = ", ".join(
        f"{w.worker_id} {w.url.url}"
        + (f" [{' '.join(f'{k}={v}' for k, v in w.labels)}]" if w.labels else "")
        for w in remote.workers
    )
    return f"remote: namespace {remote.namespace}, a fleet of {len(remote.workers)}: {workers}"


def _runner_summary(cfg: RunnerConfig) -> list[str]:
    expiry = _expiry_note(cfg.remote.expires_at, datetime.now(UTC))
    voters = ", ".join(f"{node}@{addr}" for node, addr in cfg.voters.items())
    management = "none" if cfg.management is None else str(cfg.management.addr)
    return [
        f"runner node {cfg.node_id}{' (joins: not a genesis voter)' if cfg.join else ''}; "
        f"genesis voters ({len(cfg.voters)}): {voters}",
        f"schedules: {len(cfg.schedules)} of at most {cfg.limits.schedules}",
        _remote_line(cfg),
        f"grant expires {format_utc(cfg.remote.expires_at)} ({expiry})",
        f"admission: {cfg.admission_addr}; management: {management}",
        f"contract digest: {contract_digest(cfg)}",
    ]


def _worker_summary(cfg: WorkerConfig) -> list[str]:
    urls = ", ".join(origin.url for origin in cfg.admission_urls)
    return [
        f"worker {cfg.worker_id} in namespace {cfg.namespace}; listening on {cfg.listen_addr}",
        f"admission urls: {urls}",
        f"engine: max_concurrent {cfg.engine.max_concurrent}, max_queued "
        f"{cfg.engine.max_queued}, output_limit_bytes {cfg.engine.output_limit_bytes}",
    ]
