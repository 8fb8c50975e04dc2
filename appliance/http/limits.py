"""Request body caps and strict JSON object parsing.

Theory of operation. A cap is checked twice, both times before anything is parsed:

1. ``BodyCap.process_resource`` (after auth, before the responder): a declared ``Content-Length``
   above the cap → 413 without reading a byte of the body.
2. ``read_body`` (called by the responder): reads at most ``cap + 1`` bytes, so a body without a
   declared length (or one that lies) can never make us hold more than one byte over the cap;
   more than ``cap`` → 413.

Waitress buffers a whole request before the application runs, so the server is configured with a
backstop (``server.waitress_body_limit``) slightly above the cap to leave room for chunked
framing; waitress refuses anything beyond it with the same JSON 413, and the application's exact
check above refuses everything between. The cap itself is always accepted.

``parse_json_object`` is deliberately strict: UTF-8 only, one JSON object at the top level,
no duplicate keys (ambiguous for any two parsers), no NaN/Infinity, bounded nesting. Its 400
messages say what is wrong without echoing the input.
"""

from __future__ import annotations

import json
from typing import Any

import falcon

from appliance.http.errors import ApiError

KiB = 1024
MiB = 1024 * KiB
READ_CHUNK_BYTES = 64 * KiB


def too_large(body_bytes_max: int) -> ApiError:
    return ApiError(413, "body_too_large", f"request body exceeds {body_bytes_max} bytes")


def bad_json(message: str) -> ApiError:
    return ApiError(400, "malformed_json", message)


def cap_of(resource: Any, default_bytes_max: int) -> int:
    """A resource may declare its own ``body_bytes_max``; otherwise the surface default."""
    value = getattr(resource, "body_bytes_max", None)
    return default_bytes_max if value is None else int(value)


class BodyCap:
    """Falcon middleware: 413 for a declared Content-Length above the cap, before reading."""

    def __init__(self, body_bytes_max: int) -> None:
        if body_bytes_max < 0:
            raise ValueError("body_bytes_max must be >= 0")
        self.body_bytes_max = body_bytes_max

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        cap = cap_of(resource, self.body_bytes_max)
        req.context.body_bytes_max = cap
        length = req.content_length  # a malformed header raises Falcon's 400 here
        if length is not None and length > cap:
            raise too_large(cap)


def read_body(req: falcon.Request, body_bytes_max: int | None = None) -> bytes:
    """The request body, at most ``body_bytes_max`` bytes (413 beyond, reading ≤ cap + 1)."""
    cap = body_bytes_max if body_bytes_max is not None else _context_cap(req)
    length = req.content_length
    if length is not None:
        if length > cap:
            raise too_large(cap)
        data = _read_up_to(req.bounded_stream, length)
        if len(data) != length:
            raise ApiError(400, "truncated_body", "request body shorter than its Content-Length")
        return data
    # No declared length: the server has de-chunked and buffered the body (waitress does), so
    # reading to EOF terminates; read one byte past the cap to detect an oversized body.
    data = _read_up_to(req.stream, cap + 1)
    if len(data) > cap:
        raise too_large(cap)
    return data


def _context_cap(req: falcon.Request) -> int:
    cap = getattr(req.context, "body_bytes_max", None)
    if cap is None:
        raise RuntimeError("read_body needs a cap: install BodyCap or pass body_bytes_max")
    return int(cap)


def _read_up_to(stream: Any, count: int) -> bytes:
    parts: list[bytes] = []
    remaining = count
    while remaining > 0:
        chunk = stream.read(min(READ_CHUNK_BYTES, remaining))
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


class _DuplicateKey(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object, or ``ApiError(400)`` with a message that echoes nothing."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_json("request body is not valid UTF-8") from None
    try:
        value = json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except _DuplicateKey:
        raise bad_json("request body has a duplicate object key") from None
    except RecursionError:
        raise bad_json("request body is nested too deeply") from None
    except ValueError as exc:
        position = getattr(exc, "pos", None)
        where = f" at character {position}" if isinstance(position, int) else ""
        raise bad_json(f"request body is not valid JSON{where}") from None
    if not isinstance(value, dict):
        raise bad_json("request body must be a JSON object")
    return value


def read_json_object(req: falcon.Request, body_bytes_max: int | None = None) -> dict[str, Any]:
    """Read (capped) and strictly parse the body as one JSON object."""
    return parse_json_object(read_body(req, body_bytes_max))
