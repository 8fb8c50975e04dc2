"""The HTTP/1.1 messages of a ``DirectServer``: request heads parsed, answers rendered, no I/O.

A request head is the request line and the header lines (at most ``HEADER_BYTES_MAX`` bytes);
anything that is not HTTP/1.0 or 1.1 with RFC 9110 token names, or that two parsers could read
two ways (two different lengths, two credentials, chunked with a length, an unknown transfer
coding, an obsolete folded line), is a 400 ``Refusal``. An answer is rendered as one buffer with
its ``Content-Length`` (and ``Connection: close`` when the connection ends with it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from appliance.http.errors import error_body

REASONS = {
    100: "Continue",
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# Headers that must not appear twice (the same Content-Length twice is tolerated).
SINGLE_HEADERS = frozenset({"content-length", "authorization", "host", "expect"})
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token

HEX = frozenset(b"0123456789abcdefABCDEF")


@dataclass(frozen=True)
class DirectRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    role: str  # the role the bearer proved
    query: str = ""  # the raw query string, without the "?"
    # The node id the connection's verified TLS client certificate names (``tls.member_of``);
    # None without TLS or without such a certificate.
    peer_id: str | None = None


@dataclass(frozen=True)
class DirectReply:
    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[DirectRequest], DirectReply]


class Refusal(Exception):
    """A protocol-level refusal: answered in the JSON shape, then a draining close."""

    def __init__(self, status: int, code: str, message: str, headers: tuple = ()) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def parse_head(head: bytes) -> tuple[str, str, str, str, dict[str, str]]:
    """(method, path, query, version, headers with lower-cased names), or a 400 refusal."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise bad() from None
    request_line, *lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3:
        raise bad()
    method, target, version = parts
    if not method or not _is_token(method) or version not in ("HTTP/1.0", "HTTP/1.1"):
        raise bad()
    if not target.startswith("/"):
        raise bad()
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or not _is_token(name):
            raise bad()  # also an obsolete folded line (it starts with whitespace)
        key = name.lower()
        value = value.strip(" \t")
        known = headers.get(key)
        if known is None:
            headers[key] = value
        elif key in SINGLE_HEADERS:
            if key != "content-length" or known != value:
                raise bad()  # two lengths, two credentials: ambiguous for any two parsers
        else:
            headers[key] = f"{known}, {value}"
    return method, path, query, version, headers


def _is_token(text: str) -> bool:
    return TOKEN.fullmatch(text) is not None


def bad() -> Refusal:
    return Refusal(400, "bad_request", "malformed HTTP request")


def is_chunked(headers: Mapping[str, str]) -> bool:
    """True for ``Transfer-Encoding: chunked``; any other coding (or chunked with a length,
    which two parsers could read two ways) is a 400."""
    coding = headers.get("transfer-encoding")
    if coding is None:
        return False
    if coding.strip().lower() != "chunked" or "content-length" in headers:
        raise bad()
    return True


def content_length(headers: Mapping[str, str]) -> int:
    declared = headers.get("content-length")
    if declared is None:
        return 0
    if not declared.isdigit() or not declared.isascii():
        raise bad()
    return int(declared)


def keeps_alive(version: str, headers: Mapping[str, str]) -> bool:
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens


def error_reply(
    status: int, code: str, message: str, extra: Mapping[str, Any], headers: tuple = ()
) -> DirectReply:
    return DirectReply(status, error_body(code, message, extra=extra), "application/json", headers)


def render(reply: DirectReply, keep: bool, extra: Mapping[str, Any]) -> bytes:
    """The whole response as one buffer (one ``send``)."""
    reason = REASONS.get(reply.status, "Status")
    lines = [f"HTTP/1.1 {reply.status} {reason}", f"Content-Length: {len(reply.body)}"]
    if reply.content_type is not None:
        lines.append(f"Content-Type: {reply.content_type}")
    lines += [f"{name}: {value}" for name, value in reply.headers]
    if not keep:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body


def chunk_size(line: bytes) -> int:
    """The size a chunk-size line states (extensions ignored), or a 400 refusal."""
    size_text = line.split(b";", 1)[0].strip()
    if not size_text or len(size_text) > 16 or not all(c in HEX for c in size_text):
        raise bad()
    return int(size_text, 16)
