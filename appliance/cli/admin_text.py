"""Text for an operator's terminal: escaped operator-supplied strings, ISO times, fitted tables.

- ``escape`` makes any control or format character visible (``\\x1b``, ``\\u202e``), so a
  schedule named ``"\\u001b[31m"`` cannot colour, move or rewrite the operator's terminal. Every
  table cell passes through it; console output keeps its newlines and tabs (``keep_layout``).
- ``iso_time`` prints an instant (epoch seconds or RFC 3339 text) as ISO 8601: UTC with ``Z`` by
  default, or in the zone of ``--tz`` with its offset; ``relative_time`` as the tables of
  ``list`` show it by default (``in 2m``, ``3m ago``).
- ``fit_table`` lays rows out in columns and shrinks the columns marked shrinkable (names,
  reasons) with an ellipsis until each line fits ``WIDTH_COLUMNS`` (100); a last column marked
  ``wrap`` (a note) continues on the next lines instead, so nothing of it is lost.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

WIDTH_COLUMNS: Final = 100
SHRUNK_COLUMN_MIN: Final = 6
ELLIPSIS: Final = "…"
GAP: Final = "  "


def escape(text: str, *, keep_layout: bool = False) -> str:
    """``text`` with every control/format character written as a visible escape."""
    out: list[str] = []
    for ch in text:
        if keep_layout and ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def cell(value: Any) -> str:
    """A table cell: None is ``-``, an empty string stays empty (a continuation row)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return escape(str(value))


class BadZone(ValueError):
    """``--tz`` names no timezone."""


def zone(name: str | None) -> tzinfo:
    """The zone of ``--tz``: None/``UTC`` → UTC, ``local`` → this machine's, else IANA."""
    if name is None or name.upper() == "UTC":
        return UTC
    if name == "local":
        local = datetime.now().astimezone().tzinfo
        return local or UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadZone(f"--tz: {name!r} is not an IANA timezone (or 'UTC', 'local')") from None


def iso_time(value: Any, tz: tzinfo = UTC) -> str:
    """An instant as ISO 8601 in ``tz`` (``Z`` for UTC); ``-`` for none, the text if unreadable."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        moment = datetime.fromtimestamp(int(value), UTC)
    else:
        text = str(value)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return escape(text)
        if moment.tzinfo is None:
            return escape(text)
    local = moment.astimezone(tz).replace(microsecond=0)
    if tz is UTC:
        return local.strftime("%Y-%m-%dT%H:%M:%SZ")
    return local.isoformat()


def _instant_s(value: Any) -> float | None:
    if isinstance(value, bool) or value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return None if moment.tzinfo is None else moment.timestamp()


def _span(seconds: float) -> str:
    """A duration as a table reads it: ``45s``, ``12m``, ``5h``, ``3d`` (rounded down)."""
    s = int(seconds)
    for unit, size, below in (("s", 1, 120), ("m", 60, 120 * 60), ("h", 3600, 48 * 3600)):
        if s < below:
            return f"{s // size}{unit}"
    return f"{s // 86400}d"


def relative_time(value: Any, now_s: float) -> str:
    """An instant relative to ``now_s``: ``in 2m``, ``3m ago``, ``now``; ``-`` for none."""
    instant = _instant_s(value)
    if instant is None:
        return "-" if value is None or value == "" else escape(str(value))
    delta = instant - now_s
    if abs(delta) < 1:
        return "now"
    return f"in {_span(delta)}" if delta > 0 else f"{_span(-delta)} ago"


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    shrink: bool = False  # may be cut (with an ellipsis) to fit the width
    right: bool = False  # numbers
    wrap: bool = False  # the last column: continued on the next lines instead of cut


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def fit_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], width: int = WIDTH_COLUMNS
) -> str:
    """``rows`` (already cell text or values) as aligned columns, each line at most ``width``."""
    if not rows:
        return "(none)"
    cells = [[cell(row.get(c.key)) for c in columns] for row in rows]
    widths = [max(len(c.header), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    total = sum(widths) + len(GAP) * (len(columns) - 1)
    shrinkable = [i for i, c in enumerate(columns) if c.shrink or c.wrap]
    while total > width:
        # One character at a time off the widest shrinkable column: names and reasons share
        # the cut fairly.
        widest = max(shrinkable, key=lambda i: widths[i], default=None)
        if widest is None or widths[widest] <= SHRUNK_COLUMN_MIN:
            break
        widths[widest] -= 1
        total -= 1
    lines = []
    header = [_cut(c.header, widths[i]) for i, c in enumerate(columns)]
    indent = sum(widths[:-1]) + len(GAP) * (len(columns) - 1)
    for texts in [header, *cells]:
        parts = []
        spill: list[str] = []
        for i, c in enumerate(columns):
            text = texts[i]
            if c.wrap and len(text) > widths[i]:
                # at word boundaries; a word longer than the column is split
                text, *spill = textwrap.wrap(text, widths[i], break_on_hyphens=False) or [""]
            text = _cut(text, widths[i])
            parts.append(text.rjust(widths[i]) if c.right else text.ljust(widths[i]))
        lines.append(GAP.join(parts).rstrip())
        lines.extend((" " * indent + piece).rstrip() for piece in spill)
    return "\n".join(lines)
