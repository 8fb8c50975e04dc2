"""``POST /mcp``: sessionless MCP, protocol 2026-07-28, built on the official ``mcp-types``.

Theory of operation. Every POST is one self-contained JSON-RPC exchange: no ``initialize``
handshake, no session id, nothing remembered between requests; authorization is per request (the
bearer was checked by the middleware before this responder ran, so HTTP authentication failures
always precede MCP handling). The request passes a ladder, first failure wins:

1. the body is one JSON object (else PARSE_ERROR / INVALID_REQUEST, HTTP 400, ``id: null``);
   an object without ``id`` is a notification: acknowledged with 202 and dropped (the protocol
   defines none for a stateless server to act on);
2. a legacy ``initialize`` → UNSUPPORTED_PROTOCOL_VERSION listing ``2026-07-28`` (HTTP 400): no
   legacy session is ever created;
3. ``params._meta`` carries the protocol version and client capabilities (else INVALID_PARAMS);
4. headers agree with the body: ``MCP-Protocol-Version`` = the ``_meta`` version, ``Mcp-Method`` =
   ``method``, and for ``tools/call`` ``Mcp-Name`` = ``params.name`` — missing or different →
   HEADER_MISMATCH (HTTP 400);
5. the version is one we serve (else UNSUPPORTED_PROTOCOL_VERSION);
6. the method exists (``server/discover``, ``tools/list``, ``tools/call``; else METHOD_NOT_FOUND,
   HTTP 404) and its params validate against the 2026-07-28 schema (else INVALID_PARAMS).

``tools/list`` depends on the credential (the recovery tool is omitted for the operator), so it
is marked ``cacheScope: "private"``. ``tools/call``: an unknown tool or a malformed argument
shape → INVALID_PARAMS; anything the operation refuses (403 recovery required, 400 attestation
or definition content, 409, 503) → a result with ``isError: true`` whose text is the same safe
JSON error as HTTP, with its numeric ``status``.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from typing import Any, Final

import falcon
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UnsupportedProtocolVersionErrorData,
)
from mcp_types import methods as mcp_methods
from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from pydantic import ValidationError

from appliance.core.limits import Limits, LimitsInForce, limits_reader
from appliance.http import read_body
from appliance.management.commands import ID_MAX, Refused, check_arguments
from appliance.management.gateway import CommandGateway
from appliance.management.mcp_tools import OCCURRENCE_TOOL, tool_specs, visible_tools
from appliance.management.replies import Outcome, error_outcome, run_command

log = logging.getLogger("appliance.management.mcp")

PROTOCOL_VERSION: Final = "2026-07-28"
SUPPORTED_VERSIONS: Final = (PROTOCOL_VERSION,)
METHODS: Final = frozenset({"server/discover", "tools/list", "tools/call"})
SERVER_NAME: Final = "appliance-scheduler"
SERVER_INSTRUCTIONS: Final = (
    "Operator management of a replicated cron appliance. list is a stale local view; a "
    "successful cancel only records cancellation intent; after an uncertain outcome inspect "
    "state and never retry creation blindly. Never infer or auto-approve the quiescence "
    "attestation of scheduler_acknowledge_stopped."
)
_HTTP_STATUS_OF_CODE: Final = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def _server_version() -> str:
    try:
        from importlib.metadata import version

        return version("appliance")
    except Exception:  # an unpackaged checkout: the version is informational only
        return "0"


def _unsupported(requested: Any) -> RpcError:
    data: dict[str, Any]
    if isinstance(requested, str):
        data = UnsupportedProtocolVersionErrorData(
            supported=list(SUPPORTED_VERSIONS), requested=requested
        ).model_dump(mode="json")
    else:
        data = {"supported": list(SUPPORTED_VERSIONS)}
    return RpcError(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data)


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("duplicate object key")
        out[key] = value
    return out


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_reject_duplicate_keys)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise RpcError(PARSE_ERROR, "Parse error") from None


_BASE64_SENTINEL: Final = re.compile(r"^=\?base64\?(?P<payload>[A-Za-z0-9+/=]*)\?=$")


def _decode_header_value(value: str | None) -> str | None:
    """A routing header value; ``=?base64?...?=`` carries a value that is not header-safe."""
    if value is None:
        return None
    match = _BASE64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    try:
        return base64.b64decode(match["payload"], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None  # a corrupt header never matches a body value


class McpEndpoint:
    """The Falcon resource for ``POST /mcp`` (see module doc)."""

    def __init__(
        self,
        gateway: CommandGateway,
        limits: LimitsInForce,
        reply_timeout_s: float,
        views: Any = None,
    ) -> None:
        self._views = views  # a live voter's observability: enables the extension tool
        self._gateway = gateway
        self._limits = limits_reader(limits)
        self._reply_timeout_s = reply_timeout_s
        self._specs: tuple[Limits | None, dict[str, Any]] = (None, {})
        self._server_info = {"name": SERVER_NAME, "version": _server_version()}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_body(req)  # 413 beyond the cap, as an HTTP error (transport limit)
        request_id: RequestId | None = None
        try:
            decoded = _decode(body)
            if not isinstance(decoded, dict):
                raise RpcError(INVALID_REQUEST, "Body must be a single JSON-RPC request object")
            if "id" not in decoded:
                self._notification(decoded, req, resp)
                return
            try:
                request = JSONRPCRequest.model_validate(decoded)
            except ValidationError:
                raise RpcError(INVALID_REQUEST, "Invalid JSON-RPC request") from None
            request_id = request.id
            result = self._dispatch(request, req)
        except RpcError as err:
            self._send(resp, _HTTP_STATUS_OF_CODE.get(err.code, 200), self._error(request_id, err))
            return
        response = JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)
        self._send(resp, 200, response.model_dump(mode="json", by_alias=True, exclude_none=True))

    # -- ladder ----------------------------------------------------------------------------------

    def _notification(
        self, decoded: dict[str, Any], req: falcon.Request, resp: falcon.Response
    ) -> None:
        try:
            JSONRPCNotification.model_validate(decoded)
        except ValidationError:
            raise RpcError(INVALID_REQUEST, "Invalid JSON-RPC notification") from None
        version = req.get_header("MCP-Protocol-Version")
        if version not in SUPPORTED_VERSIONS:
            raise _unsupported(version or "")
        resp.status = falcon.HTTP_202
        resp.data = b""

    def _dispatch(self, request: JSONRPCRequest, req: falcon.Request) -> dict[str, Any]:
        params = request.params or {}
        if request.method == "initialize":
            # The handshake does not exist at 2026-07-28; never open a legacy session.
            raise _unsupported(params.get("protocolVersion"))
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            raise RpcError(
                INVALID_PARAMS,
                f"params._meta must be an object carrying {PROTOCOL_VERSION_META_KEY!r} and "
                f"{CLIENT_CAPABILITIES_META_KEY!r}",
            )
        missing = [
            k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta
        ]
        if missing:
            raise RpcError(INVALID_PARAMS, f"params._meta is missing: {', '.join(missing)}")
        version = meta[PROTOCOL_VERSION_META_KEY]
        self._check_headers(request, req, version)
        if not isinstance(version, str):
            raise RpcError(INVALID_PARAMS, "the protocol version must be a string")
        if version not in SUPPORTED_VERSIONS:
            raise _unsupported(version)
        if request.method not in METHODS:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        try:
            mcp_methods.validate_client_request(request.method, version, params)
        except (ValidationError, KeyError):
            raise RpcError(INVALID_PARAMS, f"invalid params for {request.method}") from None
        role = req.context.auth_role
        if request.method == "server/discover":
            result = self._discover()
        elif request.method == "tools/list":
            result = self._tools_list(role)
        else:
            result = self._tools_call(params, role)
        result["_meta"] = {SERVER_INFO_META_KEY: self._server_info}
        # Validate what we send against the official 2026-07-28 result schema.
        return mcp_methods.serialize_server_result(request.method, version, result)

    def _check_headers(self, request: JSONRPCRequest, req: falcon.Request, version: Any) -> None:
        header_version = req.get_header("MCP-Protocol-Version")
        if header_version is None or header_version != version:
            raise RpcError(
                HEADER_MISMATCH,
                "MCP-Protocol-Version header does not match the request's protocol version",
            )
        if req.get_header("Mcp-Method") != request.method:
            raise RpcError(HEADER_MISMATCH, "Mcp-Method header does not match the request method")
        if request.method == "tools/call":
            name = (request.params or {}).get("name")
            header_name = _decode_header_value(req.get_header("Mcp-Name"))
            if header_name is None or header_name != name:
                raise RpcError(
                    HEADER_MISMATCH, "Mcp-Name header does not match the request's tool name"
                )

    # -- methods ---------------------------------------------------------------------------------

    def _discover(self) -> dict[str, Any]:
        return {
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": {"tools": {}},
            "instructions": SERVER_INSTRUCTIONS,
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "private",
        }

    def _tools_list(self, role: str) -> dict[str, Any]:
        return {
            "tools": visible_tools(role, self._limits(), extensions=self._views is not None),
            "resultType": "complete",
            "ttlMs": 0,
            # The list depends on the credential: never share it across authorization contexts.
            "cacheScope": "private",
        }

    def _tools_call(self, params: dict[str, Any], role: str) -> dict[str, Any]:
        name = params.get("name")
        if name == OCCURRENCE_TOOL and self._views is not None:
            return self._occurrence(params.get("arguments"))
        limits = self._limits()
        if self._specs[0] != limits:  # an amend_limits changed them: describe the new ones
            self._specs = (limits, tool_specs(limits))
        spec = self._specs[1].get(name) if isinstance(name, str) else None
        if spec is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        try:
            command = check_arguments(spec["action"], arguments, role, limits)
        except Refused as refused:
            if refused.shape:
                raise RpcError(INVALID_PARAMS, refused.message) from None
            return self._tool_result(
                error_outcome(
                    refused.status,
                    refused.code,
                    refused.message,
                    field=refused.field,
                    problems=refused.problems,
                )
            )
        return self._tool_result(run_command(self._gateway, command, role, self._reply_timeout_s))

    def _occurrence(self, arguments: Any) -> dict[str, Any]:
        """The extension tool: the occurrence detail, or one attempt's report."""
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "arguments must be a JSON object")
        for key in arguments:
            if key not in ("occurrence_id", "attempt"):
                raise RpcError(INVALID_PARAMS, f"{key}: unknown field for {OCCURRENCE_TOOL}")
        ids = {}
        for key in ("occurrence_id", "attempt"):
            value = arguments.get(key)
            if value is None and key == "attempt":
                continue
            if type(value) is not int or not 1 <= value <= ID_MAX:
                raise RpcError(INVALID_PARAMS, f"{key}: must be an integer id in [1, {ID_MAX}]")
            ids[key] = value
        if "attempt" in ids:
            reply = self._views.output(ids["occurrence_id"], ids["attempt"])
        else:
            reply = self._views.occurrence(ids["occurrence_id"])
        body = dict(reply.body)
        if reply.status != 200:
            body.setdefault("status", reply.status)
        return self._tool_result(Outcome(reply.status, body))

    @staticmethod
    def _tool_result(outcome: Outcome) -> dict[str, Any]:
        text = json.dumps(outcome.body, separators=(",", ":"), ensure_ascii=False)
        return {
            "content": [{"type": "text", "text": text}],
            "structuredContent": outcome.body,
            "isError": not outcome.ok,
            "resultType": "complete",
        }

    # -- wire ------------------------------------------------------------------------------------

    @staticmethod
    def _error(request_id: RequestId | None, err: RpcError) -> dict[str, Any]:
        message = JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=ErrorData(code=err.code, message=err.message, data=err.data),
        )
        body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        body["id"] = request_id  # JSON-RPC: "id": null must be present when unknown
        return body

    @staticmethod
    def _send(resp: falcon.Response, status: int, body: dict[str, Any]) -> None:
        resp.status = falcon.code_to_http_status(status)
        resp.content_type = falcon.MEDIA_JSON
        resp.data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
