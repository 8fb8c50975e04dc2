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
from dataclasses import dataclass, field
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
WORKER_ROLE_PREFIX: Final = "worker:"
ADMISSION_ROLE_PREFIX: Final = "admission:"
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
    # Issue 33: a fleet worker's own credentials (worker_id → value), for the workers that name
    # a ``bearer_env`` (what the runner presents to it) or an ``admission_bearer_env`` (what it
    # presents to the admission route). The others use ``worker`` and ``admission``.
    workers: Mapping[str, Secret] = field(default_factory=dict)
    admissions: Mapping[str, Secret] = field(default_factory=dict)

    def worker_bearer(self, worker_id: str) -> Secret:
        """What the runner presents to ``worker_id``."""
        return self.workers.get(worker_id, self.worker)

    def known_roles(self) -> dict[str, Secret | None]:
        """Every credential this voter knows, by role (``worker:<id>`` and ``admission:<id>``
        for a fleet worker's own), so a surface can tell a known credential of the wrong role
        from a guess and refuse both alike."""
        roles: dict[str, Secret | None] = {
            "admission": self.admission,
            "cluster": self.cluster,
            "worker": self.worker,
            "operator": self.operator,
            "recovery": self.recovery,
            "admin": self.admin,
            "console": self.console,
        }
        roles.update({f"{WORKER_ROLE_PREFIX}{w}": s for w, s in sorted(self.workers.items())})
        roles.update({f"{ADMISSION_ROLE_PREFIX}{w}": s for w, s in sorted(self.admissions.items())})
        return roles


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
    for i, worker in enumerate(cfg.remote.workers):
        here = f"remote.workers[{i}]"
        if worker.bearer_env is not None:
            roles.append(
                (f"{WORKER_ROLE_PREFIX}{worker.worker_id}", f"{here}.bearer_env", worker.bearer_env)
            )
        if worker.admission_bearer_env is not None:
            roles.append(
                (
                    f"{ADMISSION_ROLE_PREFIX}{worker.worker_id}",
                    f"{here}.admission_bearer_env",
                    worker.admission_bearer_env,
                )
            )
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
    workers = {
        role.removeprefix(WORKER_ROLE_PREFIX): resolved.pop(role)
        for role in list(resolved)
        if role.startswith(WORKER_ROLE_PREFIX)
    }
    admissions = {
        role.removeprefix(ADMISSION_ROLE_PREFIX): resolved.pop(role)
        for role in list(resolved)
        if role.startswith(ADMISSION_ROLE_PREFIX)
    }
    return RunnerCredentials(**resolved, workers=workers, admissions=admissions)


def credential_problem(
    variable: str, environ: Mapping[str, str], known: Mapping[str, Secret | None]
) -> str | None:
    """Why ``variable`` cannot hold a new fleet worker's credential on this voter (issue 33: an
    ``add_worker`` names variables every voter must have set), or None. ``known`` are the
    credentials already in use, which it must differ from. Never shows the value."""
    value = environ.get(variable)
    if value is None:
        return f"environment variable {variable} is not set on this voter"
    if value == "" or len(value.encode("utf-8", "surrogateescape")) > CREDENTIAL_BYTES_MAX:
        return f"environment variable {variable} is empty or longer than {CREDENTIAL_BYTES_MAX}"
    if not _HEADER_SAFE.fullmatch(value):
        return f"environment variable {variable} must hold visible ASCII only (no spaces)"
    for role, secret in known.items():
        if secret is not None and matches(value, secret):
            return f"environment variable {variable} holds the {role} credential; use a new one"
    return None


def resolve_worker_credentials(cfg: WorkerConfig, environ: Mapping[str, str]) -> WorkerCredentials:
    resolved = _resolve(
        [
            ("bearer", "bearer_env", cfg.bearer_env),
            ("admission", "admission_bearer_env", cfg.admission_bearer_env),
        ],
        environ,
    )
    return WorkerCredentials(**resolved)
