"""A loopback HTTP(S) server the egress tests fetch from: it records every request it gets.

Routes (by path):
  /echo...            200, JSON of what arrived: method, path, query, headers (lower-case), body
  /status/<code>      that status
  /redirect?to=U&code=C   a redirect (302 by default) to U
  /bytes/<n>          n bytes, with Content-Length
  /chunked/<n>        n bytes, chunked (no Content-Length)
  /reflect/<name>     200, body = the value of request header <name> (an echo endpoint)
  /hold               reads the request, answers nothing; ``closed_by_client`` is set when the
                      client closes the connection (bounded by HOLD_MAX_S)
  /drip               a 200 head promising 100,000 bytes, then one byte every 0.1 s until the
                      client goes away
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.ports import free_ports

HOLD_MAX_S = 30.0


@dataclass(frozen=True)
class Arrived:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    local_address: str


class TargetServer:
    def __init__(
        self, host: str = "127.0.0.1", port: int | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.requests: list[Arrived] = []
        self.server_names: list[str | None] = []  # TLS SNI per handshake
        self.closed_by_client = threading.Event()
        self.holding = threading.Event()
        self._lock = threading.Lock()
        self.host = host
        self.port = port or free_ports(1)[0]
        handler = _handler(self)
        self._server = _QuietServer((host, self.port), handler)
        self._server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            tls.sni_callback = self._on_sni
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _on_sni(self, _sock: Any, name: str | None, _context: Any) -> None:
        self.server_names.append(name)

    def url(self, path: str = "/", host: str | None = None) -> str:
        where = host or self.host
        return f"{self.scheme}://{where}:{self.port}{path}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def record(self, arrived: Arrived) -> None:
        with self._lock:
            self.requests.append(arrived)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # a client that went away mid-answer is what several tests do on purpose


def _handler(target: TargetServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            return None

        def _arrive(self) -> tuple[str, dict[str, list[str]], bytes]:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            split = urlsplit(self.path)
            target.record(
                Arrived(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    self.connection.getsockname()[0],
                )
            )
            return split.path, parse_qs(split.query), body

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _serve(self) -> None:
            path, query, body = self._arrive()
            if path.startswith("/echo"):
                document = {
                    "method": self.command,
                    "path": path,
                    "query": urlsplit(self.path).query,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body.decode("utf-8", "replace"),
                }
                self._send(200, json.dumps(document).encode(), {"Content-Type": "application/json"})
            elif path.startswith("/status/"):
                self._send(int(path.rsplit("/", 1)[1]), b"status")
            elif path == "/redirect":
                code = int(query.get("code", ["302"])[0])
                self._send(code, b"", {"Location": query["to"][0]})
            elif path.startswith("/bytes/"):
                self._send(200, b"x" * int(path.rsplit("/", 1)[1]))
            elif path.startswith("/chunked/"):
                self._chunked(int(path.rsplit("/", 1)[1]))
            elif path.startswith("/reflect/"):
                self._send(200, (self.headers.get(path.rsplit("/", 1)[1]) or "").encode())
            elif path == "/hold":
                self._hold()
            elif path == "/drip":
                self._drip()
            else:
                self._send(404, b"no such route")

        def _chunked(self, size: int) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            left = size
            while left:
                piece = min(left, 8192)
                self.wfile.write(f"{piece:x}\r\n".encode() + b"x" * piece + b"\r\n")
                left -= piece
            self.wfile.write(b"0\r\n\r\n")

        def _hold(self) -> None:
            target.holding.set()
            readable, _, _ = select.select([self.connection], [], [], HOLD_MAX_S)
            if readable:
                with contextlib.suppress(OSError):
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        target.closed_by_client.set()
            self.close_connection = True

        def _drip(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(int(HOLD_MAX_S / 0.1)):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    readable, _, _ = select.select([self.connection], [], [], 0.1)
                    if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                        target.closed_by_client.set()
                        break
            except OSError:
                target.closed_by_client.set()
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    return Handler
