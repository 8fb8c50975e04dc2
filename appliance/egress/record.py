"""One record per egress request, and the attempt's ``egress`` report document.

Theory of operation: the record is what an operator needs to audit what a script did outside —
method, where (origin and path: the query is left out, it often carries data that is not the
operator's), what the policy said and why, which credentials (by name) went with it, what came
back (status or error), how many bytes each way and how long it took. Every text is bounded and
flattened to one line, and the whole report is bounded too (``REPORT_BYTES_MAX`` of JSON: the
observation document that carries it must stay within what the runner reads from a worker, 512
KiB, next to the output and the result); records past that are counted in ``records_dropped``,
never silently lost. ``bounded_report`` is applied again by the worker to what a child sends:
the child runs scripts, so its word is re-checked.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from appliance.config.egress import MAX_REQUESTS_RANGE
from appliance.egress.model import DECISIONS

RECORD_URL_BYTES_MAX: Final = 256
RECORD_TEXT_BYTES_MAX: Final = 256
REPORT_BYTES_MAX: Final = 32 * 1024
RECORD_NAMES_MAX: Final = 32
RECORDS_MAX: Final = MAX_REQUESTS_RANGE[1]
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f]+")
_INT_FIELDS: Final = ("n", "hop", "request_bytes", "response_bytes", "ms")


def bounded_text(value: object, bytes_max: int = RECORD_TEXT_BYTES_MAX) -> str | None:
    if not isinstance(value, str):
        return None
    flat = _UNPRINTABLE.sub(" ", value)
    raw = flat.encode("utf-8", "replace")
    if len(raw) <= bytes_max:
        return flat
    return raw[: bytes_max - 3].decode("utf-8", "ignore") + "..."


def url_for_record(url: str) -> str:
    """Origin and path of a URL as the script wrote it (used before it parsed)."""
    without = url.split("#", 1)[0].split("?", 1)[0]
    return bounded_text(without, RECORD_URL_BYTES_MAX) or ""


def make_record(
    *,
    n: int,
    hop: int,
    method: str,
    url: str,
    decision: str,
    reason: str | None = None,
    credentials: list[str] | None = None,
    address: str | None = None,
    status: int | None = None,
    error: str | None = None,
    request_bytes: int = 0,
    response_bytes: int = 0,
    ms: int = 0,
) -> dict[str, Any]:
    return {
        "n": n,
        "hop": hop,
        "method": bounded_text(method, 32) or "",
        "url": bounded_text(url, RECORD_URL_BYTES_MAX) or "",
        "decision": decision,
        "reason": bounded_text(reason),
        "credentials": list(credentials or [])[:RECORD_NAMES_MAX],
        "address": bounded_text(address, 64),
        "status": status,
        "error": bounded_text(error),
        "request_bytes": request_bytes,
        "response_bytes": response_bytes,
        "ms": ms,
    }


def record_bytes(record: dict[str, Any]) -> int:
    """What a record adds to the report's JSON (with its separator)."""
    return len(json.dumps(record, ensure_ascii=False).encode("utf-8")) + 2


def report_document(
    records: list[dict[str, Any]], over_limit: int, records_dropped: int = 0
) -> dict[str, Any]:
    return {
        "requests": list(records),
        "over_limit": over_limit,
        "records_dropped": records_dropped,
    }


def bounded_report(document: object) -> dict[str, Any] | None:
    """A report from an engine child, re-bounded field by field; None when it is not one."""
    if not isinstance(document, dict) or not isinstance(document.get("requests"), list):
        return None
    records = []
    dropped = _count(document.get("records_dropped"))
    used_bytes = 0
    for item in document["requests"][:RECORDS_MAX]:
        if not isinstance(item, dict):
            continue
        record = make_record(
            n=_count(item.get("n")),
            hop=_count(item.get("hop")),
            method=str(item.get("method") or ""),
            url=str(item.get("url") or ""),
            decision=item.get("decision") if item.get("decision") in DECISIONS else "refused",
            reason=bounded_text(item.get("reason")),
            credentials=[
                name
                for name in (item.get("credentials") or [])
                if isinstance(name, str) and len(name) <= 128
            ],
            address=bounded_text(item.get("address"), 64),
            status=item.get("status") if _is_status(item.get("status")) else None,
            error=bounded_text(item.get("error")),
        )
        for name in _INT_FIELDS[2:]:
            record[name] = _count(item.get(name))
        used_bytes += record_bytes(record)
        if used_bytes > REPORT_BYTES_MAX:
            dropped += 1
            continue
        records.append(record)
    dropped += max(0, len(document["requests"]) - RECORDS_MAX)
    return report_document(records, _count(document.get("over_limit")), dropped)


def _count(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
        return value
    return 0


def _is_status(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999
