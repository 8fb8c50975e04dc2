"""A WSGI app behind a ``DirectServer``: the environ of a ``DirectRequest`` (PEP 3333) and the
app's answer as a ``DirectReply``.

The server has already read the whole request (bearer checked, body capped), so ``wsgi.input``
is the body in memory; the app's framing headers are dropped (the server frames the answer).
"""

from __future__ import annotations

import io
import logging
import socket
import ssl
import sys
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from appliance.http.direct_messages import DirectReply, DirectRequest, error_reply
from appliance.http.tls import TLS_PEER_ID_ENV

log = logging.getLogger("appliance.http.direct_server")

FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})


def environ_of(
    request: DirectRequest,
    sock: socket.socket,
    host: str,
    port: int | None,
    ssl_context: ssl.SSLContext | None,
) -> dict[str, Any]:
    """A WSGI environ (PEP 3333) for ``request``, with the TLS peer's node id."""
    try:
        peer = sock.getpeername()
    except OSError:
        peer = ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(request.path).decode("latin-1"),
        "QUERY_STRING": request.query,
        "SERVER_NAME": host,
        "SERVER_PORT": str(port or 0),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": str(peer[0]),
        "REMOTE_PORT": str(peer[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https" if ssl_context is not None else "http",
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(request.body)),
        TLS_PEER_ID_ENV: request.peer_id,  # as waitress's requests carry it (connections.py)
    }
    for name, value in request.headers.items():
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
        elif name != "content-length":
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    return environ


def call_app(
    app: Callable[..., Any],
    request: DirectRequest,
    environ: dict[str, Any],
    *,
    name: str,
    error_extra: Mapping[str, Any],
) -> DirectReply:
    """Run ``app`` for ``request``; an app that raises is logged and answered 500."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None):
        started[:] = [status, headers]
        return lambda data: None  # the legacy write(): no app of ours uses it

    try:
        result = app(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
    except Exception:
        log.exception("%s: %s %s failed", name, request.method, request.path)
        return error_reply(500, "internal_error", "internal server error", error_extra)
    status_line, app_headers = started
    content_type = None
    kept = []
    for header, value in app_headers:
        lowered = header.lower()
        if lowered == "content-type":
            content_type = value
        elif lowered not in FRAMING_HEADERS:
            kept.append((header, value))
    return DirectReply(int(status_line[:3]), body, content_type, tuple(kept))
