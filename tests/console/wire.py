"""An event-stream response read as strictly as a browser reads it: h11 parses the HTTP/1.1
framing (chunk sizes, the last chunk), and a malformed body raises ``h11.RemoteProtocolError``
where Chromium reports ``net::ERR_INVALID_CHUNKED_ENCODING`` (or, for a body cut short,
``ERR_INCOMPLETE_CHUNKED_ENCODING``)."""

from __future__ import annotations

import socket
import time

import h11

WAIT_S = 10.0
READ_BYTES = 65536
# The head waitress writes for an event stream, for bodies read without it (pusher unit tests).
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"


class StrictReader:
    """One response on ``sock``: its head, its body so far, whether the body ended with the
    last chunk (``ended``) and whether the server closed the connection (``closed``)."""

    def __init__(self, sock: socket.socket, *, head: bytes | None = None) -> None:
        self.sock = sock
        self.conn = h11.Connection(h11.CLIENT)
        self.conn.send(h11.Request(method="GET", target="/events", headers=[("Host", "x")]))
        self.response: h11.Response | None = None
        self.body = bytearray()
        self.ended = False
        self.closed = False
        if head is not None:
            self._feed(head)

    def _feed(self, data: bytes) -> None:
        self.conn.receive_data(data)
        while True:
            event = self.conn.next_event()  # raises on a malformed message
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Response):
                self.response = event
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self.ended = True
            elif isinstance(event, h11.ConnectionClosed):
                return

    def _read(self, deadline: float) -> None:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(READ_BYTES)
        except TimeoutError:
            return
        if not data:
            self.closed = True
        self._feed(data)

    def until(self, marker: bytes, timeout_s: float = WAIT_S) -> bytes:
        """The body once it holds ``marker`` (or as it is when the response or time ends)."""
        deadline = time.monotonic() + timeout_s
        while marker not in self.body and not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        return bytes(self.body)

    def to_close(self, timeout_s: float = WAIT_S) -> bytes:
        """The whole body, read until the server closes (an incomplete body raises)."""
        deadline = time.monotonic() + timeout_s
        while not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        return bytes(self.body)
