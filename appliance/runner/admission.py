"""``POST /scheduler/v1/admit`` on ``admission_addr``: the worker asks for a permit (SPEC §6).

Theory of operation: the listener is a ``DirectServer`` (each connection on its own thread, so a
permit request costs no hand-off between an event loop and a worker thread); the shared HTTP
layer checks the admission bearer before routing and before
any body byte is read (401), and caps the body at 512 KiB (413). The resource only parses the
document strictly (protocol 1, exactly ``binding`` and ``incarnation``) and hands it to the runner
loop through ``submit``, which answers ``(status, body)``: 200 with the permit only after the
grant is committed; 409 only when this voter is not the acquired owner; 403 with a refusal code;
503 when the outcome is uncertain (no quorum, a timeout, the loop too busy to answer in time).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Final

import falcon

from appliance.http import ApiError, create_app, read_json_object
from appliance.http.direct_server import DirectServer
from appliance.protocol.v1 import ADMIT_PATH, PROTOCOL_VERSION
from appliance.secret import Secret

ADMISSION_ROLE_PREFIX: Final = "admission:"  # as appliance/config/credentials.py names it

__all__ = [
    "ADMISSION_CONNECTIONS_MAX",
    "ADMIT_PATH",
    "BODY_BYTES_MAX",
    "PROTOCOL_VERSION",
    "admission_server",
    "create_admission_app",
]

BODY_BYTES_MAX: Final = 512 * 1024
# Each permit request holds its connection (and that connection's thread: the listener is a
# DirectServer) for a loop turn and a Raft commit, and the worker asks for one per execution it
# is launching: as many as its window (running + queued) at once. Four (the old HTTP default)
# capped a burst at about four permits per commit latency (docs/bench-capacity.md).
ADMISSION_CONNECTIONS_MAX: Final = 128
INCARNATION_BYTES_MAX: Final = 128

Submit = Callable[[dict[str, Any], str], tuple[int, dict[str, Any]]]


def _bad(code: str, message: str) -> ApiError:
    return ApiError(400, code, message)


def parse_admit(document: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(binding object, incarnation) or ``ApiError(400)`` naming the problem."""
    version = document.get("protocol")
    if isinstance(version, bool) or version != PROTOCOL_VERSION:
        raise _bad("protocol_version", f"this runner speaks wire protocol {PROTOCOL_VERSION} only")
    unknown = sorted(set(document) - {"protocol", "binding", "incarnation"})
    if unknown:
        raise _bad("invalid_request", f"{unknown[0]}: unknown field")
    binding = document.get("binding")
    if not isinstance(binding, dict):
        raise _bad("invalid_request", "binding: must be an object")
    incarnation = document.get("incarnation")
    if (
        not isinstance(incarnation, str)
        or not incarnation
        or len(incarnation.encode("utf-8")) > INCARNATION_BYTES_MAX
    ):
        raise _bad("invalid_request", f"incarnation: must be 1 to {INCARNATION_BYTES_MAX} bytes")
    return binding, incarnation


class AdmitResource:
    def __init__(self, submit: Submit) -> None:
        self._submit = submit

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        binding, incarnation = parse_admit(read_json_object(req))
        role = getattr(req.context, "auth_role", None)
        if isinstance(role, str) and role.startswith(ADMISSION_ROLE_PREFIX):
            # A fleet worker's own admission credential (issue 33): the owner refuses it for an
            # attempt bound to any other worker.
            caller = role.removeprefix(ADMISSION_ROLE_PREFIX)
            status, body = self._submit(binding, incarnation, caller=caller)  # type: ignore[call-arg]
        else:
            status, body = self._submit(binding, incarnation)
        resp.status = falcon.code_to_http_status(status)
        resp.content_type = falcon.MEDIA_JSON
        body = {"protocol": PROTOCOL_VERSION, **body}
        resp.data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def create_admission_app(submit: Submit, credentials: Mapping[str, Secret | None]) -> falcon.App:
    """``credentials``: every role this process knows (so a cluster or worker token is told
    apart and refused like a wrong one); only ``admission`` and a fleet worker's own
    ``admission:<worker_id>`` are accepted."""
    accepted = {"admission"} | {r for r in credentials if r.startswith(ADMISSION_ROLE_PREFIX)}
    return create_app(
        routes={ADMIT_PATH: AdmitResource(submit)},
        credentials=credentials,
        accepted_roles=accepted,
        body_bytes_max=BODY_BYTES_MAX,
        surface="admission",
        error_extra={"protocol": PROTOCOL_VERSION},
    )


def admission_server(
    submit: Submit,
    credentials: Mapping[str, Secret | None],
    *,
    host: str,
    port: int,
    name: str,
    ssl_context: ssl.SSLContext | None = None,
) -> DirectServer:
    """The admission listener as the runner process starts it (not started yet)."""
    return DirectServer.for_app(
        create_admission_app(submit, credentials),
        host=host,
        port=port,
        name=name,
        body_bytes_max=BODY_BYTES_MAX,
        connection_limit=ADMISSION_CONNECTIONS_MAX,
        ssl_context=ssl_context,
    )
