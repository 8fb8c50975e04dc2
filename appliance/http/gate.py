"""The bearer before the body: waitress's request parser with the credential checked the moment
a request's headers are complete, and the server's own refusals in the appliance's JSON shape.

A refused request is complete at once (401): its declared length, chunking or ``Expect:
100-continue`` are ignored, no body byte is parsed, and the rest of the read that brought the
headers is swallowed, so nothing after them is parsed as another request. Every refusal of the
server's own (400 malformed, 401, 413, 431) closes the connection with a draining close
(appliance.http.connections) and carries the surface's fixed error fields (``"protocol": 1`` on
the worker and admission listeners).
"""

from __future__ import annotations

from typing import Any

from waitress.parser import HTTPRequestParser
from waitress.task import ErrorTask
from waitress.utilities import Error

from appliance.http.errors import error_body

KiB = 1024
HEADER_BYTES_MAX = 32 * KiB


class Unauthorized(Error):
    code = 401
    reason = "Unauthorized"


class GatedParser(HTTPRequestParser):
    """Waitress's request parser with the bearer checked the moment the headers are complete
    (see the module doc); the 401 closes the connection (``JsonErrorTask``)."""

    def __init__(self, adj: Any, gate: Any) -> None:
        super().__init__(adj)
        self._gate = gate

    def received(self, data: bytes) -> int:
        headers_were_finished = self.headers_finished
        consumed = super().received(data)
        if (
            self._gate is None
            or headers_were_finished
            or not self.headers_finished
            or self.empty
            or (self.error is not None and self.error.code == 400)  # malformed: nothing to judge
        ):
            return consumed
        if self._admits(self._gate):
            return consumed
        self.error = Unauthorized("a valid bearer credential is required")
        self.completed = True
        self.expect_continue = False
        self.body_rcv = None
        self.connection_close = True
        return len(data)

    def _admits(self, gate: Any) -> bool:
        # A surface whose requests may authenticate by more than the bearer (the web console's
        # session cookie, its public login page) judges the whole header block instead.
        judge = getattr(gate, "admits_headers", None)
        if judge is not None:
            return bool(judge(self.headers, self.command, self.path))
        authorization = self.headers.get("AUTHORIZATION")
        return gate.role_for(authorization, self.command, self.path) is not None


class JsonErrorTask(ErrorTask):
    """Waitress's protocol-level refusals in the appliance's JSON error shape."""

    def execute(self) -> None:
        error = self.request.error
        server = self.channel.server
        code_by_status = {
            401: "unauthorized",
            413: "body_too_large",
            431: "headers_too_large",
            501: "not_implemented",
        }
        code = code_by_status.get(error.code, "bad_request")
        if error.code == 401:
            message = error.body
            self.response_headers.append(("WWW-Authenticate", "Bearer"))
        elif error.code == 413:
            message = f"request body exceeds {server.appliance_body_bytes_max} bytes"
        elif error.code == 431:
            message = f"request headers exceed {HEADER_BYTES_MAX} bytes"
        else:
            message = "malformed HTTP request"
        body = error_body(code, message, extra=server.appliance_error_extra)
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.channel.drain_before_close = True
        self.content_length = len(body)
        self.write(body)
