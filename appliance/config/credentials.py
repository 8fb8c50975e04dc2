"""Credentials: resolved from named environment variables, held redacted, compared in constant time.

Theory of operation: a config names environment variables; ``resolve_runner_credentials`` /
``resolve_worker_credentials`` are pure functions of (config, environ) that return every
credential a process needs, or raise ``InvalidConfig`` listing every problem: a variable that is
missing or empty, a value that cannot travel in an HTTP ``Authorization`` header, or the same
value used for two roles (SPEC §6: operator, recovery, worker, admission and cluster credentials
— and the optional admin credential of the contract amendments, issue 20, and the web console's,
issue 34 — must all differ, so
one leaked credential never grants another role's authority). Error messages name the variable
and the roles, never the value.

The values are held as ``Secret`` (appliance/secret.py, a leaf module the HTTP layer imports
without importing the config package).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from appliance.config.runner import RunnerConfig
from appliance.config.worker import WorkerConfig
from appliance.core.errors import InvalidConfig
from appliance.secret import Secret, matches

__all__ = [
    "RunnerCredentials",
    "Secret",
    "WorkerCredentials",
    "matches",
    "resolve_runner_credentials",
    "resolve_worker_credentials",
]

CREDENTIAL_BYTES_MAX: Final = 4096
# Visible ASCII only: the value travels as "Authorization: Bearer <value>".
_HEADER_SAFE: Final = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class RunnerCredentials:
    admission: Secret
    cluster: Secret
    worker: Secret  # remote.bearer_env: what the runner presents to the worker
    operator: Secret | None = None  # management.bearer_env
    recovery: Secret | None = None  # management.recovery_bearer_env
    admin: Secret | None = None  # management.admin_bearer_env: the contract amendments
    console: Secret | None = None  # console.bearer_env: the web console's dashboard token


@dataclass(frozen=True)
class WorkerCredentials:
    bearer: Secret  # what the runner must present to this worker
    admission: Secret  # what this worker presents to the runners' admission route


def _resolve(roles: list[tuple[str, str, str]], environ: Mapping[str, str]) -> dict[str, Secret]:
    """``roles`` = [(role, config field path, variable name)] → role → Secret, or InvalidConfig."""
    problems: list[tuple[str, str]] = []
    values: dict[str, str] = {}
    first_holder: dict[str, tuple[str, str]] = {}  # value → (role, field path)
    for role, path, variable in roles:
        value = environ.get(variable)
        if value is None:
            problems.append((path, f"environment variable {variable} is not set"))
            continue
        if value == "":
            problems.append((path, f"environment variable {variable} is empty"))
            continue
        if len(value.encode("utf-8", "surrogateescape")) > CREDENTIAL_BYTES_MAX:
            problems.append(
                (
                    path,
                    f"environment variable {variable} is longer than {CREDENTIAL_BYTES_MAX} bytes",
                )
            )
            continue
        if not _HEADER_SAFE.fullmatch(value):
            problems.append(
                (path, f"environment variable {variable} must hold visible ASCII only (no spaces)")
            )
            continue
        if value in first_holder:
            other_role, other_path = first_holder[value]
            problems.append(
                (
                    path,
                    f"the {role} credential ({variable}) equals the {other_role} credential "
                    f"({other_path}); every credential must differ",
                )
            )
            continue
        first_holder[value] = (role, path)
        values[role] = value
    if problems:
        raise InvalidConfig(problems)
    return {role: Secret(value) for role, value in values.items()}


def resolve_runner_credentials(cfg: RunnerConfig, environ: Mapping[str, str]) -> RunnerCredentials:
    roles = [
        ("admission", "admission_bearer_env", cfg.admission_bearer_env),
        ("cluster", "cluster_bearer_env", cfg.cluster_bearer_env),
        ("worker", "remote.bearer_env", cfg.remote.bearer_env),
    ]
    if cfg.management is not None:
        roles.append(("operator", "management.bearer_env", cfg.management.bearer_env))
        if cfg.management.recovery_bearer_env is not None:
            roles.append(
                ("recovery", "management.recovery_bearer_env", cfg.management.recovery_bearer_env)
            )
        if cfg.management.admin_bearer_env is not None:
            roles.append(("admin", "management.admin_bearer_env", cfg.management.admin_bearer_env))
    if cfg.console is not None:  # extension (issue 34): it too must differ from every other
        roles.append(("console", "console.bearer_env", cfg.console.bearer_env))
    resolved = _resolve(roles, environ)
    return RunnerCredentials(**resolved)


def resolve_worker_credentials(cfg: WorkerConfig, environ: Mapping[str, str]) -> WorkerCredentials:
    resolved = _resolve(
        [
            ("bearer", "bearer_env", cfg.bearer_env),
            ("admission", "admission_bearer_env", cfg.admission_bearer_env),
        ],
        environ,
    )
    return WorkerCredentials(**resolved)
