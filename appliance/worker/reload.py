"""What a running worker takes from its config file again on SIGHUP: ``admission_urls`` only.

Why that field: a voter added with ``add_voter`` (or a replacement on a new port) can become the
owner, and the worker must be able to ask it for permits without a restart, which cancels every
running execution. Every other field shapes something the worker built at start (the store and
its identity, the listener, the engine's pool, the TLS contexts, the credential names), so a
reload whose file changes one of them is refused as a whole, naming each such field: nothing is
half-applied, and the worker goes on with the list it had.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Final

from appliance.config.urls import Origin
from appliance.config.worker import WorkerConfig
from appliance.core.errors import InvalidConfig

RELOADABLE: Final = ("admission_urls",)


def reloaded_admission_urls(current: WorkerConfig, fresh: WorkerConfig) -> tuple[Origin, ...]:
    """``fresh``'s admission URLs, if ``fresh`` differs from ``current`` in nothing else;
    ``InvalidConfig`` naming every other field that changed."""
    changed = [
        f.name
        for f in fields(WorkerConfig)
        if f.name not in RELOADABLE and getattr(current, f.name) != getattr(fresh, f.name)
    ]
    if changed:
        raise InvalidConfig(
            [
                (name, "changed, and only admission_urls is reloaded on SIGHUP: restart the worker")
                for name in changed
            ]
        )
    return fresh.admission_urls
