"""Request bodies built to an exact serialized size (the 72 KiB boundary)."""

from __future__ import annotations

import json

from tests.management.conftest import DEFINITION

CAP_BYTES = 72 * 1024


def escaped_create(total_bytes: int) -> bytes:
    """A create command of exactly ``total_bytes`` serialized bytes, mostly \\u-escaped source."""
    # A string literal (valid JavaScript: control characters may stand in one), each \x01
    # serialized as \\u0001: 6 bytes for 1 byte of source.
    escaped = "'" + "\x01" * 12_000
    doc = {"action": "create", "definition": {**DEFINITION, "code": escaped + "'"}}
    base = len(json.dumps(doc).encode())
    doc["definition"]["code"] = escaped + "a" * (total_bytes - base) + "'"
    body = json.dumps(doc).encode()
    assert len(body) == total_bytes
    assert len(doc["definition"]["code"].encode()) < 64 * 1024 // 4
    return body
