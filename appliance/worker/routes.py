"""The worker's scheduled routes (SPEC §7): exactly three, behind the worker bearer.

Theory of operation: ``create_worker_app`` builds the Falcon app through the shared
``appliance.http.create_app``, so the bearer is checked before routing and before any body byte
is read (401), the 512 KiB cap applies to the serialized body, escaping included (413), and every
error renders as ``{"protocol": 1, "error": {"code", "message"}}``. Nothing else is mounted: any
other path is 404 — after authentication. Resources only parse, delegate to ``WorkerService``
and serialize.
"""

from __future__ import annotations

import json
from typing import Final

import falcon

from appliance.http import ApiError, create_app, read_json_object
from appliance.protocol.v1 import (
    CANCEL_PATH,
    EXEC_PATH,
    PROTOCOL_VERSION,
    RETAINED_THROUGH_PARAM,
    invocation_of,
    parse_retained_through,
)
from appliance.protocol.v1 import EXECUTIONS_ROUTE as EXECUTIONS_PATH
from appliance.secret import Secret
from appliance.worker.service import Answer, WorkerService
from appliance.worker.wire import WireError, parse_cancel, parse_exec

__all__ = ["BODY_BYTES_MAX", "CANCEL_PATH", "EXECUTIONS_PATH", "EXEC_PATH", "create_worker_app"]

BODY_BYTES_MAX: Final = 512 * 1024
ROLE: Final = "worker"


def _respond(resp: falcon.Response, answer: Answer) -> None:
    resp.status = falcon.code_to_http_status(answer.status)
    resp.content_type = falcon.MEDIA_JSON
    resp.data = json.dumps(answer.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _bad_request(error: WireError) -> ApiError:
    return ApiError(400, error.code, error.message)


def _retained_through(req: falcon.Request) -> int | None:
    """The runner's retention floor W from the query (docs/worker.md "Retention")."""
    try:
        return parse_retained_through(req.get_param(RETAINED_THROUGH_PARAM))
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None


class ExecResource:
    def __init__(self, service: WorkerService) -> None:
        self._service = service

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            request = parse_exec(read_json_object(req))
        except WireError as error:
            raise _bad_request(error) from None
        _respond(resp, self._service.execute(request, _retained_through(req)))


class ExecutionResource:
    def __init__(self, service: WorkerService, namespace: str) -> None:
        self._service = service
        self._namespace = namespace

    def on_get(self, req: falcon.Request, resp: falcon.Response, execution_id: str) -> None:
        invocation = invocation_of(execution_id, self._namespace)
        if invocation is None:
            raise ApiError(404, "unknown_execution", "not an execution id of this worker")
        _respond(resp, self._service.observe(invocation, _retained_through(req)))


class CancelResource:
    def __init__(self, service: WorkerService) -> None:
        self._service = service

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            request = parse_cancel(read_json_object(req))
        except WireError as error:
            raise _bad_request(error) from None
        _respond(resp, self._service.cancel(request))


def create_worker_app(service: WorkerService, namespace: str, bearer: Secret) -> falcon.App:
    return create_app(
        routes={
            EXEC_PATH: ExecResource(service),
            EXECUTIONS_PATH: ExecutionResource(service, namespace),
            CANCEL_PATH: CancelResource(service),
        },
        credentials={ROLE: bearer},
        accepted_roles={ROLE},
        body_bytes_max=BODY_BYTES_MAX,
        surface="worker",
        error_extra={"protocol": PROTOCOL_VERSION},
    )
