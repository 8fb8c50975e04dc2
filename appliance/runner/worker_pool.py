"""One worker client per worker of the fleet in force (issue 33): the driver's side of the fleet.

Theory of operation: the owner's worker effects name the worker they are for (a dispatch's and a
cancel's binding, an observation's ``worker_id``); the loop asks :meth:`WorkerPool.for_worker` for
that worker's client. The fleet in force is read from the committed state at each call (the
genesis with the fleet amendments folded in, appliance/owner/contract_state.py), so a worker
added by ``add_worker`` is reachable at once and a removed one is not. Each client presents the
credential that worker expects: its own ``bearer_env`` when it names one (resolved from this
voter's environment, which the owner checked before the amendment was proposed), the remote's
otherwise. A worker's origin is read at each call too (``amend_remote`` of a one-worker remote).
Clients are created on first use and closed when their worker leaves the fleet.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any

from appliance.config.credentials import RunnerCredentials
from appliance.config.runner import RemoteConfig
from appliance.runner.worker_client import WorkerClient
from appliance.secret import Secret


class UnknownWorker(LookupError):
    """The worker is not in the fleet in force (removed meanwhile): nothing is sent."""


class WorkerPool:
    def __init__(
        self,
        remote_in_force: Callable[[], RemoteConfig],
        credentials: RunnerCredentials,
        environ: Mapping[str, str],
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._remote = remote_in_force
        self._credentials = credentials
        self._environ = dict(environ)
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._clients: dict[str, WorkerClient] = {}

    def bearer(self, worker_id: str, remote: RemoteConfig) -> Secret:
        """The credential ``worker_id`` expects from the runner."""
        spec = remote.worker(worker_id)
        if spec is None or spec.bearer_env is None:
            return self._credentials.worker
        known = self._credentials.workers.get(worker_id)
        if known is not None:
            return known
        value = self._environ.get(spec.bearer_env)
        if not value:
            raise UnknownWorker(
                f"worker {worker_id}: its credential variable {spec.bearer_env} is not set on "
                "this voter"
            )
        return Secret(value)

    def for_worker(self, worker_id: str | None) -> WorkerClient:
        remote = self._remote()
        if worker_id is None:  # a fleet of one: its only worker
            worker_id = remote.fleet[0].worker_id
        if remote.worker(worker_id) is None:
            raise UnknownWorker(f"worker {worker_id} is not in the fleet in force")
        with self._lock:
            client = self._clients.get(worker_id)
            if client is None:
                client = WorkerClient(
                    lambda w=worker_id: self._origin(w),
                    self.bearer(worker_id, remote),
                    ssl_context=self._ssl_context,
                )
                self._clients[worker_id] = client
            for gone in [w for w in self._clients if remote.worker(w) is None]:
                self._clients.pop(gone).close()
        return client

    def _origin(self, worker_id: str) -> str:
        spec = self._remote().worker(worker_id)
        if spec is None:
            raise UnknownWorker(f"worker {worker_id} is not in the fleet in force")
        return spec.url.url

    # The one-worker interface, for callers that know no fleet (the first worker in force).
    def execute(self, binding: dict[str, Any], code: str, retained_through: int | None = None):
        worker = binding.get("worker_id")
        return self.for_worker(worker if isinstance(worker, str) else None).execute(
            binding, code, retained_through=retained_through
        )

    def observe(self, execution_id: str, retained_through: int | None = None):
        return self.for_worker(None).observe(execution_id, retained_through=retained_through)

    def cancel(self, binding: dict[str, Any]):
        worker = binding.get("worker_id")
        return self.for_worker(worker if isinstance(worker, str) else None).cancel(binding)

    def observe_anywhere(
        self, execution_id: str, first: str | None = None
    ) -> tuple[str | None, Any]:
        """(worker, answer) of the first worker of the fleet in force that holds
        ``execution_id`` — ``first`` asked first (the attempt's claim names it); else the last
        answer. For history and ``admin output``: an older attempt may have run elsewhere."""
        ids = [w.worker_id for w in self._remote().fleet]
        order = ([first] if first in ids else []) + [w for w in ids if w != first]
        last: tuple[str | None, Any] = (None, None)
        for worker_id in order:
            try:
                answer = self.for_worker(worker_id).observe(execution_id)
            except UnknownWorker:
                continue
            if answer.status is not None:
                return worker_id, answer
            last = (worker_id, answer)
        return last

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
