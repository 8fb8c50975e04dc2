"""``create_management_app``: the operator listener's Falcon app (SPEC §8, seeds/001).

Theory of operation. The order of refusals is the security order, all before the body is parsed:

1. ``BearerAuth`` (shared HTTP layer, ``process_request``): no bearer, an unknown token, or a
   worker/admission/cluster credential → 401. Only ``operator`` and ``recovery`` are accepted.
2. ``OriginGuard`` (``process_request``): any ``Origin`` header → 403; this listener has no
   browser flow, so a request a browser made on a page's behalf is never served.
3. ``BodyCap`` (shared, ``process_resource``): a declared length over 72 KiB → 413 unread; the
   responders read at most cap + 1 bytes, so an undeclared oversized body is 413 too.

Then the responders parse strictly, validate (``commands.check_command``: 403 / 400 naming the
field, before the queue) and hand the command to the gateway (``replies.run_command``). Routes:
``GET /scheduler/v1/status``, ``GET /scheduler/v1/schedules``, ``POST /scheduler/v1/commands`` and
``POST /mcp`` (``mcp_endpoint``). With an ``Observability`` (a live voter, see
``appliance.metrics.voter``) the documented extensions are mounted too, all read-only local views
that never enter the runner loop: ``GET /metrics`` (Prometheus), ``GET /scheduler/v1/health``,
``GET /scheduler/v1/occurrences/{id}`` (one occurrence's detail, with each dispatched attempt's
report), ``GET /scheduler/v1/occurrences/{id}/output[?attempt=N]`` (what one attempt did —
completion value, error message and stack, console output, timings — fetched from the worker,
bounded) and
``GET /scheduler/v1/schedules/{id}/history``. Nothing else is mounted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import falcon

from appliance.config.credentials import RunnerCredentials
from appliance.core.limits import LimitsInForce, limits_reader
from appliance.http import ApiError, create_app, read_json_object
from appliance.management.commands import Refused, check_command
from appliance.management.gateway import CommandGateway
from appliance.management.mcp_endpoint import McpEndpoint
from appliance.management.replies import (
    REPLY_TIMEOUT_S_DEFAULT,
    Outcome,
    error_outcome,
    run_command,
)
from appliance.protocol.v1 import ID_DIGITS_MAX, ID_MAX
from appliance.secret import Secret

log = logging.getLogger("appliance.management")

KiB: Final = 1024
REQUEST_BYTES_MAX: Final = 72 * KiB
MANAGEMENT_ROLES: Final = frozenset({"operator", "recovery", "admin"})
STATUS_PATH: Final = "/scheduler/v1/status"
SCHEDULES_PATH: Final = "/scheduler/v1/schedules"
COMMANDS_PATH: Final = "/scheduler/v1/commands"
MCP_PATH: Final = "/mcp"
METRICS_PATH: Final = "/metrics"
HEALTH_PATH: Final = "/scheduler/v1/health"
OCCURRENCE_PATH: Final = "/scheduler/v1/occurrences/{occurrence_id}"
OUTPUT_PATH: Final = "/scheduler/v1/occurrences/{occurrence_id}/output"
HISTORY_PATH: Final = "/scheduler/v1/schedules/{schedule_id}/history"
EVENTS_PATH: Final = "/scheduler/v1/events"
SCHEDULE_PATH: Final = "/scheduler/v1/schedules/{schedule_id}"
EVENTS_QUERY: Final = ("after", "wait_ms", "schedule_id", "occurrence_id", "output")
CURSOR_DIGITS_MAX: Final = 19  # a Raft index fits in 63 bits


class ViewReply(Protocol):
    status: int
    body: dict[str, Any]


class Observability(Protocol):
    """The read-only views of a live voter (``appliance.metrics.voter.VoterObservability``)."""

    @property
    def registry(self) -> Any: ...

    def health(self) -> ViewReply: ...

    def occurrence(self, occurrence_id: int) -> ViewReply: ...

    def output(self, occurrence_id: int, attempt: int | None = None) -> ViewReply: ...

    def schedule(self, schedule_id: int) -> ViewReply: ...

    def events(self, query: Any) -> ViewReply: ...

    def describe(self, schedule_id: int) -> ViewReply: ...


@dataclass(frozen=True)
class ManagementOptions:
    request_bytes_max: int = REQUEST_BYTES_MAX
    reply_timeout_s: float = REPLY_TIMEOUT_S_DEFAULT


def credential_table(
    credentials: RunnerCredentials | Mapping[str, Secret | str | None],
) -> dict[str, Secret | str | None]:
    """role → credential, including the roles that must be refused (worker, admission, cluster)."""
    if isinstance(credentials, RunnerCredentials):
        table: dict[str, Secret | str | None] = dict(credentials.known_roles())
    else:
        table = dict(credentials)
    if table.get("operator") is None:
        raise ValueError("the management listener needs an operator credential (bearer_env)")
    return table


class OriginGuard:
    """Falcon middleware: 403 for any request carrying an ``Origin`` header (after auth)."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.get_header("Origin") is not None:
            log.warning("management: refused %s %s: Origin header present", req.method, req.path)
            raise ApiError(
                403,
                "origin_refused",
                "requests with an Origin header are refused: this listener has no browser flow",
            )


