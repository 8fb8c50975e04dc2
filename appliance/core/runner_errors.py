"""Refusals of the runner's commands, each with a machine-readable ``code``.

The admission route answers 403 with the code of a definite refusal (docs/protocol.md); the loop
logs the others. All are :class:`CoreError`: a refused command changed nothing.
"""

from __future__ import annotations

from appliance.core.errors import CoreError


class RunnerRefusal(CoreError):
    """A runner command refused by a precondition; ``code`` names which."""

    code = "refused"


class AdmissionRefused(RunnerRefusal):
    """A definite admission refusal (the worker stops; HTTP 403)."""


class BindingMismatch(AdmissionRefused):
    code = "binding_mismatch"


class AttemptNotRunning(AdmissionRefused):
    code = "attempt_not_running"


class StaleEpoch(AdmissionRefused):
    code = "stale_epoch"


class Fenced(AdmissionRefused):
    code = "fenced"


class GrantExpired(AdmissionRefused):
    code = "grant_expired"


class IncarnationMismatch(AdmissionRefused):
    code = "incarnation_mismatch"


class StaleTerm(RunnerRefusal):
    """AcquireOwnership with a term below the recorded one (or another node in the same term)."""

    code = "stale_term"


class NotAcquired(RunnerRefusal):
    """A command that needs an acquired owner on a store that has none yet."""

    code = "not_acquired"


class AlreadySeeded(RunnerRefusal):
    """The initial schedules are created once per store, never again."""

    code = "already_seeded"


class PermitExists(RunnerRefusal):
    """A not-launched fence is impossible: a permit exists for the invocation."""

    code = "permit_exists"


ADMISSION_REFUSAL_CODES = frozenset(
    c.code
    for c in (
        BindingMismatch,
        AttemptNotRunning,
        StaleEpoch,
        Fenced,
        GrantExpired,
        IncarnationMismatch,
    )
)
