"""The one encoding rule for text a script produced (docs/engine.md, "Encoding of script text").

A JavaScript string is a sequence of UTF-16 code units and may hold a lone surrogate
(``'😀'.slice(0, 1)``); UTF-8 cannot encode one, so a report that carried it could be neither
framed, stored nor served. Every string that leaves a script (result, console output, thrown
value, note) is therefore made *well-formed* the way ``String.prototype.toWellFormed`` and
WHATWG's USVString conversion do it: each lone surrogate becomes U+FFFD, a surrogate pair becomes
its character, everything else (NUL and other control characters included) is kept as is.

The child's frame writer, the engine's reports and the worker's store all apply this same
function, so text is replaced once and identically wherever it first meets UTF-8. It is pure and
cheap on well-formed text (one encode attempt).
"""

from __future__ import annotations

from typing import Any

REPLACEMENT_CHARACTER = "\ufffd"
# Nesting deeper than this is not carried as a result value: Python's JSON codec recurses once
# per level, and the report is nested again inside the observation document (a few levels).
JSON_DEPTH_MAX = 256
# What a store accepts: a result at JSON_DEPTH_MAX plus the documents that wrap it.
STORED_JSON_DEPTH_MAX = JSON_DEPTH_MAX + 16


class TooDeep(ValueError):
    """A JSON value nests deeper than JSON_DEPTH_MAX."""


def well_formed(text: str) -> str:
    """text with every lone surrogate replaced by U+FFFD (String.prototype.toWellFormed)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 with surrogatepass keeps every code unit, pairs included; decoding it back
        # with "replace" turns exactly the unpaired ones into U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def well_formed_json(value: Any, depth_max: int = JSON_DEPTH_MAX) -> Any:
    """A JSON value (dict/list/str/number/bool/None) with well_formed applied to every string,
    keys included; TooDeep when it nests deeper than depth_max. Keys that collide once
    replaced keep the last value, as a JSON parser would."""
    return _clean(value, depth_max)


def _clean(value: Any, depth_left: int) -> Any:
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, dict):
        if depth_left <= 0:
            raise TooDeep(f"JSON value nests deeper than {JSON_DEPTH_MAX} levels")
        return {well_formed(str(k)): _clean(v, depth_left - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if depth_left <= 0:
            raise TooDeep(f"JSON value nests deeper than {JSON_DEPTH_MAX} levels")
        return [_clean(v, depth_left - 1) for v in value]
    return value
