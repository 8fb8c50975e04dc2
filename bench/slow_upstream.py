"""A loopback HTTP server that answers every GET after a delay: the slow upstream a script's
``fetch()`` awaits in bench/bench_waiting.py and bench/bench_fleet.py. Not run by pytest."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.ports import free_ports

LISTEN_BACKLOG = 256  # connects arriving at once (64 and more): no SYN retries


class SlowServer:
    """Answers every request after ``delay_s``, many at once (one thread per connection), and
    counts the requests it answered (``served``)."""

    def __init__(self, delay_s: float) -> None:
        delay = delay_s
        self._lock = threading.Lock()
        self._served = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                return None

            def do_GET(self) -> None:
                time.sleep(delay)  # the slow upstream being awaited
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with owner._lock:
                    owner._served += 1

        class Server(ThreadingHTTPServer):
            request_queue_size = LISTEN_BACKLOG
            daemon_threads = True

        self.port = free_ports(1)[0]
        self._server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slow"

    @property
    def served(self) -> int:
        with self._lock:
            return self._served

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
