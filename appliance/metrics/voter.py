"""What one voter shows operators: metrics, health, history and output, from a running ``Runner``.

``VoterObservability`` is handed to the management app. It reads only what the runner already
exposes — the machine (replicated state, under its lock), the replication status, the store's log
bounds, the runner's clock, acquired epoch and worker client — and never enters the runner loop, so
a busy or wedged loop still leaves ``/metrics`` and the health view answering. Reads are local
views: like ``list``, they may lag the acquired owner by the entries not yet applied here.

Output retrieval goes through the runner's worker client to the worker's executions route (worker
bearer, bounded response), so the console output of a run is fetched on demand and never copied
into the checkpoint.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

from appliance.config.addresses import parse_host_port
from appliance.config.rfc3339 import format_utc
from appliance.core import state as core
from appliance.core.binding import instant_text
from appliance.core.occurrence import OccurrenceState
from appliance.http import ClientError, HttpClient
from appliance.metrics.attempt_report import (
    OUTPUT_BYTES_MAX,
    attempt_of,
    attempt_report,
    occurrence_extras,
)
from appliance.metrics.describe import describe_schedule
from appliance.metrics.feed import matches
from appliance.metrics.health import HealthInputs, WorkerView, health_document
from appliance.metrics.history import occurrence_view, schedule_history
from appliance.metrics.runner import RunnerMetrics, VoterView, state_figures
from appliance.metrics.voters import VoterProbe
from appliance.owner.binding import execution_id
from appliance.owner.binding import execution_id as execution_id_of
from appliance.owner.contract_state import remote_in_force
from appliance.owner.worker_answers import ObserveResult
from appliance.protocol.v1 import EXECUTIONS_PREFIX, invocation_of
from appliance.secret import Secret

T = TypeVar("T")

OUTPUT_REPLY_BYTES_MAX: Final = OUTPUT_BYTES_MAX
WORKER_PROBE_TIMEOUT_MS: Final = 1000
WORKER_EXECUTIONS_PATH: Final = EXECUTIONS_PREFIX
# A syntactically valid execution id no schedule can have (ids start at 1): any HTTP answer to it
# proves the worker is up, 404 proves it also accepted the bearer.
PROBE_EXECUTION_ID: Final = "s0-o0-a0"


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]


def compaction_behind(log_entries: int | None, cfg: Any) -> str | None:
    """Growth outpaces compaction: the log holds over twice what the policy lets it reach
    (``snapshot_entries + trailing_entries`` plus the checkpoint's lag)."""
    raft = getattr(cfg, "raft", None)
    if log_entries is None or raft is None or not hasattr(raft, "snapshot_entries"):
        return None
    bound = 2 * (raft.snapshot_entries + raft.trailing_entries)
    if log_entries <= bound:
        return None
    return (
        f"the Raft log holds {log_entries} entries, over twice the {bound // 2} that "
        "compaction keeps it to: the checkpoint is not keeping up (see the checkpoint writer) "
        "or compaction is failing (see the voter's log)"
    )


def _paused_at(since_s: int | None) -> str | None:
    return None if since_s is None else instant_text(since_s)


def _no_occurrence(occurrence_id: int) -> Reply:
    # The wording and code of the commands' refusal (appliance/management/refusals.py).
    return _error(404, "no_such_occurrence", f"occurrence_id: no occurrence {occurrence_id}")


def _error(status: int, code: str, message: str) -> Reply:
    return Reply(
        status, {"ok": False, "status": status, "error": {"code": code, "message": message}}
    )


class RunnerReader:
    """The ``RunnerSource`` of a live runner (attributes it already has; no loop round trip)."""

    def __init__(self, runner: Any, store: Any = None, probe: VoterProbe | None = None) -> None:
        self._runner = runner
        self._store = store
        self._probe = probe

    def raft_status(self) -> dict[str, Any]:
        return dict(self._runner.replication.status())

    def read(self, fn: Callable[[core.SchedulerState], T]) -> T:
        return self._runner.machine.read(fn)

    def acquired_epoch(self) -> int | None:
        return self._runner.epoch

    def remote_in_force(self) -> Any:
        """The remote of the contract in force: the genesis with the committed amendments (a
        renewed grant), never the config file's (appliance/owner/contract_state.py)."""
        genesis = self._runner.cfg.remote
        return self._runner.machine.read(lambda st: remote_in_force(genesis, st))

    def grant_seconds_left(self) -> float:
        return self.remote_in_force().expires_at.timestamp() - self._runner.clock.now_s()

    def log_entries(self) -> int | None:
        status = self.raft_status()
        if status.get("backend") == "etcd":  # the log keys kept under the prefix
            first, last = status.get("first_log_index"), status.get("commit_index")
            if isinstance(first, int) and isinstance(last, int):
                return max(0, last - first + 1)
            return None
        if self._store is None:
            return None
        first, last = self._store.first_index(), self._store.last_index()
        return 0 if first == 0 else last - first + 1

    def store_bytes(self) -> int | None:
        path = getattr(self._store, "path", None)
        if path is None:
            return None
        return sum(
            f.stat().st_size
            for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
            if f.exists()
        )

    def voters(self) -> list[VoterView]:
        """The other voters of the configuration in force (genesis until a change), probed."""
        if self._probe is None:
            return []
        status = self.raft_status()
        in_force = peers_in_force(status, self._probe.genesis)
        if in_force is not None:
            self._probe.follow(in_force)
        return self._probe.views(status.get("commit_index"))


def peers_in_force(status: dict[str, Any], genesis: dict[str, Any]) -> dict[str, Any] | None:
    """id -> cluster address of every voter of the configuration in force but this node (the
    address a run-time member was added with, else its genesis one); None if not known."""
    configuration = status.get("configuration")
    if not isinstance(configuration, dict):
        return None
    added = configuration.get("addresses") or {}
    out: dict[str, Any] = {}
    for node in configuration.get("voters") or ():
        if node == status.get("node_id"):
            continue
        if node in added:
            out[node] = parse_host_port(str(added[node]))
        elif node in genesis:
            out[node] = genesis[node]
    return out


def voters_in_force(status: dict[str, Any]) -> int | None:
    """How many voters the configuration in force has (None if not known)."""
    configuration = status.get("configuration")
    if not isinstance(configuration, dict) or not configuration.get("voters"):
        return None
    return len(configuration["voters"])


class WorkerProbe:
    """Is the runner's worker up and accepting the worker bearer? (one bounded GET)"""

    def __init__(
        self, url: str, bearer: Secret | str, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._bearer = bearer
        self._client = HttpClient(
            connect_timeout_ms=WORKER_PROBE_TIMEOUT_MS,
            read_timeout_ms=WORKER_PROBE_TIMEOUT_MS,
            ssl_context=ssl_context,  # an https worker: the cluster CA (appliance.http.tls)
        )

    def close(self) -> None:
        self._client.close()

    def view(self) -> WorkerView:
        try:
            response = self._client.get(
                self.url + WORKER_EXECUTIONS_PATH + PROBE_EXECUTION_ID,
                bearer=self._bearer,
                response_bytes_max=4096,
            )
        except ClientError as exc:
            return WorkerView(self.url, reachable=False, authorized=False, detail=exc.reason)
        authorized = response.status != 401
        # The probe asks for an execution id no worker ever holds: any answer but 401 means
        # the worker is up and took the bearer (it answers 404 or 410 for the id).
        if not authorized:
            detail = f"refused the worker bearer (HTTP {response.status})"
        elif response.status in (404, 410):
            detail = "up: answered the probe as expected"
        else:
            detail = f"up, but answered the probe with HTTP {response.status}"
        return WorkerView(self.url, True, authorized, detail=detail)


class FleetProbe:
    """Every worker of the fleet in force, probed as :class:`WorkerProbe` probes one (issue 33):
    ``remote`` gives the fleet in force, ``bearer(worker_id, remote)`` the credential that
    worker expects. One probe per worker, built on first use, dropped when it leaves."""

    def __init__(
        self,
        remote: Callable[[], Any],
        bearer: Callable[[str, Any], Secret | str],
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._remote = remote
        self._bearer = bearer
        self._ssl_context = ssl_context
        self._probes: dict[str, WorkerProbe] = {}

    def views(self) -> list[WorkerView]:
        remote = self._remote()
        out = []
        for spec in remote.fleet:
            probe = self._probes.get(spec.worker_id)
            if probe is None or probe.url != spec.url.url:
                if probe is not None:
                    probe.close()
                probe = WorkerProbe(
                    spec.url.url,
                    self._bearer(spec.worker_id, remote),
                    ssl_context=self._ssl_context,
                )
                self._probes[spec.worker_id] = probe
            view = probe.view()
            out.append(replace(view, worker_id=spec.worker_id))
        for gone in [w for w in self._probes if remote.worker(w) is None]:
            self._probes.pop(gone).close()
        return out

    def view(self) -> WorkerView:
        return self.views()[0]

    def close(self) -> None:
        for probe in self._probes.values():
            probe.close()
        self._probes.clear()


class VoterObservability:
    """Metrics, health, history and output of one voter, for the management listener."""

    def __init__(
        self,
        runner: Any,
        *,
        metrics: RunnerMetrics | None = None,
        store: Any = None,
        probe: VoterProbe | None = None,
        worker_probe: WorkerProbe | FleetProbe | None = None,
    ) -> None:
        self.runner = runner
        self.metrics = metrics or RunnerMetrics()
        self.reader = RunnerReader(runner, store, probe)
        self._probe = probe
        self._worker_probe = worker_probe
        self.metrics.attach(self.reader)
        machine = getattr(runner, "machine", None)
        if machine is not None and hasattr(machine, "on_applied"):
            machine.on_applied(self.metrics.on_applied)

    @property
    def registry(self) -> Any:
        return self.metrics.registry

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
        if self._worker_probe is not None:
            self._worker_probe.close()

    # -- health --

    def health(self) -> Reply:
        reader = self.reader
        raft = reader.raft_status()
        figures = reader.read(state_figures)
        unknown = reader.read(
            lambda st: sorted(
                oid for oid, r in st.occurrences.items() if r.state is OccurrenceState.UNKNOWN
            )
        )
        peers = reader.voters()
        cfg = self.runner.cfg
        probe = self._worker_probe
        if isinstance(probe, FleetProbe):
            workers = probe.views()
        else:
            workers = [] if probe is None else [probe.view()]
        inputs = HealthInputs(
            node_id=cfg.node_id,
            raft=raft,
            peers=peers,
            figures=figures,
            unknown_ids=unknown,
            acquired_epoch=reader.acquired_epoch(),
            grant_expires_at=format_utc(reader.remote_in_force().expires_at),
            grant_seconds_left=reader.grant_seconds_left(),
            worker=workers[0] if workers else None,
            workers=workers,
            # The configuration in force (a membership change moves it away from the genesis).
            voters_total=voters_in_force(raft)
            or (1 + len(peers) if self._probe is not None else len(cfg.voters)),
            compaction_behind=compaction_behind(reader.log_entries(), cfg),
            store_bytes=reader.store_bytes(),
            log_entries=reader.log_entries(),
            paused_at=_paused_at(reader.read(core.paused_since)),
        )
        return Reply(200, {"ok": True, "local_view": True, **health_document(inputs)})

    # -- history --

    def occurrence(self, occurrence_id: int) -> Reply:
        view = self.reader.read(lambda st: occurrence_view(st, occurrence_id))
        if view is None:
            return _error(
                404, "no_such_occurrence", f"occurrence_id: no occurrence {occurrence_id}"
            )
        max_retries = self.reader.read(lambda st: _max_retries(st, view["schedule_id"]))
        # Per attempt: what ran (value, error, output, timings), fetched from the worker.
        worker = view.get("worker_id")
        view.update(
            occurrence_extras(view, max_retries, lambda eid: _observe(self.runner, eid, worker))
        )
        return Reply(200, {"ok": True, "local_view": True, "occurrence": view})

    def describe(self, schedule_id: int) -> Reply:
        """One schedule whole, its code included (``appliance.metrics.describe``)."""
        now_s = self.runner.clock.now_s()
        view = self.reader.read(lambda st: describe_schedule(st, schedule_id, now_s))
        if view is None:
            return _error(404, "no_such_schedule", f"id: no schedule {schedule_id}")
        # The voter's clock: what "next run in 2m" is relative to (a CLI's clock may differ).
        return Reply(200, {"ok": True, "local_view": True, "now": instant_text(int(now_s)), **view})

    def schedule(self, schedule_id: int) -> Reply:
        view = self.reader.read(lambda st: schedule_history(st, schedule_id))
        if view is None:
            return _error(404, "no_such_schedule", f"id: no schedule {schedule_id}")
        return Reply(200, {"ok": True, "local_view": True, **view})

    # -- output --

    # -- the change feed: watch, follow, the console's live view --

    def events(self, query: EventsQuery) -> Reply:
        """The committed changes after ``query.after`` (``appliance.metrics.feed``), waiting up to
        ``query.wait_ms`` for one; with ``occurrence_id``, that occurrence as it is now, and with
        ``output`` its latest dispatched attempt's report so far (fetched from the worker)."""
        feed = getattr(self.runner, "changes", None)
        if feed is None:
            return _error(503, "unavailable", "this voter keeps no change feed")
        oid = query.occurrence_id
        if oid is not None and self.reader.read(lambda st: st.occurrences.get(oid)) is None:
            return _no_occurrence(oid)
        page = feed.page(query.after, query.wait_ms, matches(query.schedule_id, oid))
        body: dict[str, Any] = {
            "ok": True,
            "local_view": True,
            "node": self.runner.cfg.node_id,
            "cursor": page.cursor,
            "first_cursor": page.first_cursor,
            "gap": page.gap,
            "more": page.more,
            "events": page.events,
        }
        if not page.waited:
            body["wait_refused"] = "too many requests are waiting; ask again shortly"
        if oid is not None:
            record = self.reader.read(lambda st: st.occurrences.get(oid))
            body["occurrence"] = None if record is None else occurrence_now(record)
            if query.output and record is not None:
                report = self.output(oid)
                if report.status == 200:
                    body["output"] = report.body
                else:
                    body["output"] = None
                    body["output_unavailable"] = report.body.get("error")
        return Reply(200, body)

    def output(self, occurrence_id: int, attempt: int | None = None) -> Reply:
        return occurrence_output(self.reader.read, self.runner.worker, occurrence_id, attempt)


@dataclass(frozen=True)
class EventsQuery:
    """The change feed's query (``GET /scheduler/v1/events``), checked by the route."""

    after: int | None = None
    wait_ms: int = 0
    schedule_id: int | None = None
    occurrence_id: int | None = None
    output: bool = False


def occurrence_now(record: Any) -> dict[str, Any]:
    """An occurrence as it is now, for a follower: enough to know whether to go on."""
    view: dict[str, Any] = {
        "id": record.id,
        "schedule_id": record.schedule_id,
        "state": record.state.value,
        "attempt": record.attempt,
        "terminal": record.terminal,
        "due": instant_text(record.due_s),
    }
    if record.not_before_s is not None:
        view["not_before"] = instant_text(record.not_before_s)
    if record.failure_reason:
        view["failure_reason"] = record.failure_reason
    return view


def occurrence_output(
    read: Callable[[Callable[[core.SchedulerState], Any]], Any],
    worker: Any,
    occurrence_id: int,
    attempt: int | None = None,
) -> Reply:
    """One attempt's report as the worker holds it now (the latest dispatched one by default):
    the one function behind ``GET .../occurrences/{id}/output``, the ``output`` of
    ``GET /scheduler/v1/events`` (``admin output --follow``) and the web console's followed
    output. ``read`` reads the voter's applied state; ``worker`` is its worker client."""
    record = read(lambda st: st.occurrences.get(occurrence_id))
    if record is None:
        return _error(404, "no_such_occurrence", f"occurrence_id: no occurrence {occurrence_id}")
    if attempt is not None:
        if not 1 <= attempt <= record.attempt:
            return _error(
                404,
                "no_such_attempt",
                f"attempt: occurrence {occurrence_id} has attempts 1 to {record.attempt}",
            )
        execution_id = execution_id_of(record.schedule_id, record.id, attempt)
    else:
        execution_id = latest_execution_id(record)
    if execution_id is None:
        return _error(404, "not_dispatched", f"occurrence {occurrence_id} was never dispatched")
    attempt = attempt_of(execution_id) or record.attempt
    # A fleet (issue 33): the worker the latest claim binds is asked first, then the others (an
    # older attempt may have run elsewhere); the one worker's client otherwise.
    claimed = read(lambda st: claim_worker(st, occurrence_id))
    anywhere = getattr(worker, "observe_anywhere", None)
    ran_on, observed = (
        anywhere(execution_id, claimed)
        if anywhere is not None
        else (None, worker.observe(execution_id))
    )
    if observed is None or observed.status is None or observed.document is None:
        detail = "" if observed is None else observed.detail[:200]
        return _error(
            502,
            "worker_unavailable",
            f"the worker did not return execution {execution_id}: {detail}",
        )
    body = _output_body(occurrence_id, attempt, execution_id, observed)
    if ran_on is not None:
        body["worker_id"] = ran_on  # the fleet worker that ran it
    return Reply(200, body)


def latest_execution_id(record: Any) -> str | None:
    """The worker's id of the record's latest dispatched attempt.

    A claimed attempt's id is derived (schedule, occurrence, attempt), so it is known even when the
    exec answer was lost (Unknown). A Pending record's current attempt has not been dispatched: its
    latest run is the one whose outcome recorded ``execution_id`` (a retry-waiting failure).
    """
    if record.state is OccurrenceState.PENDING:
        return record.execution_id
    return execution_id(record.schedule_id, record.id, record.attempt)


def _output_body(occurrence_id: int, attempt: int, execution_id: str, observed: Any) -> dict:
    return {
        "ok": True,
        "occurrence_id": occurrence_id,
        "attempt": attempt,
        "execution_id": execution_id,
        **attempt_report(observed.document),
        "status": observed.status,
    }


def observe_at(runner: Any, execution_id: str, first: str | None) -> tuple[str | None, Any]:
    """(worker, answer): the fleet's worker that holds the execution (``first`` asked first),
    or the one worker's answer when the runner knows no fleet."""
    anywhere = getattr(runner.worker, "observe_anywhere", None)
    if anywhere is not None:
        return anywhere(execution_id, first)  # type: ignore[no-any-return]
    return None, runner.worker.observe(execution_id)


def observe_execution(runner: Any, execution_id: str) -> Any:
    """The worker's answer about ``execution_id``, asked of the worker its occurrence's claim
    binds first (a fleet, issue 33), then of the others; the one worker's otherwise."""
    invocation = invocation_of(execution_id, "")
    first = None
    if invocation is not None:
        oid = invocation.occurrence_id
        first = runner.machine.read(lambda st: claim_worker(st, oid))
    answer = observe_at(runner, execution_id, first)[1]
    return answer if answer is not None else ObserveResult(None, detail="no worker answered")


def claim_worker(st: core.SchedulerState, occurrence_id: int) -> str | None:
    """The worker the record's latest committed claim binds (its current attempt's)."""
    admission = core.admission_record(st, occurrence_id)
    return None if admission is None or admission.claim is None else admission.claim.worker_id


def _observe(runner: Any, execution_id: str, first: str | None = None) -> tuple[str | None, Any]:
    worker, observed = observe_at(runner, execution_id, first)
    if observed is None:
        return None, "no worker of the fleet answered"
    if not observed.status:
        return None, observed.detail
    document = dict(observed.document or {})
    if worker is not None:
        document["worker_id"] = worker
    return observed.status, document


def _max_retries(st: core.SchedulerState, schedule_id: int) -> int | None:
    schedule = st.schedules.get(schedule_id)
    return None if schedule is None else schedule.definition.policy.retry.max_retries
