"""``VoterCapabilities``: what each member of the configuration reported it can apply.

Every voter serves its own report (``appliance/capabilities.py``) on the cluster status route,
behind the cluster bearer. This object asks each peer for it, off every hot path: a daemon thread
polls each peer every ``poll_s`` (a changed binary shows up within one interval after its
restart), and ``refusal(kind)`` answers from what it last heard, without I/O, so the owner's
proposal path never waits for the network.

Who is asked: every member of the configuration in force other than this node (voters and
learners — a learner applies every entry too), from ``members()``; without it, the genesis peers.
A member removed from the configuration is no longer asked nor waited for. ``learners()`` says
which members are learners: one that has never reported is left out of the gate (issue 36;
``capabilities.gate_refusal``), so learners added and never started cannot hold back every newer
command; ``report_of(learner, ask=True)`` asks one directly for ``promote_voter``.

When (issue 36: right after a fresh start the gate refused new kinds for seconds, "no report
yet" from voters that were up): the poll thread asks at start, then every ``UNREPORTED_POLL_S``
while a voter with an address has not reported, and every ``poll_s`` once all have; a refusal
that names a voter without a report wakes it. ``refresh()`` asks the voters without a report on
the caller's thread (an operator command's, before it reaches the owner), with short timeouts and
at most once per ``REFRESH_INTERVAL_S`` each: so a healthy cluster accepts new kinds as soon as it
has an owner, and a voter that is down costs a refused connection, not a wait.

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
import time
from collections.abc import Callable, Collection, Mapping
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
MANAGEMENT_ADDR_CHARS_MAX: Final = len("https://") + len("[" + ":".join(["0000"] * 8) + "]:65535")
UNREPORTED_POLL_S: Final = 0.25  # while a member with an address has never answered
REFRESH_INTERVAL_S: Final = 1.0  # a caller's refresh asks each member at most this often
REFRESH_CONNECT_TIMEOUT_MS: Final = 300
REFRESH_READ_TIMEOUT_MS: Final = 1_000
STATUS_PATH: Final = "/raft/v1/status"
REPORT_BYTES_MAX: Final = 64 * 1024
REMEMBERED_FILE: Final = "voter-reports.json"
REMEMBERED_BYTES_MAX: Final = 1024 * 1024
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
        learners: Callable[[], Collection[str]] | None = None,
        quick_client: HttpClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        management_addr: str | None = None,  # this voter's own, as it serves it
    ) -> None:
        """``quick_client``: for ``refresh`` and ``report_of`` on a caller's thread (short
        timeouts; give it the same TLS context as ``client``)."""
        self._node_id = node_id
        genesis = dict(peers)
        self._members = members or (lambda: genesis)
        self._learners = learners or (lambda: ())
        self._token = cluster_token
        self._client = client or HttpClient(connect_timeout_ms=1_000, read_timeout_ms=2_000)
        self._quick = quick_client or HttpClient(
            connect_timeout_ms=REFRESH_CONNECT_TIMEOUT_MS,
            read_timeout_ms=REFRESH_READ_TIMEOUT_MS,
        )
        self._scheme = scheme
        self._poll_s = poll_s
        self._remembered = remembered
        self._clock = clock
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # the poll thread and a caller's refresh both save
        self._reports: dict[str, Capabilities] = self._load()
        self._reports[node_id] = local_capabilities()
        self._asked_s: dict[str, float] = {}  # member -> when a caller's refresh last asked it
        self._management: dict[str, str] = {}
        if management_addr is not None:
            self._management[node_id] = management_addr
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.polls = 0  # completed poll rounds (tests wait on it)
        self._thread = threading.Thread(target=self._run, name="voter-capabilities", daemon=True)

    @property
    def voters(self) -> tuple[str, ...]:
        """This node and every other member of the configuration in force."""
        return (self._node_id, *(m for m in self._members() if m != self._node_id))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._client.close()
        self._quick.close()

    def reports(self) -> dict[str, Capabilities | None]:
        """The last report of every member (None: never heard from)."""
        with self._lock:
            return {member: self._reports.get(member) for member in self.voters}

    def management_addr(self, node: str) -> str | None:
        """Where ``node`` said its management listener is (None: not heard, or it has none)."""
        with self._lock:
            return self._management.get(node)

    def refusal(self, kind: str) -> str | None:
        """Why ``kind`` may not be proposed yet (None: every member can apply it). No I/O: a
        refusal that waits for a voter's first report wakes the poll thread instead."""
        learners = frozenset(self._learners())
        reports = self.reports()
        refusal = gate_refusal(kind, self.voters, reports, learners=learners)
        if refusal is not None and any(
            report is None and member not in learners for member, report in reports.items()
        ):
            self._wake.set()
        return refusal

    def refresh(self) -> None:
        """Ask, on the caller's thread, each voter of the configuration that has not reported
        (not learners: one without a report is left out of the gate anyway), at most once per
        ``REFRESH_INTERVAL_S`` each; short timeouts, so a voter that is down costs little."""
        learners = frozenset(self._learners())
        for member, address in self._members().items():
            if member == self._node_id or not address or member in learners:
                continue
            with self._lock:
                if member in self._reports:
                    continue
                now_s = self._clock()
                if now_s - self._asked_s.get(member, float("-inf")) < REFRESH_INTERVAL_S:
                    continue
                self._asked_s[member] = now_s
            self._take(member, self._ask(member, address, self._quick))

    def report_of(self, member: str, *, ask: bool = False) -> Capabilities | None:
        """``member``'s report; with ``ask``, asked now on the caller's thread (the last one
        stands if it cannot be reached)."""
        address = self._members().get(member, "")
        if ask and address and member != self._node_id:
            self._take(member, self._ask(member, address, self._quick))
        with self._lock:
            return self._reports.get(member)

    def poll_once(self) -> None:
        changed = False
        for peer, address in self._members().items():
            if peer == self._node_id or not address:
                continue
            changed = (
                self._take(peer, self._ask(peer, address, self._client), save=False) or changed
            )
        if changed:
            self._save()
        self.polls += 1

    def _take(self, peer: str, report: Capabilities | None, *, save: bool = True) -> bool:
        """Keep ``report`` as ``peer``'s; True if it changed what is known."""
        if report is None:
            return False
        with self._lock:
            if self._reports.get(peer) == report:
                return False
            self._reports[peer] = report
        log.info("voter %s runs binary %s", peer, report.binary)
        if save:
            self._save()
        return True

    def _unreported(self) -> bool:
        """A voter that has an address has never answered (a learner that has not is left out
        of the gate, so it is asked at the usual interval)."""
        members = self._members()
        learners = frozenset(self._learners())
        with self._lock:
            return any(
                address and member not in self._reports
                for member, address in members.items()
                if member != self._node_id and member not in learners
            )

    def _ask(self, peer: str, address: str, client: HttpClient) -> Capabilities | None:
        try:
            answer = client.get(
                f"{self._scheme}://{address}{STATUS_PATH}",
                bearer=self._token,
                response_bytes_max=REPORT_BYTES_MAX,
            )
            if answer.status != 200:
                return None
            body = answer.json()
            if isinstance(body, dict):
                self._learn_management_addr(peer, body)
            if not isinstance(body, dict) or "capabilities" not in body:
                # A binary from before the gate: it applies exactly the baseline.
                return None
            return capabilities_from_json(body["capabilities"])
        except (ClientError, ValueError) as exc:
            log.debug("capabilities of %s not read: %s", peer, exc)
            return None

    def _learn_management_addr(self, peer: str, body: Mapping[str, object]) -> None:
        management = management_addr_of(body)
        with self._lock:
            if management is None:
                self._management.pop(peer, None)
            else:
                self._management[peer] = management

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            interval_s = UNREPORTED_POLL_S if self._unreported() else self._poll_s
            self._wake.wait(interval_s)
            self._wake.clear()

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
        with self._save_lock:
            self._save_now()

    def _save_now(self) -> None:
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