def send(resp: falcon.Response, outcome: Outcome) -> None:
    resp.status = falcon.code_to_http_status(outcome.status)
    resp.content_type = falcon.MEDIA_JSON
    resp.data = json.dumps(outcome.body, separators=(",", ":"), ensure_ascii=False).encode()


class _Read:
    """``GET`` status / schedules: the ``status`` / ``list`` command."""

    def __init__(self, action: str, gateway: CommandGateway, options: ManagementOptions) -> None:
        self._action = action
        self._gateway = gateway
        self._options = options

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        role = req.context.auth_role
        send(
            resp,
            run_command(
                self._gateway, {"action": self._action}, role, self._options.reply_timeout_s
            ),
        )


class _Commands:
    """``POST /scheduler/v1/commands``: one tagged command (the stdin document)."""

    def __init__(
        self, gateway: CommandGateway, limits: LimitsInForce, options: ManagementOptions
    ) -> None:
        self._gateway = gateway
        self._limits = limits_reader(limits)
        self._options = options

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        role = req.context.auth_role
        try:
            document = read_json_object(req)
        except ApiError as exc:
            if exc.status_code == 413:
                raise
            send(resp, error_outcome(exc.status_code, exc.error_code, exc.message))
            return
        try:
            command = check_command(document, role, self._limits())
        except Refused as refused:
            action = str(document.get("action"))[:32]  # client text: bounded, repr'd
            log.info("management: refused %r (%s): %s", action, role, refused.code)
            send(
                resp,
                error_outcome(
                    refused.status,
                    refused.code,
                    refused.message,
                    field=refused.field,
                    problems=refused.problems,
                ),
            )
            return
        send(resp, run_command(self._gateway, command, role, self._options.reply_timeout_s))


def _path_id(value: str, name: str) -> int:
    """A path segment that must be a positive id (400 naming it otherwise)."""
    # The digit count bounds int() before the value is compared with the wire's one id limit.
    if (
        not (value.isascii() and value.isdigit())
        or len(value) > ID_DIGITS_MAX
        or not 1 <= int(value) <= ID_MAX
    ):
        raise ApiError(400, "invalid_id", f"{name}: must be an integer id in [1, {ID_MAX}]")
    return int(value)


def send_view(resp: falcon.Response, reply: ViewReply) -> None:
    send(resp, Outcome(reply.status, reply.body))


class _Health:
    def __init__(self, views: Observability) -> None:
        self._views = views

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_view(resp, self._views.health())


class _Occurrence:
    def __init__(self, views: Observability) -> None:
        self._views = views

    def on_get(self, req: falcon.Request, resp: falcon.Response, occurrence_id: str) -> None:
        send_view(resp, self._views.occurrence(_path_id(occurrence_id, "occurrence_id")))


class _Output:
    def __init__(self, views: Observability) -> None:
        self._views = views

    def on_get(self, req: falcon.Request, resp: falcon.Response, occurrence_id: str) -> None:
        oid = _path_id(occurrence_id, "occurrence_id")
        unknown = set(req.params) - {"attempt"}
        if unknown:
            raise ApiError(400, "invalid_query", f"{sorted(unknown)[0]}: unknown query parameter")
        text = req.params.get("attempt")
        if text is None:
            send_view(resp, self._views.output(oid))
            return
        if not isinstance(text, str):
            raise ApiError(400, "invalid_query", "attempt: give it once")
        send_view(resp, self._views.output(oid, _path_id(text, "attempt")))


