"""``VoterCapabilities``: what each voter of the configuration reported it can apply.

Every voter serves its own report (``appliance/capabilities.py``) on the cluster status route,
behind the cluster bearer. This object asks each peer for it, off every hot path: a daemon thread
polls each peer every ``poll_s`` (a changed binary shows up within one interval after its
restart), and ``refusal(kind)`` answers from what it last heard, without I/O, so the owner's
proposal path never waits for the network. A peer that cannot be reached keeps its last report: a
restart with a new binary is what changes a report, and that restart is seen at the next
successful poll.

After a membership change (issue 20) the voters are the configuration in force: ``members`` (when
given) is asked on each poll for id -> address of every voter, so a voter added at run time must
report before a new kind is proposed, and a removed one no longer counts.

Only the gate's answer depends on it; nothing replicated does (SPEC §2: apply never depends on it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Final

from appliance.capabilities import (
    Capabilities,
    capabilities_from_json,
    gate_refusal,
    local_capabilities,
)
from appliance.config.credentials import Secret
from appliance.http.client import ClientError, HttpClient

log = logging.getLogger("appliance.replication.capabilities")

POLL_S: Final = 5.0
STATUS_PATH: Final = "/raft/v1/status"
REPORT_BYTES_MAX: Final = 64 * 1024


class VoterCapabilities:
    def __init__(
        self,
        *,
        node_id: str,
        peers: Mapping[str, str],  # peer id -> "host:port" of its cluster listener
        cluster_token: Secret | None,
        client: HttpClient | None = None,
        scheme: str = "http",
        poll_s: float = POLL_S,
        members: Callable[[], Mapping[str, str] | None] | None = None,
    ) -> None:
        self._node_id = node_id
        self._peers = dict(peers)
        self._members = members
        self._token = cluster_token
        self._client = client or HttpClient(connect_timeout_ms=1_000, read_timeout_ms=2_000)
        self._scheme = scheme
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._reports: dict[str, Capabilities | None] = {node_id: local_capabilities()}
        self._reports.update({peer: None for peer in self._peers})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voter-capabilities", daemon=True)

    @property
    def voters(self) -> tuple[str, ...]:
        with self._lock:
            return (self._node_id, *self._peers)

    def start(self) -> None:
        if self._peers or self._members is not None:
            self._thread.start()

    def follow_members(self) -> None:
        """Take the voters of the configuration in force (``members``), if it says."""
        if self._members is None:
            return
        try:
            members = self._members()
        except Exception as exc:  # a stopping driver: keep what we had
            log.debug("configuration not read: %s", exc)
            return
        if members is None:
            return
        peers = {node: addr for node, addr in members.items() if node != self._node_id}
        with self._lock:
            self._peers = peers
            for peer in peers:
                self._reports.setdefault(peer, None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._client.close()

    def reports(self) -> dict[str, Capabilities | None]:
        with self._lock:
            return dict(self._reports)

    def refusal(self, kind: str) -> str | None:
        """Why ``kind`` may not be proposed yet (None: every voter can apply it)."""
        return gate_refusal(kind, self.voters, self.reports())

    def poll_once(self) -> None:
        self.follow_members()
        with self._lock:
            peers = dict(self._peers)
        for peer, address in peers.items():
            report = self._ask(peer, address)
            if report is not None:
                with self._lock:
                    changed = self._reports.get(peer) != report
                    self._reports[peer] = report
                if changed:
                    log.info("voter %s runs binary %s", peer, report.binary)

    def _ask(self, peer: str, address: str) -> Capabilities | None:
        try:
            answer = self._client.get(
                f"{self._scheme}://{address}{STATUS_PATH}",
                bearer=self._token,
                response_bytes_max=REPORT_BYTES_MAX,
            )
            if answer.status != 200:
                return None
            body = answer.json()
            if not isinstance(body, dict) or "capabilities" not in body:
                # A binary from before the gate: it applies exactly the baseline.
                return None
            return capabilities_from_json(body["capabilities"])
        except (ClientError, ValueError) as exc:
            log.debug("capabilities of %s not read: %s", peer, exc)
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._poll_s)
