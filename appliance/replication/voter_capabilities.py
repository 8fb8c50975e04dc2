"""``VoterCapabilities``: what each member of the configuration reported it can apply.

Every voter serves its own report (``appliance/capabilities.py``) on the cluster status route,
behind the cluster bearer. This object asks each peer for it, off every hot path: a daemon thread
polls each peer every ``poll_s`` (a changed binary shows up within one interval after its
restart); while a member has not answered since this voter started (a fresh cluster whose voters
start one after another), the first polls come sooner (``FIRST_POLL_S``, doubling up to
``poll_s``), so a new cluster's gate and 409 hints are ready within seconds. ``refusal(kind)``
answers from what it last heard, without I/O, so the owner's proposal path never waits for the
network.

Who is asked: every member of the configuration in force other than this node (voters and
learners — a learner applies every entry too), from ``members()``; without it, the genesis peers.
A member removed from the configuration is no longer asked nor waited for.

What is remembered: a peer that cannot be reached keeps its last report, and the last reports are
kept in ``remembered`` (a 0600 file in the data_dir), so an owner restarted while a peer is down
still knows what that peer applies. Why that is safe: a report changes only when the peer restarts
with another binary, and that restart is seen at its next successful poll; a peer rolled back to an
older binary while unreachable would meet a kind it cannot apply and stop with a clear message
(``Machine.apply``), never diverge. A missing, unreadable or malformed file is treated as no report
at all (the gate then waits for the peer: the conservative side).

Only the gate's answer depends on it; nothing replicated does (SPEC §2: apply never depends on it).

The same status answer names where that voter's management listener is (``management_addr``,
the ``--addr`` form: ``host:port``, ``https://`` first when it serves TLS). It is remembered in
memory only, as a hint: a voter that is not the owner names the owner's listener in its 409
(``owner_management_addr``, appliance/management/wiring.py), so ``appliance admin`` can go
straight to it among the addresses it was given, or say which address to give.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from appliance.capabilities import (
    Capabilities,
    capabilities_from_json,
    gate_refusal,
    local_capabilities,
)
from appliance.config.addresses import AddressError, is_loopback_host, parse_host_port
from appliance.config.credentials import Secret
from appliance.http.client import ClientError, HttpClient
from appliance.store.sqlite import fsync_dir

log = logging.getLogger("appliance.replication.capabilities")

POLL_S: Final = 5.0
FIRST_POLL_S: Final = 0.25
STATUS_PATH: Final = "/raft/v1/status"
REPORT_BYTES_MAX: Final = 64 * 1024
REMEMBERED_FILE: Final = "voter-reports.json"
REMEMBERED_BYTES_MAX: Final = 1024 * 1024
# The longest --addr of a loopback listener: "https://[0000:0000:...:0001]:65535".
MANAGEMENT_ADDR_CHARS_MAX: Final = len("https://") + len("[" + ":".join(["0000"] * 8) + "]:65535")
FILE_MODE: Final = 0o600


class VoterCapabilities:
    def __init__(
        self,
        *,
        node_id: str,
        peers: Mapping[str, str],  # genesis peer id -> "host:port" of its cluster listener
        cluster_token: Secret | None,
        client: HttpClient | None = None,
        scheme: str = "http",
        poll_s: float = POLL_S,
        members: Callable[[], Mapping[str, str]] | None = None,
        remembered: Path | None = None,
        management_addr: str | None = None,  # this voter's own, as it serves it
    ) -> None:
        self._node_id = node_id
        genesis = dict(peers)
        self._members = members or (lambda: genesis)
        self._token = cluster_token
        self._client = client or HttpClient(connect_timeout_ms=1_000, read_timeout_ms=2_000)
        self._scheme = scheme
        self._poll_s = poll_s
        self._remembered = remembered
        self._lock = threading.Lock()
        self._reports: dict[str, Capabilities] = self._load()
        self._reports[node_id] = local_capabilities()
        self._management: dict[str, str] = {}
        self._answered: set[str] = set()  # members whose status was read since the start
        if management_addr is not None:
            self._management[node_id] = management_addr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voter-capabilities", daemon=True)

    @property
    def voters(self) -> tuple[str, ...]:
        """This node and every other member of the configuration in force."""
        return (self._node_id, *(m for m in self._members() if m != self._node_id))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._client.close()

    def reports(self) -> dict[str, Capabilities | None]:
        """The last report of every member (None: never heard from)."""
        with self._lock:
            return {member: self._reports.get(member) for member in self.voters}

    def refusal(self, kind: str) -> str | None:
        """Why ``kind`` may not be proposed yet (None: every member can apply it)."""
        return gate_refusal(kind, self.voters, self.reports())

    def management_addr(self, node: str) -> str | None:
        """Where ``node`` said its management listener is (None: not heard, or it has none)."""
        with self._lock:
            return self._management.get(node)

    def poll_once(self) -> None:
        changed = False
        for peer, address in self._members().items():
            if peer == self._node_id or not address:
                continue
            body = self._ask(peer, address)
            if body is None:
                continue
            self._answered.add(peer)
            management = management_addr_of(body)
            with self._lock:
                if management is None:
                    self._management.pop(peer, None)
                else:
                    self._management[peer] = management
            try:
                # A binary from before the gate reports nothing: it applies exactly the baseline.
                report = capabilities_from_json(body["capabilities"])
            except (KeyError, ValueError) as exc:
                log.debug("capabilities of %s not read: %s", peer, exc)
                continue
            with self._lock:
                if self._reports.get(peer) == report:
                    continue
                self._reports[peer] = report
            changed = True
            log.info("voter %s runs binary %s", peer, report.binary)
        if changed:
            self._save()

    def _ask(self, peer: str, address: str) -> dict[str, object] | None:
        """The peer's status answer, or None when it gave none."""
        try:
            answer = self._client.get(
                f"{self._scheme}://{address}{STATUS_PATH}",
                bearer=self._token,
                response_bytes_max=REPORT_BYTES_MAX,
            )
            if answer.status != 200:
                return None
            body = answer.json()
        except (ClientError, ValueError) as exc:
            log.debug("status of %s not read: %s", peer, exc)
            return None
        return body if isinstance(body, dict) else None

    def _run(self) -> None:
        wait_s = min(FIRST_POLL_S, self._poll_s)
        while not self._stop.is_set():
            self.poll_once()
            if all(m in self._answered for m in self._members() if m != self._node_id):
                wait_s = self._poll_s
            self._stop.wait(wait_s)
            wait_s = min(wait_s * 2, self._poll_s)

    # ---- the remembered reports ------------------------------------------------------------

    def _load(self) -> dict[str, Capabilities]:
        path = self._remembered
        if path is None or not path.exists():
            return {}
        try:
            if path.stat().st_size > REMEMBERED_BYTES_MAX:
                raise ValueError(f"larger than {REMEMBERED_BYTES_MAX} bytes")
            document = json.loads(path.read_text(encoding="utf-8"))
            voters = document.get("voters") if isinstance(document, dict) else None
            if not isinstance(voters, dict):
                raise ValueError("expected an object with the field voters")
            return {
                str(peer): capabilities_from_json(report)
                for peer, report in voters.items()
                if peer != self._node_id
            }
        except (OSError, ValueError) as exc:
            log.warning("remembered voter reports in %s ignored (%s); polling anew", path, exc)
            return {}

    def _save(self) -> None:
        path = self._remembered
        if path is None:
            return
        with self._lock:
            voters = {
                peer: report.to_json()
                for peer, report in sorted(self._reports.items())
                if peer != self._node_id
            }
        staging = path.with_name(path.name + ".writing")
        try:
            fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
            try:
                os.fchmod(fd, FILE_MODE)
                os.write(fd, json.dumps({"voters": voters}, sort_keys=True).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(staging, path)
            fsync_dir(path.parent)
        except OSError as exc:  # the gate still works from memory; only a restart forgets
            log.warning("voter reports not remembered in %s: %s", path, exc)


def management_addr_of(status: Mapping[str, object]) -> str | None:
    """A status answer's ``management_addr`` when it is a well-formed ``--addr`` value of a
    loopback listener (as every management listener is)."""
    value = status.get("management_addr")
    if not isinstance(value, str) or len(value) > MANAGEMENT_ADDR_CHARS_MAX:
        return None
    try:
        parsed = parse_host_port(value.removeprefix("https://"))
    except AddressError:
        return None
    return value if is_loopback_host(parsed.host) else None
