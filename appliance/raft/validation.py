"""Shared shape rules for identifiers on the wire and in config (SPEC §5)."""

from __future__ import annotations

import re

NODE_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_node_id(node_id: str) -> str:
    if not isinstance(node_id, str) or NODE_ID_PATTERN.fullmatch(node_id) is None:
        raise ValueError(f"node id must be 1-64 characters of A-Za-z0-9_-, got {node_id!r}")
    return node_id
