"""Canonical JSON: the one byte form used for digests and replicated commands.

Sorted keys, no insignificant whitespace, UTF-8 (non-ASCII kept as is). Two replicas that hold the
same value produce the same bytes, so a digest over them is a fact about the value.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))
