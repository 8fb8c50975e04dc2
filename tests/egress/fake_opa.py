"""A stand-in OPA server: the data API is an HTTP contract (POST /v1/data/<path> {"input"} →
{"result"}), and OPA itself is not a Python package. It keeps every input it was asked about."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from appliance.config.urls import parse_origin
from appliance.egress.policy import OpaPolicy
from tests.ports import free_ports


class FakeOpa:
    def __init__(self, answer: tuple[int, Any], delay_event: threading.Event | None = None) -> None:
        self.inputs: list[dict[str, Any]] = []
        self.raw_bodies: list[bytes] = []
        self.paths: list[str] = []
        owner = self
        self.port = free_ports(1)[0]

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                owner.paths.append(self.path)
                owner.raw_bodies.append(body)
                owner.inputs.append(json.loads(body)["input"])
                if delay_event is not None:
                    delay_event.wait(5)
                status, document = answer
                data = json.dumps(document).encode()
                with contextlib.suppress(OSError):  # the client may have given up already
                    self.send_response(status)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def policy(self) -> OpaPolicy:
        return OpaPolicy(parse_origin(self.url))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
