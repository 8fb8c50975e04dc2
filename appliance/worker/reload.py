"""What a running worker takes from its config file again on SIGHUP: ``admission_urls`` only.

Why that field: a voter added with ``add_voter`` (or a replacement on a new port) can become the
owner, and the worker must be able to ask it for permits without a restart, which cancels every
running execution. Every other field shapes something the worker built at start (the store and
its identity, the listener, the engine's pool, the TLS contexts, the credential names), so a
reload whose file changes one of them is refused as a whole, naming each such field: nothing is
half-applied, and the worker goes on with the list it had.

Where it runs (issue 36, finding 3): reading the file may block — a FIFO in its place (refused
without blocking: ``read_json_file(..., regular_only=True)``), or a hung network file system,
where ``open()`` and ``read()`` wait for the server however the file is opened. So the main
thread never reads it: ``BackgroundReload`` runs each reload on a thread of its own, one at a
time, and the main thread goes straight back to waiting for SIGTERM, which therefore always stops
the worker (a reload thread still blocked then is a daemon and ends with the process).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
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


log = logging.getLogger("appliance.worker")


class BackgroundReload:
    """Runs ``reload`` on a daemon thread per request, never two at once; ``request`` never
    blocks. A request while the previous reload is still reading is refused and logged."""

    def __init__(self, reload: Callable[[], object], clock: Callable[[], float] = time.monotonic):
        self._reload = reload
        self._clock = clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started_s = 0.0

    def request(self) -> bool:
        """Start a reload now; False (and a warning) while the previous one still runs."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                log.warning(
                    "SIGHUP: ignored: the previous reload has been reading the config file for "
                    "%.1f s (a hung file system?); the worker keeps the admission_urls it has",
                    self._clock() - self._started_s,
                )
                return False
            self._started_s = self._clock()
            self._thread = threading.Thread(target=self._run, name="config-reload", daemon=True)
            self._thread.start()
            return True

    def _run(self) -> None:
        try:
            self._reload()
        except Exception:  # a bug must not pass silently, nor end the worker
            log.exception("SIGHUP: the reload failed; the worker keeps the admission_urls it has")

    def wait(self, timeout_s: float) -> bool:
        """Tests: True once no reload is running (waiting at most ``timeout_s``)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        return thread is None or not thread.is_alive()