class _Describe:
    def __init__(self, views: Observability) -> None:
        self._views = views

    def on_get(self, req: falcon.Request, resp: falcon.Response, schedule_id: str) -> None:
        send_view(resp, self._views.describe(_path_id(schedule_id, "schedule_id")))


class _History:
    def __init__(self, views: Observability) -> None:
        self._views = views

    def on_get(self, req: falcon.Request, resp: falcon.Response, schedule_id: str) -> None:
        send_view(resp, self._views.schedule(_path_id(schedule_id, "schedule_id")))


def _query_int(req: falcon.Request, name: str, low: int, high: int) -> int | None:
    text = req.params.get(name)
    if text is None:
        return None
    if not isinstance(text, str):
        raise ApiError(400, "invalid_query", f"{name}: give it once")
    if not (text.isascii() and text.isdigit()) or len(text) > CURSOR_DIGITS_MAX:
        raise ApiError(400, "invalid_query", f"{name}: must be an integer in [{low}, {high}]")
    value = int(text)
    if not low <= value <= high:
        raise ApiError(400, "invalid_query", f"{name}: must be an integer in [{low}, {high}]")
    return value


class _Events:
    """``GET /scheduler/v1/events``: the change feed (``appliance.metrics.feed``), a long poll
    bounded by ``wait_ms`` (at most 25 s)."""

    def __init__(self, views: Observability) -> None:
        self._views = views

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        from appliance.metrics.feed import WAIT_MS_MAX
        from appliance.metrics.voter import EventsQuery

        unknown = set(req.params) - set(EVENTS_QUERY)
        if unknown:
            raise ApiError(400, "invalid_query", f"{sorted(unknown)[0]}: unknown query parameter")
        output = req.params.get("output", "false")
        if output not in ("true", "false", "1", "0"):
            raise ApiError(400, "invalid_query", "output: must be true or false")
        query = EventsQuery(
            after=_query_int(req, "after", 0, 2**63 - 1),
            wait_ms=_query_int(req, "wait_ms", 0, WAIT_MS_MAX) or 0,
            schedule_id=_query_int(req, "schedule_id", 1, ID_MAX),
            occurrence_id=_query_int(req, "occurrence_id", 1, ID_MAX),
            output=output in ("true", "1"),
        )
        if query.output and query.occurrence_id is None:
            raise ApiError(400, "invalid_query", "output: needs occurrence_id")
        send_view(resp, self._views.events(query))


def observability_routes(views: Observability) -> dict[str, Any]:
    from appliance.metrics.exposition import MetricsResource

    return {
        METRICS_PATH: MetricsResource(views.registry),
        HEALTH_PATH: _Health(views),
        OCCURRENCE_PATH: _Occurrence(views),
        OUTPUT_PATH: _Output(views),
        HISTORY_PATH: _History(views),
        EVENTS_PATH: _Events(views),
        SCHEDULE_PATH: _Describe(views),
    }


def create_management_app(
    gateway: CommandGateway,
    credentials: RunnerCredentials | Mapping[str, Secret | str | None],
    limits: LimitsInForce,
    options: ManagementOptions | None = None,
    observability: Observability | None = None,
) -> falcon.App:
    """The management WSGI app; ``credentials`` must hold every role the process knows."""
    options = options or ManagementOptions()
    table = credential_table(credentials)
    routes: dict[str, Any] = {
        STATUS_PATH: _Read("status", gateway, options),
        SCHEDULES_PATH: _Read("list", gateway, options),
        COMMANDS_PATH: _Commands(gateway, limits, options),
        MCP_PATH: McpEndpoint(gateway, limits, options.reply_timeout_s, observability),
    }
    if observability is not None:
        routes.update(observability_routes(observability))
    return create_app(
        routes=routes,
        credentials=table,
        accepted_roles=MANAGEMENT_ROLES,
        body_bytes_max=options.request_bytes_max,
        surface="management",
        extra_middleware=[OriginGuard()],
    )
