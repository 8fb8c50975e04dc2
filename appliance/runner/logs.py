"""Structured decision logs: one JSON object per line on stderr (issue 5 §9).

Every decision (selection with drop reasons, claims, admissions, outcomes, ownership changes)
is one ``emit(event, **fields)``. Callers pass ids, states and codes only — never a credential
and never source code; ``emit`` also drops any field named like one as a second line of defence.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

_FORBIDDEN_FIELDS = frozenset({"code", "bearer", "token", "authorization", "secret", "password"})


class DecisionLog:
    def __init__(self, node_id: str, stream: TextIO | None = None) -> None:
        self._node_id = node_id
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        record: dict[str, Any] = {"ts": round(time.time(), 3), "node": self._node_id}
        record["event"] = event
        for key, value in fields.items():
            if key.lower() not in _FORBIDDEN_FIELDS:
                record[key] = value
        line = json.dumps(record, separators=(",", ":"), default=str, ensure_ascii=False)
        with self._lock:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass  # a closed stderr must not stop scheduling
