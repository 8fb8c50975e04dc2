"""One JSON error shape for every HTTP surface of the appliance.

Every refusal the HTTP layer produces (auth, body caps, malformed JSON, waitress-level protocol
errors) is rendered as ``{"error": {"code": "<slug>", "message": "<safe text>"}}``, plus any
fixed fields the surface adds (the worker protocol adds ``"protocol": 1``). Messages are written
by us, never copied from the request: a presented token, a body fragment or an internal exception
text never reaches the client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import falcon

_SLUG_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    411: "length_required",
    413: "body_too_large",
    415: "unsupported_media_type",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
    503: "unavailable",
}


class ApiError(falcon.HTTPError):
    """An HTTP refusal with a stable machine code and a message that is safe to show anyone."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            falcon.code_to_http_status(status_code),
            title=code,
            description=message,
            headers=dict(headers) if headers else None,
        )
        self.error_code = code
        self.message = message
        self.fields = dict(fields) if fields else {}


def slug_for_status(status_code: int) -> str:
    return _SLUG_BY_STATUS.get(status_code, "error")


def error_document(
    code: str,
    message: str,
    *,
    extra: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{**extra, "error": {"code", "message", **fields}}``."""
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error.update(fields)
    document: dict[str, Any] = dict(extra) if extra else {}
    document["error"] = error
    return document


def error_body(
    code: str,
    message: str,
    *,
    extra: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> bytes:
    return json.dumps(
        error_document(code, message, extra=extra, fields=fields), separators=(",", ":")
    ).encode("utf-8")


def make_error_serializer(extra: Mapping[str, Any] | None = None):
    """A Falcon error serializer rendering every ``HTTPError`` in the shared JSON shape.

    Falcon's own errors (404, 405, invalid headers, unhandled exceptions → 500) carry Falcon's
    generic titles; they are mapped to a slug from the status so no framework text leaks.
    """
    fixed = dict(extra) if extra else {}

    def serialize(req: falcon.Request, resp: falcon.Response, exception: falcon.HTTPError) -> None:
        status_code = int(exception.status_code)
        if isinstance(exception, ApiError):
            body = error_body(
                exception.error_code, exception.message, extra=fixed, fields=exception.fields
            )
        else:
            slug = slug_for_status(status_code)
            body = error_body(slug, _generic_message(status_code), extra=fixed)
        resp.data = body
        resp.content_type = falcon.MEDIA_JSON

    return serialize


def _generic_message(status_code: int) -> str:
    try:
        return falcon.code_to_http_status(status_code).split(" ", 1)[1].lower()
    except (IndexError, ValueError):
        return "error"
