"""Probing the other voters' Raft status routes: role, term, reachability and lag.

Theory of operation. The Raft core does not export per-follower match indexes, and a voter's own
status says nothing about its peers; each peer, however, serves ``GET /raft/v1/status`` behind the
cluster bearer. A scrape or a health request asks every peer once, in parallel, with a short
timeout (a partitioned peer must not stall ``/metrics``), and the answers are cached for
``cache_s`` so a burst of scrapes costs one round. Lag is this voter's commit index minus the
peer's applied index: on the leader it is the follower lag an operator alerts on; elsewhere it is
still a fair "how far behind is that replica" from this replica's point of view.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from appliance.config.addresses import HostPort
from appliance.http import ClientError, HttpClient
from appliance.metrics.runner import VoterView
from appliance.secret import Secret

RAFT_STATUS_PATH: Final = "/raft/v1/status"
PROBE_TIMEOUT_MS: Final = 500
PROBE_CACHE_S: Final = 1.0
STATUS_BYTES_MAX: Final = 4096


class VoterProbe:
    """Asks each peer's Raft status route (cluster bearer); ``views(commit_index)`` is cached."""

    def __init__(
        self,
        peers: Mapping[str, HostPort],
        cluster_bearer: Secret | str,
        *,
        timeout_ms: int = PROBE_TIMEOUT_MS,
        cache_s: float = PROBE_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: the peers' cluster ports speak mutual TLS (appliance.http.tls)."""
        self._peers = dict(sorted(peers.items()))
        self._genesis = dict(self._peers)
        self._scheme = "https" if ssl_context is not None else "http"
        self._bearer = cluster_bearer
        self._timeout_ms = timeout_ms
        self._cache_s = cache_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[dict[str, Any] | None]] | None = None
        self._client = HttpClient(
            connect_timeout_ms=timeout_ms, read_timeout_ms=timeout_ms, ssl_context=ssl_context
        )
        self._pool = ThreadPoolExecutor(max(1, len(self._peers)), thread_name_prefix="probe")

    @property
    def genesis(self) -> dict[str, HostPort]:
        """The peers this probe was built with (the genesis voters but this one)."""
        return dict(self._genesis)

    def follow(self, peers: Mapping[str, HostPort]) -> None:
        """Probe ``peers`` from now on: the voters of the configuration in force, after a
        membership change (issue 20); a change drops the cached answers."""
        wanted = dict(sorted(peers.items()))
        with self._lock:
            if wanted != self._peers:
                self._peers = wanted
                self._cached = None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def views(self, commit_index: int | None) -> list[VoterView]:
        peers, answers = self._answers()
        views = []
        for node_id, answer in zip(peers, answers, strict=True):
            if answer is None:
                views.append(VoterView(node_id, reachable=False))
                continue
            applied = _int(answer.get("applied_index"))
            lag = None
            if commit_index is not None and applied is not None:
                lag = max(0, commit_index - applied)
            views.append(
                VoterView(
                    node_id,
                    reachable=True,
                    role=str(answer.get("role"))[:16],
                    term=_int(answer.get("term")),
                    commit_index=_int(answer.get("commit_index")),
                    applied_index=applied,
                    lag_entries=lag,
                )
            )
        return views

    def _answers(self) -> tuple[list[str], list[dict[str, Any] | None]]:
        with self._lock:
            now = self._clock()
            peers = list(self._peers)
            if self._cached is not None and now - self._cached[0] < self._cache_s:
                return peers, self._cached[1]
            futures = [self._pool.submit(self._ask, addr) for addr in self._peers.values()]
            answers = [f.result() for f in futures]
            self._cached = (self._clock(), answers)
            return peers, answers

    def _ask(self, addr: HostPort) -> dict[str, Any] | None:
        try:
            response = self._client.get(
                f"{self._scheme}://{addr}{RAFT_STATUS_PATH}",
                bearer=self._bearer,
                response_bytes_max=STATUS_BYTES_MAX,
            )
            if response.status != 200:
                return None
            value = response.json()
        except (ClientError, ValueError, OSError):
            return None
        return value if isinstance(value, dict) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None
